package doccheck

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// MaxSnippetLines is the longest snippet [Shapes] accepts: the code a
// reader sees right after a package's first sentence.
const MaxSnippetLines = 15

// Shape is how a public package's documentation opens.
type Shape struct {
	Pkg string // the package directory, relative to the module root
	// Sentence is the doc comment's first paragraph, on one line.
	Sentence string
	// Problems says what is wrong, one entry per problem; empty when the
	// documentation opens with one sentence followed by a snippet of at
	// most MaxSnippetLines lines.
	Problems []string
}

// sentenceEnd finds a sentence boundary inside a paragraph: a full stop,
// question or exclamation mark followed by space and a capital letter or a
// doc link ("[Register] creates").
var sentenceEnd = regexp.MustCompile(`[.!?]\s+[\[A-Z]`)

// abbreviations end in a full stop without ending a sentence.
var abbreviations = []string{"e.g.", "i.e.", "etc.", "vs.", "cf."}

// Shapes reads the doc comment and package examples of every public
// package under root (a module root: not internal/, not a main package,
// not testdata, not a nested module) and checks the shape a newcomer
// reads: the doc comment's first paragraph is one sentence, and a runnable
// snippet of at most MaxSnippetLines lines follows it: either a code
// block right after that sentence in the doc comment, or the body of a
// package example (func Example or Example_suffix in a _test.go file).
func Shapes(root string) ([]Shape, error) {
	var out []Shape
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel != "." {
			n := d.Name()
			if n == "internal" || n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		s, ok, err := shapeOf(path)
		if err != nil || !ok {
			return err
		}
		s.Pkg = rel
		out = append(out, s)
		return nil
	})
	return out, err
}

// shapeOf checks the package in dir; ok is false when dir holds no
// importable package (no non-test files, or package main).
func shapeOf(dir string) (s Shape, ok bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return s, false, err
	}
	fset := token.NewFileSet()
	var docText string
	exampleLines := -1
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return s, false, err
		}
		if strings.HasSuffix(n, "_test.go") {
			if l := packageExampleLines(fset, f); l >= 0 && (exampleLines < 0 || l < exampleLines) {
				exampleLines = l
			}
			continue
		}
		if f.Name.Name == "main" {
			return s, false, nil
		}
		ok = true
		if f.Doc != nil && docText == "" {
			docText = f.Doc.Text()
		}
	}
	if !ok {
		return s, false, nil
	}
	s.Problems = checkDoc(docText, exampleLines)
	if docText != "" {
		blocks := new(comment.Parser).Parse(docText).Content
		if p, isPara := blocks[0].(*comment.Paragraph); isPara {
			s.Sentence = paragraphText(p)
		}
	}
	return s, true, nil
}

// checkDoc returns the problems of a package doc comment's opening;
// exampleLines is the body length of the package's shortest package
// example (-1: none).
func checkDoc(text string, exampleLines int) []string {
	if strings.TrimSpace(text) == "" {
		return []string{"no package doc comment"}
	}
	var probs []string
	blocks := new(comment.Parser).Parse(text).Content
	first, isPara := blocks[0].(*comment.Paragraph)
	if !isPara {
		return []string{"the doc comment does not open with a sentence"}
	}
	sentence := paragraphText(first)
	if n := sentences(sentence); n != 1 {
		probs = append(probs, "the first paragraph holds "+itoa(n)+" sentences, want one")
	} else if !strings.HasSuffix(sentence, ".") && !strings.HasSuffix(sentence, ":") {
		probs = append(probs, "the first paragraph does not end with a full stop (a sentence cut by a code block?)")
	}
	codeLines := -1
	if len(blocks) > 1 {
		if c, isCode := blocks[1].(*comment.Code); isCode {
			codeLines = countLines(c.Text)
		}
	}
	switch {
	case codeLines >= 0 && codeLines <= MaxSnippetLines:
	case exampleLines >= 0 && exampleLines <= MaxSnippetLines:
	case codeLines < 0 && exampleLines < 0:
		probs = append(probs, "no snippet: neither a code block after the first sentence nor a package Example")
	default:
		longest := max(codeLines, exampleLines)
		if codeLines >= 0 && exampleLines >= 0 {
			longest = min(codeLines, exampleLines)
		}
		probs = append(probs, "the snippet has "+itoa(longest)+" lines, want at most "+itoa(MaxSnippetLines))
	}
	return probs
}

// paragraphText is a paragraph's plain text on one line.
func paragraphText(p *comment.Paragraph) string {
	var b strings.Builder
	var walk func(ts []comment.Text)
	walk = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case comment.Plain:
				b.WriteString(string(t))
			case comment.Italic:
				b.WriteString(string(t))
			case *comment.Link:
				walk(t.Text)
			case *comment.DocLink:
				walk(t.Text)
			}
		}
	}
	walk(p.Text)
	return strings.Join(strings.Fields(b.String()), " ")
}

// sentences counts the sentences of a paragraph.
func sentences(p string) int {
	for _, a := range abbreviations {
		p = strings.ReplaceAll(p, a, strings.TrimSuffix(a, "."))
	}
	p = strings.TrimSpace(p)
	if p == "" {
		return 0
	}
	return len(sentenceEnd.FindAllStringIndex(p, -1)) + 1
}

// packageExampleLines returns the body length, in lines, of the shortest
// package example (func Example or Example_suffix) in f, or -1. The body
// is counted from its first statement to its last, so the trailing
// "// Output:" comment does not count.
func packageExampleLines(fset *token.FileSet, f *ast.File) int {
	best := -1
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv != nil || fd.Body == nil || len(fd.Body.List) == 0 {
			continue
		}
		if fd.Name.Name != "Example" && !strings.HasPrefix(fd.Name.Name, "Example_") {
			continue
		}
		if fd.Type.Params.NumFields() != 0 || fd.Type.Results.NumFields() != 0 {
			continue
		}
		first := fset.Position(fd.Body.List[0].Pos()).Line
		last := fset.Position(fd.Body.List[len(fd.Body.List)-1].End()).Line
		if n := last - first + 1; best < 0 || n < best {
			best = n
		}
	}
	return best
}

// countLines counts the non-blank lines of a code block.
func countLines(code string) int {
	n := 0
	for _, l := range strings.Split(code, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
