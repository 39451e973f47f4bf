// Package layering holds the project's layers in one table (Repo, in
// table.go) and checks a module's packages against it: a library package's
// imports only point to its own layer or below, no library package imports
// a tool or internal/testkit, the stack's go list -deps holds nothing above
// the stack and no third-party module besides the few it is built on, and
// every package of the repository is in the table, so a new package is
// placed on purpose.
//
// Only tests and tools import it (internal/testkit). The check itself is
// TestLayers; docs/architecture.md draws the same table.
package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Layer is one row of a Table.
type Layer struct {
	// Name is how messages and docs/architecture.md call the layer.
	Name string
	// Library marks a layer of library packages. The others are tools
	// (commands, examples, benchmarks, test kits): they may import any
	// package, and no library package imports them.
	Library bool
	// Stack marks a layer of the stack: a stack package's go list -deps
	// holds only stack packages of the project, the standard library and
	// the Table's StackModules.
	Stack bool
	// Ordered makes the order of Packages a rule inside the layer: a
	// package imports only packages of entries before its own.
	Ordered bool
	// Packages are import paths relative to the module ("socket"); an
	// entry "p/..." is p and every package below it. Each package of the
	// repository matches exactly one entry of the whole Table.
	Packages []string
}

// Table is a project's layering: its layers bottom-up.
type Table struct {
	// Module is the import path the project's packages start with.
	Module string
	// Layers are listed bottom-up: a library package imports only packages
	// of its own layer or an earlier one.
	Layers []Layer
	// StackModules are the module paths besides the standard library that
	// a Stack layer's dependencies may come from.
	StackModules []string
	// File names where the table is written, for the messages.
	File string
}

// Package is what Check needs of one package: the fields of
// `go list -json` of the same names.
type Package struct {
	ImportPath string
	Standard   bool
	Module     *struct{ Path string }
	Imports    []string // non-test imports
	Deps       []string // every package it depends on, transitively (non-test)
}

// place is where a project package sits in a Table.
type place struct{ layer, entry int }

// rel is path relative to the module ("." for the module's root package)
// and whether it is the project's at all.
func (t *Table) rel(path string) (string, bool) {
	if path == t.Module {
		return ".", true
	}
	r, ok := strings.CutPrefix(path, t.Module+"/")
	return r, ok
}

func match(entry, rel string) bool {
	if base, ok := strings.CutSuffix(entry, "/..."); ok {
		return rel == base || strings.HasPrefix(rel, base+"/")
	}
	return rel == entry
}

// Check returns one line for every broken rule, sorted; none when pkgs
// keep the table's layering. pkgs is a `go list -deps` listing: the
// project's packages with their dependencies (standard and third-party
// ones included, to tell their modules).
func (t *Table) Check(pkgs []Package) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	byPath := map[string]*Package{}
	where := map[string]place{}
	used := map[place]bool{}
	for i := range pkgs {
		p := &pkgs[i]
		byPath[p.ImportPath] = p
		rel, ok := t.rel(p.ImportPath)
		if !ok {
			continue
		}
		var found []place
		for li, l := range t.Layers {
			for ei, e := range l.Packages {
				if match(e, rel) {
					found = append(found, place{li, ei})
				}
			}
		}
		switch len(found) {
		case 0:
			bad("%s: in no layer of the table: add it to %s, in the lowest layer at or above everything it imports "+
				"(and update docs/architecture.md's table)", rel, t.File)
		case 1:
			where[p.ImportPath] = found[0]
			used[found[0]] = true
		default:
			for _, pl := range found {
				used[pl] = true
			}
			bad("%s: in two places of the table (%q in %s and %q in %s): keep one",
				rel, t.entry(found[0]), t.Layers[found[0].layer].Name, t.entry(found[1]), t.Layers[found[1].layer].Name)
		}
	}
	for li, l := range t.Layers {
		for ei, e := range l.Packages {
			// A tools entry may name a module of its own that this
			// listing did not reach; a library entry must stay true.
			if l.Library && !used[place{li, ei}] {
				bad("table entry %q (%s) matches no package: remove it from %s", e, l.Name, t.File)
			}
		}
	}
	for path, pl := range where {
		l := t.Layers[pl.layer]
		if !l.Library {
			continue
		}
		p := byPath[path]
		rel, _ := t.rel(path)
		for _, imp := range p.Imports {
			q, ok := where[imp]
			if !ok {
				continue // not the project's, or reported above
			}
			irel, _ := t.rel(imp)
			ql := t.Layers[q.layer]
			switch {
			case !ql.Library:
				bad("%s (%s) imports %s (%s): no library package imports a tool or internal/testkit", rel, l.Name, irel, ql.Name)
			case q.layer > pl.layer:
				bad("%s (%s) imports %s (%s): imports only point to a package's own layer or below", rel, l.Name, irel, ql.Name)
			case q.layer == pl.layer && l.Ordered && q.entry > pl.entry:
				bad("%s imports %s: in %s a package imports only those before it (%s)", rel, irel, l.Name, strings.Join(l.Packages, " < "))
			}
		}
		if !l.Stack {
			continue
		}
		for _, d := range p.Deps {
			if drel, ok := t.rel(d); ok {
				if q, ok := where[d]; ok && !t.Layers[q.layer].Stack {
					bad("%s (%s): go list -deps holds %s (%s): the stack depends on no package above it",
						rel, l.Name, drel, t.Layers[q.layer].Name)
				}
				continue
			}
			dp := byPath[d]
			if dp == nil {
				bad("%s: dependency %s is not in the listing", rel, d)
				continue
			}
			if dp.Standard {
				continue
			}
			mod := "(no module)"
			if dp.Module != nil {
				mod = dp.Module.Path
			}
			if !slices.Contains(t.StackModules, mod) {
				bad("%s (%s): go list -deps holds %s of module %s: the stack is built on the standard library and %s only",
					rel, l.Name, d, mod, strings.Join(t.StackModules, ", "))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (t *Table) entry(p place) string { return t.Layers[p.layer].Packages[p.entry] }

// List runs `go list -deps -json` in root and in every nested module below
// it (each directory with a go.mod, testdata and hidden directories left
// out) and returns every package listed, each once.
func List(root string) ([]Package, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var pkgs []Package
	for _, dir := range dirs {
		cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Module,Imports,Deps", "./...")
		cmd.Dir = dir
		// Each module alone (its go.mod replaces the repository's modules
		// by relative paths): a module go.work leaves out (bench/pebbe,
		// which needs cgo) is listed too.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list in %s: %v: %s", dir, err, bytes.TrimSpace(stderr.Bytes()))
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		for {
			var p Package
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("go list in %s: %v", dir, err)
			}
			if !seen[p.ImportPath] {
				seen[p.ImportPath] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	return pkgs, nil
}
