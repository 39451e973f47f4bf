// Command zmqguard runs zmqguard's references and tools without writing Go:
// a demo of the references under attack, the DP coordinator, a NIXL handshake
// listener, the handshake probe, the hostile scanner and a measuring sink.
//
// Usage:
//
//	zmqguard [global flags] COMMAND [flags] [ARGS]
//
// Commands:
//
//	demo                the product tour: coordinator, engines, a front-end, a handshake
//	                    listener and decode clients on loopback, attacked by the scanner
//	coordinator         run a vLLM-compatible DP coordinator until SIGINT/SIGTERM
//	handshake-listener  serve demo NIXL handshake metadata until SIGINT/SIGTERM
//	probe ADDR          triage a NIXL handshake listener step by step
//	scan ADDR...        replay the built-in hostile corpus at your own services
//	sink                a guarded PULL that counts valid messages, for measuring a machine
//	version             print the module version and VCS revision (also --version)
//	kv-events           follow vLLM KV-cache event publishers, one JSON line per event
//	kv-publish          publish synthetic vLLM KV-event batches (demos and load)
//	kv-index            a KV-cache index of vLLM engines, scored over HTTP (POST /score)
//
// ADDR is a ZeroMQ endpoint such as tcp://127.0.0.1:5600. Flags use Go's
// style (-flag or --flag, -flag=value or -flag value) and may stand before or
// after the arguments; "--" ends the flags. Every command answers -h with its
// own flags. The global flags --log-format (auto, text, json, tint) and
// --log-level (debug, info, warn, error) are accepted by every command.
//
// Logs go to stderr. stdout carries only results: the counters as one JSON
// line (coordinator, handshake-listener, sink), the probe's report, the scan's
// table, the demo's final table.
//
// Exit codes: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	stop()
	os.Exit(code)
}

// commands maps each command name to its implementation.
var commands = []struct {
	spec commandSpec
	run  func(ctx context.Context, e *env, args []string) int
}{
	{demoSpec, runDemo},
	{coordinatorSpec, runCoordinator},
	{listenerSpec, runListener},
	{probeSpec, runProbe},
	{scanSpec, runScan},
	{sinkSpec, runSink},
	{versionSpec, runVersion},
	{keygenSpec, runKeygen},
	{outputsSpec, runOutputs},
	{kvEventsSpec, runKVEvents},
	{kvPublishSpec, runKVPublish},
	{kvIndexSpec, runKVIndex},
}

// run is the whole program: it parses the global flags and the command name
// and dispatches. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, term bool) int {
	e := newEnv(stdout, stderr, term)
	fs := flag.NewFlagSet("zmqguard", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.registerGlobal(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			writeMainUsage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "zmqguard: %v (see 'zmqguard -h')\n", err)
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	rest := fs.Args()
	if len(rest) == 0 {
		writeMainUsage(stderr, fs)
		return 2
	}
	name := rest[0]
	if name == "help" {
		if len(rest) > 1 {
			return run(ctx, []string{rest[1], "-h"}, stdout, stderr, term)
		}
		writeMainUsage(stdout, fs)
		return 0
	}
	for _, c := range commands {
		if c.spec.name == name {
			return c.run(ctx, e, rest[1:])
		}
	}
	fmt.Fprintf(stderr, "zmqguard: unknown command %q (see 'zmqguard -h')\n", name)
	return 2
}

func writeMainUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: zmqguard [global flags] COMMAND [flags] [ARGS]")
	fmt.Fprintln(w, "\nZeroMQ receive loops that no peer can kill: references and tools.")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-20s %s\n", c.spec.name, c.spec.summary)
	}
	fmt.Fprintln(w, "\nADDR is a ZeroMQ endpoint such as tcp://127.0.0.1:5600.")
	fmt.Fprintln(w, "Run 'zmqguard COMMAND -h' for a command's flags. Global flags (accepted by every command):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExit codes: 0 success, 1 failure, 2 usage error.")
}
