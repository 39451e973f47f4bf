package layering_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/layering"
)

// root is the repository's root, three levels up.
var root = filepath.Join("..", "..", "..")

// TestLayers holds the repository's layering (issue 40): every package is
// in layering.Repo; a library package's imports point to its own layer or
// below and never to a tool or internal/testkit; the stack's (L0, L1)
// go list -deps holds no wire, reference, metrics or testkit package and no
// third-party module besides zmq4's and msgp's.
func TestLayers(t *testing.T) {
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	pkgs, err := layering.List(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range layering.Repo.Check(pkgs) {
		t.Error(line)
	}
	// The listing reached the stack and the tools (the check is not
	// vacuous): loop's dependencies include socket, cmd/zmqguard is there.
	var loop, cmd bool
	for _, p := range pkgs {
		switch p.ImportPath {
		case layering.Repo.Module + "/loop":
			loop = slices.Contains(p.Deps, layering.Repo.Module+"/socket")
		case layering.Repo.Module + "/cmd/zmqguard":
			cmd = true
		}
	}
	if !loop || !cmd {
		t.Errorf("the listing misses loop's dependencies (%v) or cmd/zmqguard (%v)", loop, cmd)
	}
}

// small is a table in the shape of Repo, over module m.
func small() layering.Table {
	return layering.Table{
		Module: "m", File: "table.go",
		Layers: []layering.Layer{
			{Name: "L0", Library: true, Stack: true, Packages: []string{"vocab", "internal/stack/..."}},
			{Name: "L1", Library: true, Stack: true, Ordered: true, Packages: []string{"conn", "loop"}},
			{Name: "L2", Library: true, Packages: []string{"wire"}},
			{Name: "L3", Library: true, Packages: []string{"ref/..."}},
			{Name: "tools", Packages: []string{"cmd/...", "internal/testkit/...", "gone/..."}},
		},
		StackModules: []string{"example.com/codec"},
	}
}

// pkg is a project package of module m with its imports and deps.
func pkg(path string, imports []string, deps ...string) layering.Package {
	return layering.Package{ImportPath: "m/" + path, Imports: prefix(imports), Deps: prefix(deps)}
}

func prefix(paths []string) []string {
	var out []string
	for _, p := range paths {
		if strings.Contains(p, ".") || !strings.Contains(p, "/") && (p == "fmt" || p == "os") {
			out = append(out, p) // a standard or third-party package
		} else {
			out = append(out, "m/"+p)
		}
	}
	return out
}

// good is a listing of module m that keeps small()'s layering.
func good() []layering.Package {
	return []layering.Package{
		pkg("vocab", []string{"fmt"}, "fmt"),
		pkg("internal/stack/scan", []string{"vocab"}, "vocab", "fmt"),
		pkg("conn", []string{"vocab", "example.com/codec/x"}, "vocab", "fmt", "example.com/codec/x"),
		pkg("loop", []string{"conn"}, "conn", "vocab", "fmt", "example.com/codec/x"),
		pkg("wire", []string{"loop"}, "loop", "conn", "vocab"),
		pkg("ref", []string{"wire", "ref/sub"}, "wire", "ref/sub"),
		pkg("ref/sub", []string{"loop", "example.com/big/y"}, "loop", "example.com/big/y"),
		pkg("cmd/tool", []string{"ref", "internal/testkit/kit"}, "ref", "internal/testkit/kit"),
		pkg("internal/testkit/kit", []string{"ref"}, "ref"),
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "example.com/codec/x", Module: &struct{ Path string }{"example.com/codec"}},
		{ImportPath: "example.com/big/y", Module: &struct{ Path string }{"example.com/big"}},
	}
}

// TestCheckFindsEachBreak: each rule, broken once in a small listing, gives
// its one line (and the unbroken listing none): so TestLayers can fail.
func TestCheckFindsEachBreak(t *testing.T) {
	tab := small()
	if got := tab.Check(good()); len(got) != 0 {
		t.Fatalf("a listing that keeps the layering: %q", got)
	}
	with := func(change func(ps []layering.Package) []layering.Package) []layering.Package { return change(good()) }
	set := func(path string, imports []string, deps ...string) func([]layering.Package) []layering.Package {
		return func(ps []layering.Package) []layering.Package {
			for i := range ps {
				if ps[i].ImportPath == "m/"+path {
					ps[i] = pkg(path, imports, deps...)
					return ps
				}
			}
			return append(ps, pkg(path, imports, deps...))
		}
	}
	for _, c := range []struct {
		name    string
		listing []layering.Package
		want    []string
	}{
		{"an import up a layer", with(set("wire", []string{"ref"}, "ref")), []string{
			"wire (L2) imports ref (L3): imports only point to a package's own layer or below",
		}},
		{"a library imports the test kit", with(set("ref/sub", []string{"internal/testkit/kit"}, "internal/testkit/kit")), []string{
			"ref/sub (L3) imports internal/testkit/kit (tools): no library package imports a tool or internal/testkit",
		}},
		{"against the order inside the stack", with(set("conn", []string{"loop"}, "loop")), []string{
			"conn imports loop: in L1 a package imports only those before it (conn < loop)",
		}},
		{"a package in no layer", with(set("newpkg", []string{"loop"}, "loop")), []string{
			"newpkg: in no layer of the table: add it to table.go, in the lowest layer at or above everything it imports " +
				"(and update docs/architecture.md's table)",
		}},
		{"a stack dependency above the stack", with(set("loop", []string{"conn"}, "conn", "wire")), []string{
			"loop (L1): go list -deps holds wire (L2): the stack depends on no package above it",
		}},
		{"a stack dependency from another module", with(set("internal/stack/scan", []string{"vocab"}, "vocab", "example.com/big/y")), []string{
			"internal/stack/scan (L0): go list -deps holds example.com/big/y of module example.com/big: " +
				"the stack is built on the standard library and example.com/codec only",
		}},
		{"a library entry that matches nothing", func() []layering.Package {
			var ps []layering.Package
			for _, p := range good() {
				if p.ImportPath != "m/wire" {
					ps = append(ps, p)
				}
			}
			return ps
		}(), []string{`table entry "wire" (L2) matches no package: remove it from table.go`}},
	} {
		if got := tab.Check(c.listing); !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
	twice := small()
	twice.Layers[2].Packages = append(twice.Layers[2].Packages, "ref/sub")
	if got, want := twice.Check(good()), []string{`ref/sub: in two places of the table ("ref/sub" in L2 and "ref/..." in L3): keep one`}; !slices.Equal(got, want) {
		t.Errorf("a package in two places:\n got %q\nwant %q", got, want)
	}
}

// TestListNestedModules: List reaches the packages of a module nested in
// the repository (an adapter in a module of its own) as well as the root's.
func TestListNestedModules(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                 "module example.com/m\n\ngo 1.26\n",
		"a/a.go":                 "package a\n",
		"ad/go.mod":              "module example.com/m/ad\n\ngo 1.26\n\nrequire example.com/m v0.0.0\n\nreplace example.com/m => ../\n",
		"ad/ad.go":               "package ad\n\nimport _ \"example.com/m/a\"\n",
		"a/testdata/x/go.mod":    "module broken\n",
		"a/testdata/x/broken.go": "package x\nthis is not Go\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "-mod=mod")
	pkgs, err := layering.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkgs {
		if strings.HasPrefix(p.ImportPath, "example.com/") {
			got = append(got, p.ImportPath+" "+strings.Join(p.Imports, ","))
		}
	}
	slices.Sort(got)
	if want := []string{"example.com/m/a ", "example.com/m/ad example.com/m/a"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
}
