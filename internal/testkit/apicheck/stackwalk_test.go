package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// stackWalks are the runtime functions that let code find out who called
// it. Library code must not need them (issue 40): no user callback runs
// under a component's lock or on a path its Close waits for, so Close and
// Remove never have to ask whether they were called from inside one.
// runtime/debug.Stack, which panic reports carry, is not a stack walk.
var stackWalks = []string{"Callers", "CallersFrames", "Caller", "FuncForPC", "Stack"}

// findStackWalks returns "file:line: runtime.X" for every use of a
// stackWalks function in the non-test Go files under root (testdata,
// hidden directories and internal/testkit, which only tests import,
// skipped; nested modules included).
func findStackWalks(root string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				filepath.ToSlash(rel) == "internal/testkit") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "runtime" {
				local = "runtime"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && slices.Contains(stackWalks, sel.Sel.Name) {
				found = append(found, rel+":"+strconv.Itoa(fset.Position(sel.Pos()).Line)+": runtime."+sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	return found, err
}

// TestNoStackWalks: no library code of the repository walks the stack
// (runtime.Callers, runtime.Stack and friends); test code may.
func TestNoStackWalks(t *testing.T) {
	found, err := findStackWalks(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s: library code must not walk the stack (no callback under a lock, Close never waits for one: issue 40)", f)
	}
}

// TestFindStackWalks: the check finds each stack walk, under any import
// name, and leaves test files, testdata, internal/testkit and runtime/debug
// alone.
func TestFindStackWalks(t *testing.T) {
	root := writeTree(t, map[string]string{
		"go.mod":                       "module example.com/m\n",
		"a/a.go":                       "package a\nimport \"runtime\"\nfunc f() { runtime.Callers(0, nil) }\n",
		"b/b.go":                       "package b\nimport rt \"runtime\"\nfunc f() { _ = rt.Stack(nil, false) }\n",
		"c/c.go":                       "package c\nimport \"runtime\"\nvar g = runtime.FuncForPC\n",
		"d/d.go":                       "package d\nimport \"runtime/debug\"\nfunc f() { _ = debug.Stack() }\n",
		"e/e.go":                       "package e\nimport \"runtime\"\nfunc f() { runtime.GC() }\n",
		"a/a_test.go":                  "package a\nimport \"runtime\"\nfunc g() { runtime.Callers(0, nil) }\n",
		"a/testdata/t/t.go":            "package t\nimport \"runtime\"\nfunc g() { runtime.Callers(0, nil) }\n",
		"nested/go.mod":                "module example.com/n\n",
		"nested/n/n.go":                "package n\nimport \"runtime\"\nfunc h() { _, _, _, _ = runtime.Caller(1) }\n",
		"nested/n/n_other.go":          "package n\nfunc i() {}\n",
		"f/f.go":                       "package f\nimport \"runtime\"\nfunc f() { _ = runtime.CallersFrames(nil) }\n",
		"f/notruntime/x.go":            "package notruntime\nimport runtime \"strings\"\nvar _ = runtime.Fields\n",
		"f/shadow/shadow.go":           "package shadow\nfunc Stack() {}\n",
		"f/shadow/shadow2.go":          "package shadow\nvar runtime struct{ Stack int }\nvar _ = runtime.Stack\n",
		"g/g.go":                       "package g\nimport \"runtime\"\nfunc f() { runtime.Gosched() }\n",
		"h/h.go":                       "package h\nimport . \"runtime\"\nfunc f() { GC() }\n",
		"i/i.go":                       "package i\nimport _ \"runtime\"\n",
		"k/k.go":                       "package k\nimport \"runtime\"\nvar _ = runtime.NumCPU\n",
		"_skip/s.go":                   "package s\nimport \"runtime\"\nfunc f() { runtime.Callers(0, nil) }\n",
		".hidden/s.go":                 "package s\nimport \"runtime\"\nfunc f() { runtime.Callers(0, nil) }\n",
		"n/deep/deeper/dd.go":          "package deeper\nimport \"runtime\"\nfunc f() { runtime.Callers(0, nil) }\n",
		"n/deep/deeper/x.txt":          "runtime.Callers\n",
		"internal/testkit/golden/g.go": "package golden\nimport \"runtime\"\nfunc f() { _, _, _, _ = runtime.Caller(0) }\n",
		"internal/other/o.go":          "package other\nimport \"runtime\"\nfunc f() { _, _, _, _ = runtime.Caller(0) }\n",
	})
	found, err := findStackWalks(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	want := []string{
		"a/a.go:3: runtime.Callers",
		"b/b.go:3: runtime.Stack",
		"c/c.go:3: runtime.FuncForPC",
		"f/f.go:3: runtime.CallersFrames",
		"internal/other/o.go:3: runtime.Caller",
		"n/deep/deeper/dd.go:3: runtime.Callers",
		"nested/n/n.go:3: runtime.Caller",
	}
	if !slices.Equal(found, want) {
		t.Fatalf("found %q, want %q", found, want)
	}
}
