package apicheck

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeTree writes files (path -> content) under a new temporary root.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestSurfaceTree checks what counts as surface on a small module: exported
// funcs, types, methods of exported types (interface methods included),
// consts and vars of importable packages; not unexported names, methods of
// unexported types, test files, internal/, testdata/, main packages or
// nested modules.
func TestSurfaceTree(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod": "module example.com/m\n",
		"a/a.go": `package a
import "github.com/go-zeromq/zmq4"
type T struct{ Kind zmq4.SocketType }
type I interface{ M(); m() }
type hidden struct{}
func (T) Pub() {}
func (*T) priv() {}
func (hidden) Pub() {}
func F(t zmq4.SocketType) {}
func (T) Conv() zmq4.SocketType { return "" }
const C, d = 1, 2
var V = 3
`,
		"a/a_test.go":       "package a\nfunc TestOnly() {}\n",
		"a/internal/x/x.go": "package x\nfunc X() {}\n",
		"a/testdata/y/y.go": "package y\nfunc Y() {}\n",
		"cmd/c/main.go":     "package main\nfunc Exported() {}\nfunc main() {}\n",
		"nested/go.mod":     "module example.com/n\n",
		"nested/n.go":       "package n\nfunc N() {}\n",
		"b/b.go":            "package b\ntype G[K comparable] struct{}\nfunc (G[K]) Get() {}\n",
		"b/b_other.go":      "//go:build !linux\n\npackage b\nfunc Both() {}\n",
		"b/b_linux.go":      "//go:build linux\n\npackage b\nfunc Both() {}\n",
	})
	names, err := Surface(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.String())
	}
	want := []string{
		"a const C", "a func F", "a method I.M", "a method T.Conv", "a method T.Pub", "a type I", "a type T", "a var V",
		"b func Both", "b method G.Get", "b type G",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("surface\n got %q\nwant %q", got, want)
	}
	ms, err := Mentions(root, "github.com/go-zeromq/zmq4")
	if err != nil {
		t.Fatal(err)
	}
	var decls []string
	for _, m := range ms {
		decls = append(decls, m.Pkg+" "+m.Decl+" "+m.Ref)
	}
	slices.Sort(decls)
	wantDecls := []string{"a F zmq4.SocketType", "a T.Conv zmq4.SocketType", "a T.Kind zmq4.SocketType"}
	if !slices.Equal(decls, wantDecls) {
		t.Fatalf("mentions\n got %q\nwant %q", decls, wantDecls)
	}
}
