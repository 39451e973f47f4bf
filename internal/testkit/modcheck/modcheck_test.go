package modcheck

import (
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rootModule is the library's module path.
const rootModule = "github.com/zmqguard/zmqguard"

// rootRequires is every module the root go.mod may require, with why. The
// list only shrinks: a module the library does not need belongs in the
// go.mod of the program, example or adapter that imports it.
var rootRequires = map[string]string{
	"github.com/go-zeromq/zmq4":      "the ZMTP codec and socket types (socket, zmtpguard ...)",
	"github.com/tinylib/msgp":        "generated msgpack codecs; its generator through internal/testkit/vllmwire/tools.go",
	"golang.org/x/crypto":            "CURVE (zmtpguard)",
	"go.uber.org/goleak":             "tests: every TestMain",
	"pgregory.net/rapid":             "tests: property tests of the parsers",
	"github.com/go-zeromq/goczmq/v4": "indirect: zmq4's go.mod",
	"github.com/philhofer/fwd":       "indirect: msgp's runtime",
	"golang.org/x/mod":               "indirect: msgp's generator (x/tools)",
	"golang.org/x/sync":              "indirect: zmq4",
	"golang.org/x/sys":               "indirect: x/crypto, zmq4",
	"golang.org/x/text":              "indirect: x/tools, zmq4",
	"golang.org/x/tools":             "indirect: msgp's generator",
}

// forbidden are the module path prefixes a program importing only the
// library must not build or list: the adapters' and programs' dependencies.
var forbidden = []string{
	"github.com/prometheus/", "go.opentelemetry.io/", "github.com/redis/", "github.com/lmittmann/tint",
	"k8s.io/", "sigs.k8s.io/",
}

// outsideWork are the nested modules go.work does not list, with why.
var outsideWork = map[string]string{
	"bench/pebbe": "cgo and libzmq (the libzmq comparison); .ci/run builds and vets it on its own",
}

// root is the repository root, three levels up.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.work")); err != nil {
		t.Fatalf("no go.work at the repository root %s: %v", r, err)
	}
	return r
}

// goCmd runs the go command in dir with env added, at most 4 minutes, and
// returns its stdout; a failure fails the test with its output.
func goCmd(t *testing.T, dir string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, out, stderr.String())
	}
	return out
}

// modFile is what `go mod edit -json` prints, the parts read here.
type modFile struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

func readMod(t *testing.T, dir string) modFile {
	t.Helper()
	var m modFile
	if err := json.Unmarshal(goCmd(t, dir, nil, "mod", "edit", "-json"), &m); err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	return m
}

// workDirs returns the directories go.work uses, relative to root ("." for
// the root module).
func workDirs(t *testing.T, root string) []string {
	t.Helper()
	var w struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(goCmd(t, root, nil, "work", "edit", "-json"), &w); err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	return dirs
}

// TestRootRequiresOnlyTheLibrarys fails when the root go.mod requires a
// module that is not in rootRequires (or no longer requires one that is:
// then the list shrinks), or replaces anything.
func TestRootRequiresOnlyTheLibrarys(t *testing.T) {
	m := readMod(t, root(t))
	if m.Module.Path != rootModule {
		t.Fatalf("root module is %q, want %q", m.Module.Path, rootModule)
	}
	got := map[string]bool{}
	for _, r := range m.Require {
		got[r.Path] = true
		if _, ok := rootRequires[r.Path]; !ok {
			t.Errorf("the root go.mod requires %s %s: only what the library packages import belongs there; a module that only cmd/, examples/ or an adapter needs goes in that module's go.mod", r.Path, r.Version)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(rootRequires)) {
		if !got[p] {
			t.Errorf("the root go.mod no longer requires %s: remove it from rootRequires", p)
		}
	}
	for _, r := range m.Replace {
		t.Errorf("the root go.mod replaces %s: a program depending on zmqguard ignores it (replace in go.work or a sub-module instead)", r.Old.Path)
	}
}

// TestEveryModuleInWork fails when a go.mod under the repository is
// neither listed in go.work (which CI iterates) nor in outsideWork, when a
// listed directory has no go.mod, or when a sub-module does not build
// alone: each must replace every repository module it requires by a
// relative path.
func TestEveryModuleInWork(t *testing.T) {
	r := root(t)
	listed := map[string]bool{}
	for _, d := range workDirs(t, r) {
		listed[d] = true
		if _, err := os.Stat(filepath.Join(r, d, "go.mod")); err != nil {
			t.Errorf("go.work uses %s, which has no go.mod", d)
		}
	}
	if !listed["."] {
		t.Errorf("go.work does not use the root module (.)")
	}
	var found []string
	err := filepath.WalkDir(r, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		rel, _ := filepath.Rel(r, filepath.Dir(path))
		found = append(found, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range found {
		if _, ok := outsideWork[dir]; !listed[dir] && !ok {
			t.Errorf("%s/go.mod is not in go.work: add it to go.work's use list so that CI builds, vets, tidies and tests it", dir)
		}
		if dir == "." {
			continue
		}
		m := readMod(t, filepath.Join(r, dir))
		if want := rootModule + "/" + dir; m.Module.Path != want {
			t.Errorf("%s/go.mod declares module %q, want %q (the import paths do not change)", dir, m.Module.Path, want)
		}
		replaced := map[string]string{}
		for _, rp := range m.Replace {
			replaced[rp.Old.Path] = rp.New.Path
		}
		for _, req := range m.Require {
			if req.Path != rootModule && !strings.HasPrefix(req.Path, rootModule+"/") {
				continue
			}
			to, ok := replaced[req.Path]
			if !ok || !strings.HasPrefix(to, ".") {
				t.Errorf("%s/go.mod requires %s without replacing it by a relative path: it would not build alone in a clone", dir, req.Path)
				continue
			}
			target := strings.TrimPrefix(strings.TrimPrefix(req.Path, rootModule), "/")
			if target == "" {
				target = "."
			}
			if got := filepath.ToSlash(filepath.Clean(filepath.Join(dir, to))); got != target {
				t.Errorf("%s/go.mod replaces %s by %s (%s), want the directory %s", dir, req.Path, to, got, target)
			}
		}
	}
	if len(found) < 6 {
		t.Errorf("found %d modules (%v); want at least the root, cmd, examples and the three adapters", len(found), found)
	}
	t.Logf("modules: %v; go.work lists %d", found, len(listed))
}

// listModules writes a program importing pkgs in a temporary module of its
// own (outside the workspace, replacing each repository module by its
// directory, with the repository's go.sum files), runs go mod tidy and
// go build, and returns `go list -m all`.
func listModules(t *testing.T, pkgs []string, mods map[string]string) []string {
	t.Helper()
	dir := t.TempDir()
	var gomod, gosum strings.Builder
	gomod.WriteString("module example.com/uses\n\ngo 1.26.0\n\n")
	for _, p := range slices.Sorted(maps.Keys(mods)) {
		gomod.WriteString("require " + p + " v0.0.0\nreplace " + p + " => " + mods[p] + "\n")
		sum, err := os.ReadFile(filepath.Join(mods[p], "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		gosum.Write(sum)
	}
	prog := "package main\n\nimport (\n"
	for _, p := range pkgs {
		prog += "\t_ \"" + p + "\"\n"
	}
	prog += ")\n\nfunc main() {}\n"
	for name, text := range map[string]string{"go.mod": gomod.String(), "go.sum": gosum.String(), "main.go": prog} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false"}
	goCmd(t, dir, env, "mod", "tidy")
	goCmd(t, dir, env, "build", "-o", filepath.Join(t.TempDir(), "uses"), ".")
	return strings.Fields(string(goCmd(t, dir, env, "list", "-m", "-f", "{{.Path}}", "all")))
}

// hits returns the modules of list that start with a forbidden prefix.
func hits(list []string) []string {
	var bad []string
	for _, m := range list {
		for _, f := range forbidden {
			if strings.HasPrefix(m, f) {
				bad = append(bad, m)
			}
		}
	}
	return bad
}

// TestLibraryUserListsNoAdapterModule is the acceptance check: a
// program that imports only socket lists no Prometheus, OpenTelemetry,
// Redis, tint or Kubernetes module in `go list -m all`. A second program
// importing metrics/zgprom must list Prometheus: the check sees a module
// that is there.
func TestLibraryUserListsNoAdapterModule(t *testing.T) {
	r := root(t)
	list := listModules(t, []string{rootModule + "/socket"}, map[string]string{rootModule: r})
	if !slices.Contains(list, "github.com/go-zeromq/zmq4") {
		t.Fatalf("go list -m all of a program importing socket lists no zmq4, so it listed nothing real: %v", list)
	}
	if bad := hits(list); len(bad) > 0 {
		t.Errorf("a program importing only socket lists %v in go list -m all (all: %v)", bad, list)
	}
	t.Logf("a program importing only socket lists %d modules: %v", len(list), list)

	list = listModules(t, []string{rootModule + "/metrics/zgprom"},
		map[string]string{rootModule: r, rootModule + "/metrics/zgprom": filepath.Join(r, "metrics", "zgprom")})
	if !slices.Contains(hits(list), "github.com/prometheus/client_golang") {
		t.Errorf("a program importing metrics/zgprom does not list github.com/prometheus/client_golang, so the check above cannot see one: %v", list)
	}
}
