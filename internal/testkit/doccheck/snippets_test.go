package doccheck

import (
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The snippet rule. Every Go snippet a reader meets compiles:
//
//   - In Markdown (every .md file of the repository outside testdata), a
//     fenced block tagged go. A block tagged otherwise (or not at all) that
//     looks like Go (below) fails the test: tag it go.
//   - In a package doc comment (the comment on a package clause of a non-test
//     file), a code block that looks like Go: it has a := or a qualified call
//     (pkg.Name( ...), or a line opening with func or package. Diagrams,
//     tables and shell lines do not, and are not built.
//
// A snippet is built as is when it opens with a package clause (a whole
// file). Otherwise it is a fragment: made of declarations only, it becomes
// the body of a file; else it becomes the body of a function returning
// error (so `return err` works), followed by `_ = x` for each name its top
// level declares (a fragment need not use every name it shows). A line that
// is only "..." stands for omitted code and is dropped. The packages a
// fragment names are imported from [snippetImports]; every other name it
// uses without declaring must be one of [snippetGivens] (ctx, a Job type,
// prompt token ids, ...): an unknown free name fails the test, so a new
// name is added here once, with its type, not guessed.
//
// A snippet that is deliberately not Go (pseudo-code) says so: in Markdown,
// the line before its fence is `<!-- doccheck: not compiled (REASON) -->`;
// in a doc comment, its first line is `// not compiled: REASON`. The test
// logs how many it skipped, and fails on a marker without a reason.
//
// A whole-file snippet with a //go:generate line running msgp gets the
// method msgp would generate (UnmarshalMsg, which loop.MsgpDecoder needs)
// for each struct type it declares, in a second file of its package.
//
// All snippets are built in one go build call, one package each, through
// an overlay (-overlay) that places them under this directory's
// snippets.overlay/ path inside the module: no file is written to the
// repository, and internal packages are importable as they are to the
// repository's own code.

// snippetImports maps the package names snippets use to import paths.
var snippetImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "slog": "log/slog",
	"net": "net", "netip": "net/netip", "http": "net/http", "os": "os", "signal": "os/signal", "syscall": "syscall",
	"testing": "testing", "time": "time",

	"coordinator": "github.com/zmqguard/zmqguard/coordinator",
	"decodeguard": "github.com/zmqguard/zmqguard/decodeguard",
	"enginecore":  "github.com/zmqguard/zmqguard/enginecore",
	"envelope":    "github.com/zmqguard/zmqguard/envelope",
	"handshake":   "github.com/zmqguard/zmqguard/handshake",
	"kvevents":    "github.com/zmqguard/zmqguard/kvevents",
	"kvindex":     "github.com/zmqguard/zmqguard/kvindex",
	"discovery":   "github.com/zmqguard/zmqguard/kvevents/discovery",
	"kvindextest": "github.com/zmqguard/zmqguard/kvindex/kvindextest",
	"redisstore":  "github.com/zmqguard/zmqguard/kvindex/redisstore",
	"vllmhash":    "github.com/zmqguard/zmqguard/kvindex/vllmhash",
	"loop":        "github.com/zmqguard/zmqguard/loop",
	"metrics":     "github.com/zmqguard/zmqguard/metrics",
	"zgotel":      "github.com/zmqguard/zmqguard/metrics/zgotel",
	"zgprom":      "github.com/zmqguard/zmqguard/metrics/zgprom",
	"outputs":     "github.com/zmqguard/zmqguard/outputs",
	"socket":      "github.com/zmqguard/zmqguard/socket",
	"vllm":        "github.com/zmqguard/zmqguard/vllm",
	"zmtpguard":   "github.com/zmqguard/zmqguard/zmtpguard",
	"apicheck":    "github.com/zmqguard/zmqguard/internal/testkit/apicheck",
	"dppeer":      "github.com/zmqguard/zmqguard/internal/ref/dppeer",
	"dpwire":      "github.com/zmqguard/zmqguard/internal/ref/dpwire",
	"msgpscan":    "github.com/zmqguard/zmqguard/internal/stack/msgpscan",
	"nixlwire":    "github.com/zmqguard/zmqguard/internal/ref/nixlwire",
	"ratelog":     "github.com/zmqguard/zmqguard/internal/stack/ratelog",
	"reentrytest": "github.com/zmqguard/zmqguard/internal/testkit/reentrytest",

	"zmq4":       "github.com/go-zeromq/zmq4",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
}

// snippetGivens are the names fragments may use without declaring them,
// each with the package-level declaration it gets, and the packages that
// declaration needs.
var snippetGivens = map[string]struct {
	decl    string
	imports []string
}{
	"ctx":            {"var ctx context.Context", []string{"context"}},
	"t":              {"var t *testing.T", []string{"testing"}},
	"Job":            {"type Job struct{ ID string }\n\nfunc (*Job) UnmarshalMsg(b []byte) ([]byte, error) { return b, nil }", nil},
	"handle":         {"func handle(context.Context, loop.Delivery[Job]) error { return nil }", []string{"context", "loop"}},
	"save":           {"func save(*Job) error { return nil }", nil},
	"use":            {"func use(...any) {}", nil},
	"route":          {"func route(engine string) {}", nil},
	"prompt":         {"var prompt []int64", nil},
	"promptTokenIDs": {"var promptTokenIDs []int64", nil},
	"frames":         {"var frames [][]byte", nil},
	"frame":          {"var frame []byte", nil},
	"replyFrame":     {"var replyFrame []byte", nil},
	"peer":           {"var peer string", nil},
	"logger":         {"var logger *slog.Logger", []string{"slog"}},
	"n":              {"var n uint64", nil},
	"root":           {"var root string", nil},
	"pub":            {"var pub string", nil},
	"out":            {"var out string", nil},
	"loads":          {"var loads []dpwire.Load", []string{"dpwire"}},
	"cliSec":         {"var cliSec zmtpguard.CurveKey", []string{"zmtpguard"}},
	"l":              {"var l *loop.Loop[Job]", []string{"loop"}},
	"pull":           {"var pull *socket.Socket", []string{"socket"}},
	"h":              {"var h *handshake.Listener", []string{"handshake"}},
	"coord":          {"var coord *coordinator.Coordinator", []string{"coordinator"}},
	"set":            {"var set *metrics.Set", []string{"metrics"}},
	"cfg":            {"var cfg outputs.Config", []string{"outputs"}},
	"engines":        {"var engines []netip.Prefix", []string{"netip"}},
	// mystore is the reader's own backend package in kvindextest's doc.
	"mystore": {"var mystore struct{ New func(capacity int) (kvindex.Backend, error) }", []string{"kvindex"}},
}

// snippet is one Go code block of the repository's documentation.
type snippet struct {
	where string // file:line
	code  string
	skip  string // the reason given by a "not compiled" marker
	// Markdown only (see runsnippets_test.go): run is set by a "run"
	// marker, output is then the block after it; noRun is the reason of a
	// "not run" marker; shown is set when the block right after is an
	// output block (text, console, output), marked or not.
	run     bool
	output  string
	noRun   string
	shown   bool
	outLine int // the output block's first line (its fence), when shown
}

var (
	looksLikeGo = regexp.MustCompile(`:=|\b[a-z]\w*\.[A-Z]\w*(\[[^\]]*\])?\(|(?m)^(func|package) `)
	mdSkip      = regexp.MustCompile(`^<!-- doccheck: not compiled \((.*)\) -->$`)
	docSkip     = regexp.MustCompile(`^// not compiled: (.*)$`)
)

// markdownSnippets returns the ```go blocks of one Markdown file.
func markdownSnippets(rel, text string) ([]snippet, error) {
	var out []snippet
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		lang, fence := strings.CutPrefix(strings.TrimSpace(lines[i]), "```")
		if !fence {
			continue
		}
		open := i
		s := snippet{where: fmt.Sprintf("%s:%d", rel, open+1)}
		i++
		for i < len(lines) && strings.TrimSpace(lines[i]) != "```" {
			i++
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: unterminated code block", s.where)
		}
		s.code = strings.Join(lines[open+1:i], "\n") + "\n"
		if lang != "go" {
			// Go tagged otherwise (or not at all) would escape the build.
			if looksLikeGo.MatchString(s.code) {
				return nil, fmt.Errorf("%s: a %q block that looks like Go: tag it go (and mark it if it is not meant to compile)", s.where, lang)
			}
			continue
		}
		if open > 0 && strings.HasPrefix(lines[open-1], "<!-- doccheck") {
			marker := lines[open-1]
			switch {
			case marker == mdRun:
				s.run = true
			case mdNoRun.MatchString(marker):
				s.noRun = mdNoRun.FindStringSubmatch(marker)[1]
			default:
				m := mdSkip.FindStringSubmatch(marker)
				if m == nil || strings.TrimSpace(m[1]) == "" {
					return nil, fmt.Errorf("%s: malformed marker %q (want <!-- doccheck: not compiled (REASON) -->, %s or <!-- doccheck: not run (REASON) -->)", s.where, marker, mdRun)
				}
				s.skip = m[1]
			}
		}
		ob, lang, ok, err := outputBlock(lines, i+1)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.where, err)
		}
		if ok && outputLangs[lang] {
			s.shown, s.output, s.outLine = true, ob.text, ob.line
		}
		if s.run && !s.shown {
			return nil, fmt.Errorf("%s: a %s block needs its output right after it (a text, console or output block)", s.where, mdRun)
		}
		out = append(out, s)
	}
	return out, nil
}

// docSnippets returns the code blocks that look like Go in the package doc
// comment of one Go file.
func docSnippets(rel, path string) ([]snippet, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return nil, err
	}
	if f.Doc == nil {
		return nil, nil
	}
	var out []snippet
	for _, b := range new(comment.Parser).Parse(f.Doc.Text()).Content {
		c, ok := b.(*comment.Code)
		if !ok {
			continue
		}
		s := snippet{where: fmt.Sprintf("%s:%d (package doc)", rel, fset.Position(f.Doc.Pos()).Line), code: c.Text}
		first, _, _ := strings.Cut(c.Text, "\n")
		if strings.HasPrefix(first, "// not compiled") {
			m := docSkip.FindStringSubmatch(first)
			if m == nil || strings.TrimSpace(m[1]) == "" {
				return nil, fmt.Errorf("%s: malformed marker %q (want // not compiled: REASON)", s.where, first)
			}
			s.skip = m[1]
		} else if !looksLikeGo.MatchString(c.Text) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// repoSnippets finds every snippet under root.
func repoSnippets(root string) ([]snippet, error) {
	var out []snippet
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			n := d.Name()
			if rel != "." && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		var ss []snippet
		switch {
		case strings.HasSuffix(rel, ".md"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			ss, err = markdownSnippets(rel, string(b))
			if err != nil {
				return err
			}
		case strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go"):
			ss, err = docSnippets(rel, path)
			if err != nil {
				return err
			}
		}
		out = append(out, ss...)
		return nil
	})
	return out, err
}

// wrapSnippet turns a snippet into the files of one package named pkg,
// following the rule above.
func wrapSnippet(s snippet, pkg string) (map[string]string, error) {
	var kept []string
	for _, line := range strings.Split(s.code, "\n") {
		if strings.TrimSpace(line) != "..." {
			kept = append(kept, line)
		}
	}
	code := strings.Join(kept, "\n")
	if strings.HasPrefix(strings.TrimSpace(code), "package ") || strings.Contains(code, "\npackage ") {
		files := map[string]string{"snippet.go": code}
		if gen := msgpStub(code); gen != "" {
			files["snippet_gen.go"] = gen
		}
		return files, nil
	}
	fset := token.NewFileSet()
	declMode := true
	f, err := parser.ParseFile(fset, "", "package p\n"+code, parser.SkipObjectResolution)
	if err != nil {
		declMode = false
		f, err = parser.ParseFile(fset, "", "package p\nfunc _() error {\n"+code+"\n}\n", parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("does not parse as declarations or as statements: %v", err)
		}
	}
	free, top := freeNames(f, declMode)
	imports := map[string]bool{}
	var givens []string
	for _, name := range free {
		if path, ok := snippetImports[name]; ok {
			imports[path] = true
			continue
		}
		g, ok := snippetGivens[name]
		if !ok {
			return nil, fmt.Errorf("uses %s, which it does not declare: declare it in the snippet, or add it to snippetGivens", name)
		}
		givens = append(givens, g.decl)
		for _, p := range g.imports {
			imports[snippetImports[p]] = true
		}
		// A given may name packages and givens the snippet does not.
		for _, w := range regexp.MustCompile(`\b(\w+)\.`).FindAllStringSubmatch(g.decl, -1) {
			if p, ok := snippetImports[w[1]]; ok {
				imports[p] = true
			}
		}
		if strings.Contains(g.decl, "Job") && !slices.Contains(free, "Job") {
			givens = append(givens, snippetGivens["Job"].decl)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	paths := make([]string, 0, len(imports))
	for p := range imports {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		fmt.Fprintf(&b, "import %q\n", p)
	}
	slices.Sort(givens)
	givens = slices.Compact(givens)
	for _, g := range givens {
		fmt.Fprintf(&b, "\n%s\n", g)
	}
	if declMode {
		fmt.Fprintf(&b, "\n%s\n", code)
	} else {
		fmt.Fprintf(&b, "\nfunc snippet() error {\n%s\n", code)
		for _, n := range top {
			fmt.Fprintf(&b, "\t_ = %s\n", n)
		}
		b.WriteString("\treturn nil\n}\n")
	}
	return map[string]string{"snippet.go": b.String()}, nil
}

// freeNames returns the names f uses without declaring them anywhere
// (scopes are not told apart: a name declared anywhere counts as declared,
// so a snippet that reuses a free name as a local elsewhere must rename
// one), and, for a statement fragment, the names its outermost statements
// declare.
func freeNames(f *ast.File, declMode bool) (free, top []string) {
	free = freeIn(f)
	if !declMode {
		top = topNames(f.Decls[0].(*ast.FuncDecl).Body)
	}
	return free, top
}

// freeIn returns the names used under root and declared nowhere under it;
// a function literal is a scope of its own (its parameters are not
// declared outside it), other blocks are not told apart.
func freeIn(root ast.Node) (free []string) {
	declared := map[string]bool{}
	used := map[string]bool{}
	addFields := func(fl *ast.FieldList) {
		if fl == nil {
			return
		}
		for _, fd := range fl.List {
			for _, n := range fd.Names {
				declared[n.Name] = true
			}
		}
	}
	var visit func(ast.Node) bool
	useAll := func(n ast.Node) {
		if n != nil && !reflect.ValueOf(n).IsNil() {
			ast.Inspect(n, visit)
		}
	}
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						declared[id.Name] = true
					}
				}
			}
		case *ast.ValueSpec:
			for _, id := range n.Names {
				declared[id.Name] = true
			}
		case *ast.TypeSpec:
			declared[n.Name.Name] = true
		case *ast.FuncDecl:
			if n.Recv == nil {
				declared[n.Name.Name] = true
			}
			addFields(n.Recv)
			useAll(n.Recv)
			useAll(n.Type)
			useAll(n.Body)
			return false
		case *ast.FuncLit:
			for _, name := range freeIn(n) {
				used[name] = true
			}
			return false
		case *ast.FuncType:
			addFields(n.TypeParams)
			addFields(n.Params)
			addFields(n.Results)
		case *ast.SelectorExpr:
			useAll(n.X) // n.Sel is a field, method or package member
			return false
		case *ast.KeyValueExpr:
			if _, isIdent := n.Key.(*ast.Ident); !isIdent {
				useAll(n.Key) // an ident key is a field name (maps keyed by a variable are not used in docs)
			}
			useAll(n.Value)
			return false
		case *ast.Field:
			useAll(n.Type) // n.Names are declared by the FuncType or StructType
			return false
		case *ast.BranchStmt:
			return false
		case *ast.LabeledStmt:
			useAll(n.Stmt)
			return false
		case *ast.Ident:
			used[n.Name] = true
		}
		return true
	}
	switch root := root.(type) {
	case *ast.FuncLit:
		useAll(root.Type)
		useAll(root.Body)
	default:
		useAll(root)
	}
	delete(declared, "_")
	for name := range used {
		if name == "_" || name == "p" || declared[name] || types.Universe.Lookup(name) != nil {
			continue
		}
		free = append(free, name)
	}
	slices.Sort(free)
	return free
}

// topNames returns the names the outermost statements of body declare.
func topNames(body *ast.BlockStmt) (top []string) {
	{
		for _, st := range body.List {
			switch st := st.(type) {
			case *ast.AssignStmt:
				if st.Tok == token.DEFINE {
					for _, e := range st.Lhs {
						if id, ok := e.(*ast.Ident); ok && id.Name != "_" && !slices.Contains(top, id.Name) {
							top = append(top, id.Name)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, sp := range g.Specs {
						for _, id := range sp.(*ast.ValueSpec).Names {
							if id.Name != "_" && !slices.Contains(top, id.Name) {
								top = append(top, id.Name)
							}
						}
					}
				}
			}
		}
	}
	return top
}

// msgpStub returns a file with UnmarshalMsg for each struct type of a
// whole-file snippet that runs msgp's go:generate, or "".
func msgpStub(code string) string {
	if !regexp.MustCompile(`(?m)^//go:generate .*tinylib/msgp`).MatchString(code) {
		return ""
	}
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.SkipObjectResolution)
	if err != nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n", f.Name.Name)
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, sp := range g.Specs {
			ts := sp.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.StructType); ok {
				fmt.Fprintf(&b, "\n// UnmarshalMsg stands for the method msgp generates.\nfunc (*%s) UnmarshalMsg(b []byte) ([]byte, error) { return b, nil }\n", ts.Name.Name)
			}
		}
	}
	return b.String()
}

// TestSnippetsCompile extracts every Go snippet of the repository's
// Markdown and package docs and builds them all in one go build call.
func TestSnippetsCompile(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	snippets, err := repoSnippets(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(snippets) < 20 {
		t.Fatalf("found %d snippets; the repository has more than 20: is the extraction broken?", len(snippets))
	}
	built, skipped, problems := buildSnippets(t, root, snippets)
	t.Logf("%d snippets: %d built, %d marked not compiled", len(snippets), built, skipped)
	for _, p := range problems {
		t.Error(p)
	}
}

// buildSnippets builds snippets as packages of the module at root (through
// an overlay) and returns how many it built, how many were marked not
// compiled, and one problem per snippet error, naming the snippet.
func buildSnippets(t *testing.T, root string, snippets []snippet) (built, skipped int, problems []string) {
	t.Helper()
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs []string
	owner := map[string]snippet{}
	for i, s := range snippets {
		if s.skip != "" {
			t.Logf("%s: not compiled (%s)", s.where, s.skip)
			skipped++
			continue
		}
		pkg := fmt.Sprintf("s%03d", i)
		files, err := wrapSnippet(s, pkg)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", s.where, err))
			continue
		}
		dir := filepath.Join(root, "internal", "testkit", "doccheck", "snippets.overlay", pkg)
		for name, text := range files {
			p := filepath.Join(tmp, pkg+"_"+name)
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay[filepath.Join(dir, name)] = p
		}
		pkgs = append(pkgs, "./internal/testkit/doccheck/snippets.overlay/"+pkg)
		owner[pkg] = s
	}
	if len(pkgs) == 0 {
		return 0, skipped, problems
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the snippets: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, append([]string{"build", "-overlay", ovPath}, pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), workspaceEnv(t, root))
	outb, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("go build of the snippets took more than 4 minutes:\n%s", outb)
	}
	if err == nil {
		return len(pkgs), skipped, problems
	}
	// Attribute each error line to its snippet, with the wrapped line.
	re := regexp.MustCompile(`/(s\d{3})_([^:/]+):(\d+):\d+: (.*)`)
	n := len(problems)
	for line := range strings.SplitSeq(string(outb), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text, _ := os.ReadFile(filepath.Join(tmp, m[1]+"_"+m[2]))
		at := ""
		if ls := strings.Split(string(text), "\n"); len(ls) > 0 {
			if k, err := strconv.Atoi(m[3]); err == nil && k >= 1 && k <= len(ls) {
				at = strings.TrimSpace(ls[k-1])
			}
		}
		problems = append(problems, fmt.Sprintf("%s: does not compile: %s (at %q)", owner[m[1]].where, m[4], at))
	}
	if len(problems) == n {
		problems = append(problems, fmt.Sprintf("go build failed:\n%s", outb))
	}
	return len(pkgs), skipped, problems
}

// TestSnippetRule checks the rule on small inputs: extraction from
// Markdown and doc comments (markers honoured, diagrams left out, a bad
// marker refused), wrapping (whole file, declarations, statements with
// imports and givens, "..." dropped, an unknown free name refused), and
// that the build reports a snippet that does not compile, by its place.
func TestSnippetRule(t *testing.T) {
	md := "text\n```go\nx := 1\n```\n<!-- doccheck: not compiled (pseudo-code) -->\n```go\nfoo bar\n```\n```sh\nls\n```\n"
	got, err := markdownSnippets("a.md", md)
	if err != nil || len(got) != 2 || got[0].where != "a.md:2" || got[0].code != "x := 1\n" || got[0].skip != "" || got[1].skip != "pseudo-code" {
		t.Fatalf("markdownSnippets = %+v, %v", got, err)
	}
	for _, bad := range []string{
		"<!-- doccheck: skip -->\n```go\nx\n```\n", "<!-- doccheck: not compiled () -->\n```go\nx\n```\n", "```go\nx := 1\n",
		"```\nx, err := socket.New(\"PULL\", o)\n```\n", // Go without the go tag
	} {
		if _, err := markdownSnippets("b.md", bad); err == nil {
			t.Errorf("markdownSnippets(%q): no error", bad)
		}
	}

	dir := t.TempDir()
	src := "// Package p does things.\n//\n//\tv, err := p.Do()\n//\n// A diagram:\n//\n//\ta -> b -> c\n//\n// And:\n//\n//\t// not compiled: shows a shape\n//\tp.Do(???)\npackage p\n"
	path := filepath.Join(dir, "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := docSnippets("p/p.go", path)
	if err != nil || len(ds) != 2 || ds[0].code != "v, err := p.Do()\n" || ds[0].skip != "" || ds[1].skip != "shows a shape" {
		t.Fatalf("docSnippets = %+v, %v", ds, err)
	}

	files, err := wrapSnippet(snippet{code: "package main\n\nfunc main() {}\n"}, "s")
	if err != nil || files["snippet.go"] != "package main\n\nfunc main() {}\n" || len(files) != 1 {
		t.Errorf("whole file: %q, %v", files, err)
	}
	files, err = wrapSnippet(snippet{code: "r, err := kvindex.New(kvindex.Config{})\n...\nfmt.Println(r, ctx)\nreturn err\n"}, "s")
	w := files["snippet.go"]
	for _, want := range []string{
		"package s\n", `import "context"`, `import "fmt"`, `import "github.com/zmqguard/zmqguard/kvindex"`,
		"var ctx context.Context", "func snippet() error {", "\t_ = r\n\t_ = err\n",
	} {
		if err != nil || !strings.Contains(w, want) {
			t.Errorf("statements: %v; lacks %q:\n%s", err, want, w)
		}
	}
	if strings.Contains(w, "...") {
		t.Errorf("statements: the ... line was kept:\n%s", w)
	}
	files, err = wrapSnippet(snippet{code: "func TestX(t *testing.T) { use(t) }\n"}, "s")
	if w := files["snippet.go"]; err != nil || !strings.Contains(w, "\nfunc TestX(t *testing.T) { use(t) }\n") || strings.Contains(w, "func snippet()") || !strings.Contains(w, "func use(") {
		t.Errorf("declarations: %v:\n%s", err, w)
	}
	// ctx is a parameter of the literal, not free there; unknown is free.
	if _, err := wrapSnippet(snippet{code: "f := func(ctx context.Context) {}\nf(unknown)\n"}, "s"); err == nil || !strings.Contains(err.Error(), "uses unknown") {
		t.Errorf("unknown free name: %v", err)
	}

	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	built, skipped, problems := buildSnippets(t, root, []snippet{
		{where: "good.md:1", code: "fmt.Println(1)\n"},
		{where: "bad.md:7", code: "var n int = \"text\"\n"},
		{where: "marked.md:1", code: "nonsense", skip: "pseudo"},
	})
	if built != 2 || skipped != 1 || len(problems) != 1 || !strings.HasPrefix(problems[0], "bad.md:7: does not compile: ") {
		t.Fatalf("buildSnippets = %d built, %d skipped, %q; want the bad one reported by its place", built, skipped, problems)
	}
}
