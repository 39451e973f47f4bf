package main

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
)

var versionSpec = commandSpec{
	name:     "version",
	synopsis: "",
	summary:  "print the module version and VCS revision (also --version)",
	help: `Prints one line: the module version (or "(devel)" for a build from a
checkout), the VCS revision and commit time when the binary was built
from a repository (with "+dirty" for uncommitted changes), and the Go
version.`,
}

// versionFlags are the flags of version: only the global ones.
type versionFlags struct{}

// versionCmd is the version command.
var versionCmd = command[versionFlags]{spec: versionSpec, run: runVersion}

// runVersion is the run function of version.
func runVersion(_ context.Context, _ *versionFlags, e *env) error {
	_, err := e.stdout.Write([]byte(versionLine() + "\n"))
	return err
}

// versionLine renders the build information: "zmqguard VERSION [rev
// REVISION[+dirty] TIME] GOVERSION".
func versionLine() string {
	var b strings.Builder
	b.WriteString("zmqguard ")
	info, ok := debug.ReadBuildInfo()
	if !ok {
		b.WriteString("(unknown) " + runtime.Version())
		return b.String()
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	b.WriteString(v)
	var rev, at string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		b.WriteString(" rev " + rev)
		if dirty {
			b.WriteString("+dirty")
		}
		if at != "" {
			b.WriteString(" " + at)
		}
	}
	b.WriteString(" " + info.GoVersion)
	return b.String()
}
