package apicheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// internalImports returns "file: import" for every import of a package
// under module's internal/ in the Go files below dir (tests included: an
// example's test is read as an example too).
func internalImports(dir, module string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p == module+"/internal" || strings.HasPrefix(p, module+"/internal/") {
				found = append(found, path+": "+p)
			}
		}
		return nil
	})
	return found, err
}

// TestExamplesImportOnlyPublic: a user copies an example out of the
// repository, where Go refuses zmqguard's internal/ packages; so no package
// under examples/ may import one (issue 38).
func TestExamplesImportOnlyPublic(t *testing.T) {
	found, err := internalImports(filepath.Join(root, "examples"), "github.com/zmqguard/zmqguard")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("an example imports an internal package: %s", f)
	}
}

// TestInternalImportsFound: the check above finds an internal import (and
// only that) in a small tree, so it can fail.
func TestInternalImportsFound(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"ok/main.go":       "package main\nimport _ \"example.com/m/pub\"\nimport _ \"example.com/m/internalish\"\n",
		"bad/main.go":      "package main\nimport (\n\t\"fmt\"\n\tx \"example.com/m/internal/x\"\n)\n",
		"bad/main_test.go": "package main\nimport _ \"example.com/m/internal\"\n",
	})
	found, err := internalImports(dir, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.Join(dir, "bad/main.go") + ": example.com/m/internal/x",
		filepath.Join(dir, "bad/main_test.go") + ": example.com/m/internal",
	}
	if strings.Join(found, "\n") != strings.Join(want, "\n") {
		t.Fatalf("found %q, want %q", found, want)
	}
}
