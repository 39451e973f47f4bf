// Package apicheck lists the public surface of a Go module, one line per
// exported name with its signature, read from the source with go/parser.
//
//	names, err := apicheck.Surface(root)
//	if err != nil {
//		return err
//	}
//	for _, n := range names {
//		fmt.Println(n) // "socket func NewPull func(Options) (*Socket, error)"
//	}
//
// The surface is every exported function, type, method (on an exported
// type), constant and variable of every package a user can import (not
// internal/, not a main package, not a nested module, not testdata), read
// from the non-test .go files. Each carries its signature: a function its
// parameter and result types, a method the type of its method expression
// (receiver first), a type its underlying type with its exported struct
// fields and interface methods, a constant or variable its type. The
// repository's test compares the list with a committed golden file, so the
// surface, a struct field or a parameter never changes unnoticed, holds the
// count under a budget, and checks that no exported signature mentions zmq4
// outside the places that exist for zmq4 users.
package apicheck

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Name is one exported name of a package.
type Name struct {
	Pkg  string // the package directory, relative to the module root ("zmtpguard")
	Kind string // "func", "method", "type", "const" or "var"
	Name string // the name; "Type.Method" for a method
	// Sig is the declaration's signature on one line: "func(string) error"
	// for a function, "func(*T, int) error" for a method of *T (its method
	// expression's type), "struct{A int; B []byte}" for a struct type
	// (exported fields only), "= T" for an alias, the type of a constant or
	// variable ("untyped int" for an untyped constant, "= expr" when only
	// the initializer tells).
	Sig string
}

// String formats n as one line of the golden file: "pkg kind name sig".
func (n Name) String() string {
	s := n.Pkg + " " + n.Kind + " " + n.Name
	if n.Sig != "" {
		s += " " + n.Sig
	}
	return s
}

// Mention is an exported declaration whose signature, field or type refers
// to a package that should not appear in the public surface.
type Mention struct {
	Pkg  string // the package directory, relative to the module root
	Decl string // the exported declaration: "Func", "Type", "Type.Method" or "Type.Field"
	Ref  string // the reference as written, such as "zmq4.SocketType"
	Pos  string // file:line
}

// Surface returns the sorted exported names of every public package under
// root, the root of a module.
func Surface(root string) ([]Name, error) {
	var out []Name
	err := walk(root, func(pkg string, fset *token.FileSet, files []*ast.File) {
		sc := newScope(files)
		for _, f := range files {
			out = append(out, names(pkg, f, sc)...)
		}
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	// Declarations repeated under different build constraints count once.
	uniq := out[:0]
	for i, n := range out {
		if i == 0 || n != out[i-1] {
			uniq = append(uniq, n)
		}
	}
	return uniq, nil
}

// Mentions returns the exported declarations of the public packages under
// root whose signatures, fields or types refer to the package imported as
// importPath.
func Mentions(root, importPath string) ([]Mention, error) {
	var out []Mention
	err := walk(root, func(pkg string, fset *token.FileSet, files []*ast.File) {
		for _, f := range files {
			local := ""
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				if p != importPath {
					continue
				}
				local = p[strings.LastIndex(p, "/")+1:]
				if im.Name != nil {
					local = im.Name.Name
				}
			}
			if local == "" || local == "_" {
				continue
			}
			out = append(out, mentions(pkg, fset, f, local)...)
		}
	})
	return out, err
}

// walk calls fn with the parsed non-test files of each public package
// under root, in the nested modules that root's go.work lists too:
// metrics/zgprom, kvindex/redisstore and the other adapters are modules of
// their own but their names are part of zmqguard's surface like any other
// package's. A nested module go.work does not list is skipped.
func walk(root string, fn func(pkg string, fset *token.FileSet, files []*ast.File)) error {
	workspace, err := workModules(root)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && !workspace[rel] {
				return filepath.SkipDir // a nested module that go.work does not list
			}
			switch d.Name() {
			case "internal", "testdata", "vendor":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
		}
		ents, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		var files []*ast.File
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(path, n), nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if f.Name.Name == "main" {
				return nil
			}
			files = append(files, f)
		}
		if len(files) > 0 {
			fn(rel, fset, files)
		}
		return nil
	})
}

// names returns the exported names f declares, with their signatures.
func names(pkg string, f *ast.File, sc *scope) []Name {
	var out []Name
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				out = append(out, Name{pkg, "func", d.Name.Name, funcSig(d.Type, nil)})
				continue
			}
			if recv := recvName(d.Recv); ast.IsExported(recv) {
				out = append(out, Name{pkg, "method", recv + "." + d.Name.Name, funcSig(d.Type, d.Recv.List[0].Type)})
			}
		case *ast.GenDecl:
			// In a const group, a spec without type and value repeats the
			// previous spec's (iota).
			var prevType, prevVal ast.Expr
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, Name{pkg, "type", s.Name.Name, typeSig(s)})
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								ft, ok := m.Type.(*ast.FuncType)
								for _, n := range m.Names {
									if n.IsExported() && ok {
										out = append(out, Name{pkg, "method", s.Name.Name + "." + n.Name, funcSig(ft, nil)})
									}
								}
							}
						}
					}
				case *ast.ValueSpec:
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
						s = fillConst(s, &prevType, &prevVal)
					}
					for i, n := range s.Names {
						if n.IsExported() {
							out = append(out, Name{pkg, kind, n.Name, sc.valueSig(kind, s, i)})
						}
					}
				}
			}
		}
	}
	return out
}

// recvName returns the type name of a method receiver (without pointer and
// type parameters).
func recvName(fl *ast.FieldList) string {
	if fl == nil || len(fl.List) == 0 {
		return ""
	}
	t := fl.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// mentions returns the exported declarations of f that refer to the
// package imported under the name local.
func mentions(pkg string, fset *token.FileSet, f *ast.File, local string) []Mention {
	var out []Mention
	find := func(decl string, n ast.Node) {
		if n == nil {
			return
		}
		ast.Inspect(n, func(n ast.Node) bool {
			se, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := se.X.(*ast.Ident); ok && id.Name == local {
				p := fset.Position(se.Pos())
				out = append(out, Mention{pkg, decl, local + "." + se.Sel.Name,
					filepath.Base(p.Filename) + ":" + strconv.Itoa(p.Line)})
			}
			return true
		})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil {
				recv := recvName(d.Recv)
				if !ast.IsExported(recv) {
					continue
				}
				name = recv + "." + name
			}
			find(name, d.Type)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					switch t := s.Type.(type) {
					case *ast.StructType:
						for _, fld := range t.Fields.List {
							if len(fld.Names) == 0 {
								find(s.Name.Name+".(embedded)", fld.Type)
							}
							for _, n := range fld.Names {
								if n.IsExported() {
									find(s.Name.Name+"."+n.Name, fld.Type)
								}
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							for _, n := range m.Names {
								if n.IsExported() {
									find(s.Name.Name+"."+n.Name, m.Type)
								}
							}
						}
					default:
						find(s.Name.Name, s.Type)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							find(n.Name, s.Type)
						}
					}
				}
			}
		}
	}
	return out
}

// workModules returns the directories (slash-separated, relative to root)
// that the use directives of root's go.work name; none when there is no
// go.work. It reads `use dir` and `use ( dir ... )`, with // comments.
func workModules(root string) (map[string]bool, error) {
	text, err := os.ReadFile(filepath.Join(root, "go.work"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	dirs := map[string]bool{}
	inUse := false
	for line := range strings.Lines(string(text)) {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case inUse && f[0] == ")":
			inUse = false
		case inUse:
			dirs[path.Clean(f[0])] = true
		case f[0] == "use" && len(f) >= 2 && f[1] == "(":
			inUse = true
		case f[0] == "use" && len(f) >= 2:
			dirs[path.Clean(f[1])] = true
		}
	}
	return dirs, nil
}
