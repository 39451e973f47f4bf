package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// quickStart returns the README's first Go code block.
func quickStart(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```go\n")
	if i < 0 {
		t.Fatal("README has no Go block")
	}
	s = s[i+len("```go\n"):]
	j := strings.Index(s, "```")
	if j < 0 {
		t.Fatal("unterminated Go block")
	}
	return s[:j]
}

// TestQuickStart: the README's quick start is a program a newcomer can
// copy into production: it parses, it handles SIGTERM as well as SIGINT,
// it discards no error, and it validates what it claims only valid values
// reach.
func TestQuickStart(t *testing.T) {
	src := quickStart(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "quickstart.go", src, 0)
	if err != nil {
		t.Fatalf("the quick start does not parse: %v", err)
	}
	sigterm, validate := false, false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "syscall" && n.Sel.Name == "SIGTERM" {
				sigterm = true
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Validate" {
				validate = true
			}
		case *ast.AssignStmt:
			// x, _ := f() with f one of the calls that return an error.
			if len(n.Lhs) > 1 {
				if id, ok := n.Lhs[len(n.Lhs)-1].(*ast.Ident); ok && id.Name == "_" {
					t.Errorf("%s: an error is discarded", fset.Position(n.Pos()))
				}
			}
		case *ast.ExprStmt:
			// A bare call of something that returns an error (Bind, Run).
			if c, ok := n.X.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					switch sel.Sel.Name {
					case "Bind", "Run", "Dial":
						t.Errorf("%s: the error of %s is discarded", fset.Position(n.Pos()), sel.Sel.Name)
					}
				}
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "panic" {
				t.Errorf("%s: the quick start panics on an error instead of returning it", fset.Position(n.Pos()))
			}
		}
		return true
	})
	if !sigterm {
		t.Error("the quick start does not stop on SIGTERM (Kubernetes' stop signal)")
	}
	if !validate {
		t.Error(`the quick start says only valid jobs reach the handler but sets no Validate ({"steps":9} decodes with an empty ID)`)
	}
}
