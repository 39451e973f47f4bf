package main

import (
	"context"
	"flag"
)

// command is one zmqguard command, in the one shape every command has: its
// usage text (spec), a flags struct F that register binds to the command's
// flag set, and a run function that gets the parsed flags and the
// environment (output streams, logger, positional arguments) and returns
// an error. Everything around run is shared (main): the flag set with the
// global flags, parsing and -h, the logger, and the one exit line.
type command[F any] struct {
	spec     commandSpec
	register func(fs *flag.FlagSet, fl *F)
	run      func(ctx context.Context, fl *F, e *env) error
}

// runner is what the command table holds: any command[F].
type runner interface {
	commandSpec() commandSpec
	main(ctx context.Context, e *env, args []string) int
	flags(e *env) *flag.FlagSet
}

func (c command[F]) commandSpec() commandSpec { return c.spec }

// flagSet builds the command's flag set (the global flags included) bound
// to a new flags struct.
func (c command[F]) flagSet(e *env) (*flag.FlagSet, *F) {
	fs := newFlagSet(e, c.spec)
	fl := new(F)
	if c.register != nil {
		c.register(fs, fl)
	}
	return fs, fl
}

// flags returns the command's flag set, for tests that check what every
// command accepts.
func (c command[F]) flags(e *env) *flag.FlagSet {
	fs, _ := c.flagSet(e)
	return fs
}

// main is every command's prologue and exit: it builds the flag set (the
// global flags included), parses args (-h writes the usage to stdout and
// exits 0; a bad flag writes one line to stderr and exits 2), sets up the
// logger, runs the command with the signal context ctx, and turns its
// error into the exit code and at most one line on stderr (finish).
func (c command[F]) main(ctx context.Context, e *env, args []string) int {
	fs, fl := c.flagSet(e)
	pos, code, done := parseCommand(e, fs, c.spec, args)
	if done {
		return code
	}
	e.args = pos
	return finish(e, c.spec, c.run(ctx, fl, e))
}
