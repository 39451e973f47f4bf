package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pending are docs other work in progress writes (kv-events, engine
// outputs, release profiles); docs/protocol.md links to them already.
// Delete an entry when its file lands: the test then checks it like any
// other.
var pending = []string{}

// TestRepositoryReferences fails when a Go comment or a Markdown file of
// the repository refers to a .md file the repository does not have.
func TestRepositoryReferences(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	missing, err := Missing(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range missing {
		if slices.Contains(pending, filepath.Base(r.Target)) && filepath.Dir(r.File) == "docs" {
			t.Logf("%s:%d: %s is not written yet (pending)", r.File, r.Line, r.Target)
			continue
		}
		t.Errorf("%s:%d: refers to %s, which is not in the repository", r.File, r.Line, r.Target)
	}
}

// TestMissing checks the finder on a small tree: a dangling reference in a
// Go comment and in Markdown are found, an existing one and a URL are not,
// and code (not comments) is ignored.
func TestMissing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/here.md", "see [there](gone.md) and [here](here.md), https://example.com/x.md\n")
	write("p/p.go", "// Package p: see docs/here.md and PROTOCOL.md.\npackage p\n\nvar s = \"code.md\"\n")
	write("testdata/t.md", "[x](ignored.md)\n")
	got, err := Missing(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{
		{File: filepath.Join("docs", "here.md"), Line: 1, Target: "gone.md"},
		{File: filepath.Join("p", "p.go"), Line: 1, Target: "PROTOCOL.md"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Missing = %+v, want %+v", got, want)
	}
}
