// Package doccheck checks the repository's documentation: references to
// Markdown files that do not exist, the shape of every public package's
// godoc, and that every Go snippet compiles.
//
// [Missing] finds references to .md files in Go comments (godoc) and in the
// repository's own .md files that point at nothing; the repository's test
// keeps every such reference pointing at a file that is there. [Shapes]
// reads how each public package's documentation opens: one sentence, then
// a runnable snippet of at most [MaxSnippetLines] lines (a code block, or a
// package Example), with the essay below. The package's test
// TestSnippetsCompile extracts every Go snippet of the README, docs/ and the
// package doc comments and builds them all (the rule for fragments, givens
// and the "not compiled" marker is in snippets_test.go).
package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Ref is one reference to a Markdown file.
type Ref struct {
	File   string // the referring file, relative to the root
	Line   int    // its line
	Target string // the .md path as written
}

// mdRef matches a path ending in ".md" that is not part of a URL.
var mdRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./:-])((?:\.\.?/)?[A-Za-z0-9_-][A-Za-z0-9_./-]*\.md)\b`)

// Missing walks root (a module root) and returns the references, in Go
// comments and in .md files, to Markdown files that exist neither relative
// to the root nor relative to the referring file's directory. It skips
// .git, testdata and vendor directories.
func Missing(root string) ([]Ref, error) {
	var out []Ref
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		var refs []Ref
		switch {
		case strings.HasSuffix(path, ".go"):
			refs, err = goRefs(path, rel)
		case strings.HasSuffix(path, ".md"):
			refs, err = mdRefs(path, rel)
		}
		if err != nil {
			return err
		}
		for _, r := range refs {
			if !exists(filepath.Join(root, r.Target)) && !exists(filepath.Join(filepath.Dir(path), r.Target)) {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// goRefs returns the .md references in a Go file's comments.
func goRefs(path, rel string) ([]Ref, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []Ref
	for _, g := range f.Comments {
		for _, c := range g.List {
			for i, line := range strings.Split(c.Text, "\n") {
				for _, m := range mdRef.FindAllStringSubmatch(line, -1) {
					out = append(out, Ref{File: rel, Line: fset.Position(c.Slash).Line + i, Target: m[1]})
				}
			}
		}
	}
	return out, nil
}

// mdRefs returns the .md references in a Markdown file, outside URLs.
func mdRefs(path, rel string) ([]Ref, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Ref
	for i, line := range strings.Split(string(b), "\n") {
		for _, m := range mdRef.FindAllStringSubmatch(line, -1) {
			out = append(out, Ref{File: rel, Line: i + 1, Target: m[1]})
		}
	}
	return out, nil
}
