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
// nested modules that go.work does not list (those it lists count).
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
		"go.work":           "go 1.26.0\n\nuse ( // the modules\n\t.\n\t./listed // an adapter\n)\nuse ./single\n",
		"listed/go.mod":     "module example.com/m/listed\n",
		"listed/l.go":       "package listed\nfunc L() {}\n",
		"single/go.mod":     "module example.com/m/single\n",
		"single/s.go":       "package single\nfunc S() {}\n",
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
		"a const C untyped int", "a func F func(zmq4.SocketType)", "a method I.M func()",
		"a method T.Conv func(T) zmq4.SocketType", "a method T.Pub func(T)", "a type I interface{M()}",
		"a type T struct{Kind zmq4.SocketType}", "a var V int",
		"b func Both func()", "b method G.Get func(G[K])", "b type G [K comparable] struct{}",
		"listed func L func()", "single func S func()",
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

// TestSignatures checks what a golden line records of each kind of
// declaration: parameter and result types without names, a method's
// receiver as its first parameter, exported struct fields and interface
// methods only, embedded types, type parameters, aliases, and the types of
// constants (typed, untyped, iota groups, conversions) and variables (from
// a type, a literal, a constructor of the package, errors.New).
func TestSignatures(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod": "module example.com/m\n",
		"p/p.go": `package p
import ("context"; "errors"; "io"; "time")
type Kind int
const (
	KindA Kind = iota
	KindB
	kindC
)
const Size, Name = 1 << 20, "x"
const Wait = 5 * time.Second
const Twice = 2 * Size
const Conv = Kind(3)
type Config struct {
	Addr string
	a, B int
	hidden bool
	io.Reader
	inner
	Hook func(ctx context.Context, n int) (ok bool, err error)
	Nested struct{ X, y int }
}
type inner struct{}
type Doer interface {
	Do(ctx context.Context, args ...string) error
	io.Closer
	private()
}
type Pair[K comparable, V any] struct{ Key K; Val V }
type Alias = Config
type Fn func([]byte) int
type Ch <-chan map[string][2]*Config
var ErrX = errors.New("x")
var Default = Config{Addr: "a"}
var Ptr = &Config{}
var Made = newConfig()
var Count int64
var Bytes = []byte("x")
func newConfig() *Config { return nil }
func New(cfg Config, opts ...func(*Config)) (*Config, error) { return nil, nil }
func Map[K comparable, V any](m map[K]V, f func(K) bool) []K { return nil }
func (c *Config) Run(ctx context.Context) (n, m int, err error) { return }
func (p Pair[K, V]) Get() (K, V) { return p.Key, p.Val }
`,
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
		"p const Conv Kind",
		"p const KindA Kind",
		"p const KindB Kind",
		"p const Name untyped string",
		"p const Size untyped int",
		"p const Twice untyped int",
		"p const Wait = 5 * time.Second",
		"p func Map func[K comparable, V any](map[K]V, func(K) bool) []K",
		"p func New func(Config, ...func(*Config)) (*Config, error)",
		"p method Config.Run func(*Config, context.Context) (int, int, error)",
		"p method Doer.Do func(context.Context, ...string) error",
		"p method Pair.Get func(Pair[K, V]) (K, V)",
		"p type Alias = Config",
		"p type Ch <-chan map[string][2]*Config",
		"p type Config struct{Addr string; B int; io.Reader; Hook func(context.Context, int) (bool, error); Nested struct{X int}}",
		"p type Doer interface{Do(context.Context, ...string) error; io.Closer}",
		"p type Fn func([]byte) int",
		"p type Kind int",
		"p type Pair [K comparable, V any] struct{Key K; Val V}",
		"p var Bytes []byte",
		"p var Count int64",
		"p var Default Config",
		"p var ErrX error",
		"p var Made *Config",
		"p var Ptr *Config",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("surface:\n got %q\nwant %q", got, want)
	}
}
