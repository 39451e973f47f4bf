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
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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
// under root.
func walk(root string, fn func(pkg string, fset *token.FileSet, files []*ast.File)) error {
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
			switch d.Name() {
			case "internal", "testdata", "vendor":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
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

// scope is what a package declares at top level, for the types of
// constants and variables whose declaration does not spell them.
type scope struct {
	types   map[string]bool
	results map[string]*ast.FieldList // function name -> results
	consts  map[string]*ast.ValueSpec // const name -> its spec (type and values filled in)
	index   map[string]int            // const name -> its index in the spec
	seen    map[string]bool           // constants being resolved (a cycle guard)
}

func newScope(files []*ast.File) *scope {
	sc := &scope{types: map[string]bool{}, results: map[string]*ast.FieldList{},
		consts: map[string]*ast.ValueSpec{}, index: map[string]int{}, seen: map[string]bool{}}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					sc.results[d.Name.Name] = d.Type.Results
				}
			case *ast.GenDecl:
				var prevType, prevVal ast.Expr
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						sc.types[s.Name.Name] = true
					case *ast.ValueSpec:
						if d.Tok != token.CONST {
							continue
						}
						s = fillConst(s, &prevType, &prevVal)
						for i, n := range s.Names {
							sc.consts[n.Name] = s
							sc.index[n.Name] = i
						}
					}
				}
			}
		}
	}
	return sc
}

// fillConst returns s with the type and value of the previous spec of its
// const group when it has neither (implicit repetition, as with iota).
func fillConst(s *ast.ValueSpec, prevType, prevVal *ast.Expr) *ast.ValueSpec {
	if s.Type == nil && len(s.Values) == 0 {
		s = &ast.ValueSpec{Names: s.Names, Type: *prevType, Values: []ast.Expr{*prevVal}}
	}
	*prevType, *prevVal = s.Type, nil
	if len(s.Values) > 0 {
		*prevVal = s.Values[0]
	}
	return s
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

// funcSig formats a function type without parameter names; recv, when not
// nil, is a method's receiver type, written as the first parameter.
func funcSig(ft *ast.FuncType, recv ast.Expr) string {
	var b strings.Builder
	b.WriteString("func")
	if ft.TypeParams != nil && len(ft.TypeParams.List) > 0 {
		b.WriteString("[" + fieldList(ft.TypeParams, true, ", ") + "]")
	}
	params := fieldList(ft.Params, false, ", ")
	if recv != nil {
		r := expr(recv)
		if params != "" {
			r += ", "
		}
		params = r + params
	}
	b.WriteString("(" + params + ")")
	if ft.Results != nil && len(ft.Results.List) > 0 {
		res := fieldList(ft.Results, false, ", ")
		if len(ft.Results.List) == 1 && len(ft.Results.List[0].Names) <= 1 {
			b.WriteString(" " + res)
		} else {
			b.WriteString(" (" + res + ")")
		}
	}
	return b.String()
}

// fieldList formats a parameter list as its types, one per name; with
// named set (type parameters), as "name constraint".
func fieldList(fl *ast.FieldList, named bool, sep string) string {
	if fl == nil {
		return ""
	}
	var parts []string
	for _, f := range fl.List {
		t := expr(f.Type)
		n := max(len(f.Names), 1)
		for i := 0; i < n; i++ {
			if named && len(f.Names) > 0 {
				parts = append(parts, f.Names[i].Name+" "+t)
			} else {
				parts = append(parts, t)
			}
		}
	}
	return strings.Join(parts, sep)
}

// typeSig formats a type declaration: its type parameters and its
// underlying type, structs and interfaces by their exported members.
func typeSig(s *ast.TypeSpec) string {
	var b strings.Builder
	if s.TypeParams != nil && len(s.TypeParams.List) > 0 {
		b.WriteString("[" + fieldList(s.TypeParams, true, ", ") + "] ")
	}
	if s.Assign.IsValid() {
		b.WriteString("= ")
	}
	b.WriteString(expr(s.Type))
	return b.String()
}

// valueSig formats the type of the i-th name of a const or var spec.
func (sc *scope) valueSig(kind string, s *ast.ValueSpec, i int) string {
	if s.Type != nil {
		return expr(s.Type)
	}
	var v ast.Expr
	switch {
	case len(s.Values) == len(s.Names):
		v = s.Values[i]
	case len(s.Values) == 1:
		v = s.Values[0] // a call with several results
	}
	if v == nil {
		return ""
	}
	if kind == "const" {
		if t := sc.constType(v); t != "" {
			return t
		}
		return "= " + expr(v)
	}
	switch x := ast.Unparen(v).(type) {
	case *ast.Ident:
		if _, ok := sc.consts[x.Name]; ok {
			if t := sc.constType(x); t != "" {
				return strings.TrimPrefix(t, "untyped ")
			}
		}
	case *ast.BasicLit:
		return litType(x)
	case *ast.CompositeLit:
		if x.Type != nil {
			return expr(x.Type)
		}
	case *ast.UnaryExpr:
		if cl, ok := x.X.(*ast.CompositeLit); ok && x.Op == token.AND && cl.Type != nil {
			return "*" + expr(cl.Type)
		}
	case *ast.CallExpr:
		fun := expr(x.Fun)
		switch {
		case fun == "errors.New" || fun == "fmt.Errorf":
			return "error"
		case sc.types[fun] || predeclared[fun]:
			return fun
		}
		switch x.Fun.(type) {
		case *ast.ArrayType, *ast.MapType, *ast.ChanType, *ast.FuncType:
			return fun // a conversion
		}
		if id, ok := x.Fun.(*ast.Ident); ok {
			if res, ok := sc.results[id.Name]; ok && res != nil && len(res.List) > 0 {
				if len(s.Values) == 1 && len(s.Names) > 1 {
					return strings.Split(fieldList(res, false, "\x00"), "\x00")[i]
				}
				return expr(res.List[0].Type)
			}
		}
		return "= " + fun + "(…)"
	}
	return "= " + expr(v)
}

// predeclared are the predeclared type names a conversion may call.
var predeclared = map[string]bool{
	"bool": true, "byte": true, "rune": true, "string": true, "error": true, "any": true,
	"int": true, "int8": true, "int16": true, "int32": true, "int64": true,
	"uint": true, "uint8": true, "uint16": true, "uint32": true, "uint64": true, "uintptr": true,
	"float32": true, "float64": true, "complex64": true, "complex128": true,
}

// constType is the type of a constant expression as far as the package's
// syntax tells: a conversion to a type, the type of a constant it names, or
// "untyped K" for K the default type of its first literal ("" when nothing
// tells).
func (sc *scope) constType(v ast.Expr) string {
	typed, untyped, foreign := "", "", false
	ast.Inspect(v, func(n ast.Node) bool {
		if typed != "" {
			return false
		}
		switch x := n.(type) {
		case *ast.BasicLit:
			if untyped == "" {
				untyped = "untyped " + litType(x)
			}
		case *ast.CallExpr:
			switch fun := expr(x.Fun); {
			case sc.types[fun] || predeclared[fun] || strings.Contains(fun, "."):
				typed = fun // a conversion
			case fun == "len" || fun == "cap":
				if untyped == "" {
					untyped = "untyped int"
				}
			}
			return false
		case *ast.Ident:
			switch {
			case x.Name == "iota" && untyped == "":
				untyped = "untyped int"
			case (x.Name == "true" || x.Name == "false") && untyped == "":
				untyped = "untyped bool"
			case sc.consts[x.Name] != nil && !sc.seen[x.Name]:
				sc.seen[x.Name] = true
				spec := sc.consts[x.Name]
				t := ""
				if spec.Type != nil {
					t = expr(spec.Type)
				} else if i := sc.index[x.Name]; i < len(spec.Values) {
					t = sc.constType(spec.Values[i])
				} else if len(spec.Values) > 0 {
					t = sc.constType(spec.Values[0])
				}
				delete(sc.seen, x.Name)
				switch {
				case t == "":
					foreign = true
				case strings.HasPrefix(t, "untyped "):
					if untyped == "" {
						untyped = t
					}
				default:
					typed = t
				}
			}
		case *ast.SelectorExpr:
			foreign = true // another package's constant: its type is unknown here
			return false
		}
		return true
	})
	switch {
	case typed != "":
		return typed
	case foreign:
		return ""
	}
	return untyped
}

// litType is the default type of a literal.
func litType(l *ast.BasicLit) string {
	switch l.Kind {
	case token.INT:
		return "int"
	case token.FLOAT:
		return "float64"
	case token.IMAG:
		return "complex128"
	case token.CHAR:
		return "rune"
	}
	return "string"
}

// expr formats a type expression on one line: struct types list only their
// exported fields ("struct{A int; B string}"), interface types only their
// exported methods and embedded types, function types drop parameter names.
func expr(e ast.Expr) string {
	switch x := e.(type) {
	case nil:
		return ""
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return expr(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return "*" + expr(x.X)
	case *ast.ParenExpr:
		return "(" + expr(x.X) + ")"
	case *ast.ArrayType:
		if x.Len == nil {
			return "[]" + expr(x.Elt)
		}
		return "[" + expr(x.Len) + "]" + expr(x.Elt)
	case *ast.Ellipsis:
		return "..." + expr(x.Elt)
	case *ast.MapType:
		return "map[" + expr(x.Key) + "]" + expr(x.Value)
	case *ast.ChanType:
		switch x.Dir {
		case ast.SEND:
			return "chan<- " + expr(x.Value)
		case ast.RECV:
			return "<-chan " + expr(x.Value)
		}
		return "chan " + expr(x.Value)
	case *ast.FuncType:
		return funcSig(x, nil)
	case *ast.IndexExpr:
		return expr(x.X) + "[" + expr(x.Index) + "]"
	case *ast.IndexListExpr:
		parts := make([]string, len(x.Indices))
		for i, ix := range x.Indices {
			parts[i] = expr(ix)
		}
		return expr(x.X) + "[" + strings.Join(parts, ", ") + "]"
	case *ast.StructType:
		var parts []string
		for _, f := range x.Fields.List {
			t := expr(f.Type)
			if len(f.Names) == 0 {
				if ast.IsExported(embeddedName(f.Type)) {
					parts = append(parts, t)
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					parts = append(parts, n.Name+" "+t)
				}
			}
		}
		return "struct{" + strings.Join(parts, "; ") + "}"
	case *ast.InterfaceType:
		var parts []string
		for _, m := range x.Methods.List {
			if len(m.Names) == 0 {
				parts = append(parts, expr(m.Type))
				continue
			}
			ft, ok := m.Type.(*ast.FuncType)
			for _, n := range m.Names {
				if n.IsExported() && ok {
					parts = append(parts, n.Name+strings.TrimPrefix(funcSig(ft, nil), "func"))
				}
			}
		}
		return "interface{" + strings.Join(parts, "; ") + "}"
	case *ast.BinaryExpr:
		return expr(x.X) + " " + x.Op.String() + " " + expr(x.Y)
	case *ast.UnaryExpr:
		return x.Op.String() + expr(x.X)
	case *ast.BasicLit:
		return x.Value
	case *ast.CallExpr:
		args := make([]string, len(x.Args))
		for i, a := range x.Args {
			args[i] = expr(a)
		}
		return expr(x.Fun) + "(" + strings.Join(args, ", ") + ")"
	case *ast.CompositeLit:
		return expr(x.Type) + "{…}"
	case *ast.FuncLit:
		return funcSig(x.Type, nil) + "{…}"
	}
	return "?"
}

// embeddedName is the type name of an embedded field.
func embeddedName(t ast.Expr) string {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
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
