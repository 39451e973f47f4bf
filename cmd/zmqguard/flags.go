package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/vllm"
)

// usageError is a bad command line: exit code 2, with the command's usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// badFlag is the one-line refusal of a flag's value: the flag, the value
// as given (a string quoted, a [shown] not) and what is wanted, e.g.
// "--clients 9: want 1..8".
func badFlag(name string, value any, want string) error {
	if s, ok := value.(string); ok {
		return usagef("%s %q: %s", name, s, want)
	}
	return usagef("%s %v: %s", name, value, want)
}

// shown is a flag value badFlag writes as it is, unquoted (a size: 10KiB).
type shown string

// parseInterleaved parses args with fs, letting flags stand before, between
// and after positional arguments (Go's flag package stops at the first
// positional). It returns the positionals in order. A "--" ends the flags:
// everything after it is positional, even when it starts with "-".
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" && !isFlagValue(fs, args[:consumed-1]) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// isFlagValue reports whether the last of args is a flag that takes the next
// argument as its value (a non-boolean flag written without "="), in which
// case a "--" that follows it was that value, not the terminator.
func isFlagValue(fs *flag.FlagSet, args []string) bool {
	if len(args) == 0 {
		return false
	}
	a := args[len(args)-1]
	if len(a) < 2 || a[0] != '-' || a == "--" || strings.Contains(a, "=") {
		return false
	}
	name := strings.TrimLeft(a, "-")
	f := fs.Lookup(name)
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}

// sizeValue is a flag.Value for a byte size: a plain number of bytes
// (1048576) or a number with a unit, binary (KiB, MiB, GiB, TiB; K, M, G,
// T) or decimal (kB, MB, GB, TB), case-insensitive, e.g. 1MiB, 64KiB,
// 1.5MB. Sizes over maxSize (1 TiB, zmtpguard's upper bound for a message
// size) are refused, whatever the unit.
type sizeValue int64

func (s *sizeValue) String() string { return formatSize(int64(*s)) }

func (s *sizeValue) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeValue(n)
	return nil
}

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// maxSize is the largest size a size flag accepts: 1 TiB.
const maxSize = 1 << 40

// parseSize parses a byte size as sizeValue describes it.
func parseSize(v string) (int64, error) {
	s := strings.ToLower(strings.TrimSpace(v))
	mult := 1.0
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	if s == "" || strings.Trim(s, "0123456789.") != "" || strings.Count(s, ".") > 1 || s == "." {
		return 0, errors.New("not a size (want e.g. 1048576, 1MiB, 64KiB)")
	}
	bad := errors.New("not a size (want e.g. 1048576, 1MiB, 64KiB)")
	if !strings.Contains(s, ".") {
		// A whole number is multiplied exactly, with an overflow check: a
		// float would round large values (and formatSize's renderings
		// must parse back to the same number).
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, bad
		}
		if n > maxSize/int64(mult) {
			return 0, errTooBig(v)
		}
		return n * int64(mult), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) {
		return 0, bad
	}
	if f*mult > maxSize {
		return 0, errTooBig(v)
	}
	return int64(f * mult), nil
}

func errTooBig(v string) error {
	return fmt.Errorf("size %s is over the largest allowed, 1TiB", strings.TrimSpace(v))
}

// formatSize renders n with the largest binary unit that divides it.
func formatSize(n int64) string {
	switch {
	case n != 0 && n%(1<<40) == 0:
		return strconv.FormatInt(n>>40, 10) + "TiB"
	case n != 0 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n != 0 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n != 0 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// commandSpec describes one command for its usage text.
type commandSpec struct {
	name     string
	synopsis string // after "zmqguard NAME", e.g. "ADDR... [flags]"
	summary  string // one line, for the command list
	help     string // paragraphs after the synopsis
	// args says the command takes positional arguments (env.args);
	// without it, any positional argument is a usage error.
	args bool
}

// newFlagSet returns the flag set of a command, with the global flags
// registered on it (defaulting to what was given before the command name).
func newFlagSet(e *env, spec commandSpec) *flag.FlagSet {
	fs := flag.NewFlagSet(spec.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.registerGlobal(fs)
	fs.Usage = func() {}
	return fs
}

// writeUsage writes a command's usage text with every flag it accepts.
func writeUsage(w io.Writer, fs *flag.FlagSet, spec commandSpec) {
	fmt.Fprintf(w, "usage: zmqguard %s %s\n\n", spec.name, spec.synopsis)
	if spec.help != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(spec.help))
	}
	fmt.Fprintln(w, "Flags (-flag or --flag, before or after the arguments; -- ends the flags):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseCommand parses a command's arguments. On -h it writes the usage to
// stdout and returns done with code 0; on a bad flag it writes the error and
// the usage to stderr and returns done with code 2.
func parseCommand(e *env, fs *flag.FlagSet, spec commandSpec, args []string) (pos []string, code int, done bool) {
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		writeUsage(e.stdout, fs, spec)
		return nil, 0, true
	}
	if err != nil {
		usageLine(e.stderr, spec, err)
		return nil, 2, true
	}
	if !spec.args && len(pos) > 0 {
		usageLine(e.stderr, spec, fmt.Errorf("unexpected argument %q", pos[0]))
		return nil, 2, true
	}
	if err := e.setupLogger(); err != nil {
		usageLine(e.stderr, spec, err)
		return nil, 2, true
	}
	logReleaseWarnings(fs, e.logger)
	return pos, 0, false
}

// usageLine writes a usage error as one line that points to the command's
// help, rather than the whole help.
func usageLine(w io.Writer, spec commandSpec, err error) {
	fmt.Fprintf(w, "zmqguard %s: %s (see 'zmqguard %s -h')\n", spec.name, strings.TrimPrefix(err.Error(), spec.name+": "), spec.name)
}

// finish turns a command's error into an exit code, writing it (and for a
// usage error, the usage) to stderr.
func finish(e *env, spec commandSpec, err error) int {
	if err == nil {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		usageLine(e.stderr, spec, err)
		return 2
	}
	// "zmqguard coordinator: coordinator: ..." would say the name twice.
	fmt.Fprintf(e.stderr, "zmqguard %s: %s\n", spec.name, strings.TrimPrefix(err.Error(), spec.name+": "))
	return 1
}

// releaseValue is a --vllm-version flag: a vllm.Release resolved by
// vllm.Resolve from a profile name, a release number or a build's version
// string. warn keeps the resolution's warning (an assumption beyond the
// release table) for [logReleaseWarnings], which logs it once the logger
// exists.
type releaseValue struct {
	r    *vllm.Release
	warn *string
}

func (v releaseValue) String() string {
	if v.r == nil {
		return vllm.Latest().String()
	}
	return v.r.String()
}

func (v releaseValue) Set(s string) error {
	res, err := vllm.Resolve(s)
	if err != nil {
		return err
	}
	*v.r, *v.warn = res.Release, res.Warning
	return nil
}

// releaseFlag adds --vllm-version to fs, the one flag every command that
// speaks vLLM's wire uses to name the release it talks to; the default is
// latest (current vLLM main). The returned Release is set when fs parses.
func releaseFlag(fs *flag.FlagSet) *vllm.Release {
	r := new(vllm.Release)
	var names []string
	for _, rel := range vllm.Releases() {
		names = append(names, rel.String())
	}
	fs.Var(releaseValue{r, new(string)}, "vllm-version",
		"the vLLM `release` the peers run: a profile ("+strings.Join(names, ", ")+"), a release number (0.27, 0.27.1, v0.28.0) "+
			"or a build's version (0.28.0rc1, 0.27.1.dev12+g5ac2684), mapped to a profile by evidence ('zmqguard version --profiles' "+
			"lists them); options ,pr54762 ,pr55776 for builds carrying those open vLLM pull requests (default latest)")
	return r
}

// logReleaseWarnings logs, once, at WARN the assumption a --vllm-version
// value rests on (a release newer than zmqguard's table, a patch release
// missing from it, a dev build between two profiles).
func logReleaseWarnings(fs *flag.FlagSet, logger *slog.Logger) {
	fs.Visit(func(f *flag.Flag) {
		if v, ok := f.Value.(releaseValue); ok && *v.warn != "" {
			logger.Warn(*v.warn, "flag", "--"+f.Name, "profile", v.r.String())
		}
	})
}
