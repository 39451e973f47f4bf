package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// env is what every command runs with: its output streams, whether stderr is
// a terminal, and the global logging flags.
type env struct {
	stdout, stderr io.Writer
	// term reports whether stderr is a terminal (tint colours, \r status).
	term bool

	logFormat string
	logLevel  string
	logger    *slog.Logger

	// args are the command's positional arguments, after its flags.
	args []string
}

func newEnv(stdout, stderr io.Writer, term bool) *env {
	return &env{stdout: stdout, stderr: stderr, term: term, logFormat: "auto", logLevel: "info"}
}

// isTerminal reports whether f is a character device (a terminal), without
// any dependency beyond the standard library.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// registerGlobal registers the flags every command accepts on fs.
func (e *env) registerGlobal(fs *flag.FlagSet) {
	fs.StringVar(&e.logFormat, "log-format", e.logFormat,
		"log format on stderr: auto (tint on a terminal, else text), text, json or tint")
	fs.StringVar(&e.logLevel, "log-level", e.logLevel, "lowest level logged: debug, info, warn or error")
}

// setupLogger builds the logger from the global flags and makes it slog's
// default, so library code that logs through slog.Default writes through it.
func (e *env) setupLogger() error {
	l, err := newLogger(e.stderr, e.logFormat, e.logLevel, e.term)
	if err != nil {
		return err
	}
	e.logger = l
	slog.SetDefault(l)
	return nil
}

// parseLevel parses a --log-level value.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
}

// newLogger returns a logger writing to w in format (auto, text, json or
// tint) at level. auto means tint when term is set (w is a terminal) and
// slog's text format otherwise.
func newLogger(w io.Writer, format, level string, term bool) (*slog.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(format) {
	case "auto", "":
		if term {
			return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly})), nil
		}
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	case "tint":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, NoColor: !term})), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: jsonAttr})), nil
	}
	return nil, fmt.Errorf("--log-format %q: want auto, text, json or tint", format)
}

// jsonAttr renders durations in JSON logs as Go duration strings ("1.5s")
// rather than slog's integer nanoseconds, which read as a size or a count.
func jsonAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// logText renders a user- or peer-supplied string as a log attribute:
// escaped and capped, but not quoted (the handler quotes as its format
// needs; a quoted value would appear double-quoted in JSON).
func logText(s string) string { return ratelog.Escape(s, 128) }
