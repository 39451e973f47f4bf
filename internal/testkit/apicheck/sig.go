package apicheck

import (
	"go/ast"
	"go/token"
	"strings"
)

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
