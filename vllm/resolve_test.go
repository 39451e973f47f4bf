package vllm

import (
	"strings"
	"testing"
)

// TestResolveReleases: every release 0.25.x to 0.31.x, release candidates,
// post releases and dev builds map to the profile the release table's
// evidence gives (docs/vllm-releases.md).
func TestResolveReleases(t *testing.T) {
	for _, c := range []struct {
		in, profile string
		warn        bool
	}{
		{"0.25", "0.25", false}, {"0.25.0", "0.25", false}, {"v0.25.1", "0.25", false}, {"0.25.2", "0.25", true},
		{"0.26", "0.26", false}, {"0.26.0", "0.26", false}, {"0.26.1", "0.26", true}, {"V0.26.0", "0.26", false},
		{"0.27", "main-pre-50620", false}, {"0.27.0", "main-pre-50620", false}, {"0.27.1", "main-pre-50620", false},
		{"0.28", "latest", false}, {"v0.28.0", "latest", false}, {"0.28.1", "latest", true},
		{"0.29.0", "latest", false}, {"0.30.0", "latest", false}, {"0.30.1", "latest", true},
		{"0.31", "latest", true}, {"0.31.0", "latest", true}, {"0.31.2", "latest", true}, {"1.0.0", "latest", true},
		// release candidates and post releases: their release's profile
		{"0.28.0rc1", "latest", false}, {"0.27.0.rc2", "main-pre-50620", false}, {"0.26.0-rc1", "0.26", false},
		{"0.27.1.post1", "main-pre-50620", false}, {"0.31.0rc1", "latest", true},
		// dev builds: the newest release before their base
		{"0.27.1.dev12", "main-pre-50620", false}, {"0.27.0.dev3", "0.26", true}, {"0.28.0.dev7", "main-pre-50620", true},
		{"0.28.0rc1.dev2", "main-pre-50620", true}, {"0.26.0.dev1+gdeadbee", "0.25", true}, {"0.31.0.dev4+cu130", "latest", true},
		{"0.30.1.dev4", "latest", true},
		// a local part naming the golden vectors' commit: proven
		{"0.27.1.dev12+g5ac2684", "main-pre-50620", false}, {"0.28.0.dev1+g5ac2684976ee.d20260807", "main-pre-50620", false},
		// profile names
		{"", "latest", false}, {"latest", "latest", false}, {" latest ", "latest", false},
		{"main-pre-50620", "main-pre-50620", false}, {"main-pre-51481", "main-pre-51481", false},
	} {
		res, err := Resolve(c.in)
		if err != nil {
			t.Errorf("Resolve(%q): %v", c.in, err)
			continue
		}
		if res.Release.String() != c.profile || (res.Warning != "") != c.warn || res.Evidence == "" {
			t.Errorf("Resolve(%q) = %s, warning %q, evidence %q; want %s, warning %v", c.in, res.Release, res.Warning, res.Evidence, c.profile, c.warn)
		}
		if r, err := Parse(c.in); err != nil || r != res.Release {
			t.Errorf("Parse(%q) = %v, %v; Resolve gave %v", c.in, r, err, res.Release)
		}
	}
	if res, _ := Resolve("0.27.1.dev12+g5ac2684"); !res.Proven {
		t.Error("the golden commit's build is not proven")
	}
	if res, _ := Resolve("0.27.1.dev12"); res.Proven {
		t.Error("a dev build without a known commit is proven")
	}
	if res, _ := Resolve("0.31.0"); !strings.Contains(res.Warning, "newer than the newest release") || !strings.Contains(res.Warning, "0.30.0") {
		t.Errorf("0.31.0 warning %q does not name the assumption", res.Warning)
	}
}

func TestResolveErrors(t *testing.T) {
	for _, in := range []string{"1", "0.26.1.2", "latest2", "0.2x", "x", "0.27.1.dev", "0.27.1rc", "0.27.1+", "0.27.1+g5ac2684!",
		"0.27.1.dev1.dev2", "0.27rc1", "0.27.1junk", "v", "..", "0.99999999999.0", "main-pre-1"} {
		_, err := Resolve(in)
		if err == nil || !strings.Contains(err.Error(), "known: 0.25, 0.26, main-pre-50620, main-pre-51481, latest") ||
			!strings.Contains(err.Error(), "0.27.1.dev12+g5ac2684") {
			t.Errorf("Resolve(%q): error %v", in, err)
		}
	}
	for _, in := range []string{"0.24", "0.24.1", "v0.1", "0.25.0.dev3", "0.25.0rc1.dev1"} {
		if _, err := Resolve(in); err == nil || !strings.Contains(err.Error(), "older than the oldest") {
			t.Errorf("Resolve(%q): error %v", in, err)
		}
	}
	for _, in := range []string{"latest,pr1", "latest,", "0.26,pr55776", "0.27.0,pr55776"} {
		if _, err := Resolve(in); err == nil {
			t.Errorf("Resolve(%q) accepted", in)
		}
	}
}

// TestOptions: the options for open pull requests (#55776, #54762) set
// their rules, print back, and leave the plain profiles alone.
func TestOptions(t *testing.T) {
	r := MustParse("latest,pr55776")
	if got := r.Rules(); !got.NixlHashModelRevision || got.NixlConnectorVersion != 8 || got.StartWaveAfterReady {
		t.Fatalf("latest,pr55776 rules %+v", got)
	}
	if r.String() != "latest,pr55776" || MustParse(r.String()) != r || r == Latest() {
		t.Fatalf("latest,pr55776 prints %q", r)
	}
	r = MustParse("0.30.0, PR54762 ,pr55776")
	if got := r.Rules(); !got.StartWaveAfterReady || !got.NixlHashModelRevision || got.WakeSetsRunning {
		t.Fatalf("rules %+v", got)
	}
	if r.String() != "latest,pr55776,pr54762" {
		t.Fatalf("prints %q", r)
	}
	if got := MustParse("0.26,pr54762").Rules(); !got.StartWaveAfterReady || got.NixlConnectorVersion != 5 {
		t.Fatalf("0.26,pr54762 rules %+v", got)
	}
	if got := MustParse("main-pre-51481,pr55776").Rules(); got.NixlConnectorVersion != 8 || !got.WakeSetsRunning {
		t.Fatalf("main-pre-51481,pr55776 rules %+v", got)
	}
	for _, p := range Releases() {
		if got := p.Rules(); got.NixlHashModelRevision || got.StartWaveAfterReady {
			t.Errorf("%s sets an option's rule", p)
		}
	}
}

// TestKnownReleases: the table covers 0.25 to 0.30, in order, each row
// with evidence, and each row resolves to itself.
func TestKnownReleases(t *testing.T) {
	rows := KnownReleases()
	var versions []string
	for i, r := range rows {
		versions = append(versions, r.Version)
		if r.Evidence == "" || r.Warning != "" {
			t.Errorf("%s: evidence %q, warning %q", r.Version, r.Evidence, r.Warning)
		}
		if i > 0 && !less(releases[i-1].version, releases[i].version) {
			t.Errorf("table not in order at %s", r.Version)
		}
		got, err := Resolve(r.Version)
		if err != nil || got != r {
			t.Errorf("Resolve(%s) = %+v, %v; table row %+v", r.Version, got, err, r)
		}
	}
	if strings.Join(versions, " ") != "0.25.0 0.25.1 0.26.0 0.27.0 0.27.1 0.28.0 0.29.0 0.30.0" {
		t.Fatalf("table %v", versions)
	}
}

func FuzzResolve(f *testing.F) {
	for _, s := range []string{"0.27.1.dev12+g5ac2684", "v0.28.0rc1", "latest,pr55776", "0.25", "main-pre-50620", "0.31.0.post1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		res, err := Resolve(s)
		if err != nil {
			return
		}
		// Whatever resolves names a profile whose string parses back to it.
		back, err := Parse(res.Release.String())
		if err != nil || back != res.Release {
			t.Fatalf("%q -> %v, which parses to %v, %v", s, res.Release, back, err)
		}
	})
}
