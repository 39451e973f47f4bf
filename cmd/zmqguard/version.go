package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/zmqguard/zmqguard/vllm"
)

var versionSpec = commandSpec{
	name:     "version",
	synopsis: "[--profiles]",
	summary:  "print the module version and VCS revision (also --version); --profiles: the vLLM release table",
	help: `Prints one line: the module version (or "(devel)" for a build from a
checkout), the VCS revision and commit time when the binary was built
from a repository (with "+dirty" for uncommitted changes), and the Go
version.

With --profiles it prints instead the vLLM profiles (rule sets) and the
release table --vllm-version uses: each vLLM release, the profile it maps
to, "proven" or "inferred", and the evidence (the pull requests that
separate the profiles and what places them before or after the release).
docs/vllm-releases.md in the repository has the same table with its
citations.`,
}

// versionFlags are the flags of version.
type versionFlags struct {
	profiles bool
}

// versionCmd is the version command.
var versionCmd = command[versionFlags]{spec: versionSpec, register: func(fs *flag.FlagSet, fl *versionFlags) {
	fs.BoolVar(&fl.profiles, "profiles", false, "print the vLLM profiles and the release table --vllm-version maps by")
}, run: runVersion}

// runVersion is the run function of version.
func runVersion(_ context.Context, fl *versionFlags, e *env) error {
	if fl.profiles {
		_, err := io.WriteString(e.stdout, profilesText())
		return err
	}
	_, err := e.stdout.Write([]byte(versionLine() + "\n"))
	return err
}

// profilesText renders vllm.Releases and vllm.KnownReleases: one line per
// profile with its rules, then one line per release with its profile, the
// evidence class and the evidence.
func profilesText() string {
	var b strings.Builder
	b.WriteString("vLLM profiles (rule sets):\n")
	for _, r := range vllm.Releases() {
		rules := r.Rules()
		stats := "[waiting, running]"
		if rules.StatsKVCacheUsage {
			stats = "[waiting, running, kv_cache_usage]"
		}
		events := "tagged arrays"
		if rules.KVEventsMapForm {
			events = "tagged maps"
		}
		fmt.Fprintf(&b, "  %-15s stats %s, wake sets running %v, scale-up pauses %v, NIXL connector version %d, KV events %s, replay topic frame %v\n",
			r, stats, rules.WakeSetsRunning, rules.ScaleUpPauses, rules.NixlConnectorVersion, events, rules.KVReplayTopicFrame)
	}
	b.WriteString("options: ,pr55776 (NIXL hash adds the model revision, connector version 8; vLLM PR #55776, open), " +
		",pr54762 (START_DP_WAVE for wave 0 after READY; vLLM PR #54762, open)\n")
	b.WriteString("\nvLLM releases (--vllm-version accepts each, its minor X.Y, and builds: X.Y.ZrcN, X.Y.Z.postN, X.Y.Z.devN+local):\n")
	for _, k := range vllm.KnownReleases() {
		class := "inferred"
		if k.Proven {
			class = "proven"
		}
		fmt.Fprintf(&b, "  %-7s -> %-15s %-8s %s\n", k.Version, k.Release, class, k.Evidence)
	}
	rows := vllm.KnownReleases()
	fmt.Fprintf(&b, "  newer than %s -> latest, with a warning naming the assumption\n", rows[len(rows)-1].Version)
	fmt.Fprintf(&b, "  X.Y.Z.devN -> the profile of the newest release before X.Y.Z (warning when X.Y.Z's differs); "+
		"+g5ac2684 (the golden vectors' commit) -> main-pre-50620, proven\n")
	return b.String()
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
