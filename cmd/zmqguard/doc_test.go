package main

import (
	"bytes"
	"flag"
	"go/parser"
	"go/token"
	"io"
	"os"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update-doc", false, "rewrite main.go's command list from the commands table")

const docHead = "// Commands (the same list as 'zmqguard help'"

// docCommandLines returns the command list of main.go's package
// documentation (the indented lines after the "Commands" paragraph).
func docCommandLines(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("main.go has no package documentation")
	}
	text := f.Doc.Text()
	i := strings.Index(text, "Commands (")
	if i < 0 {
		t.Fatalf("main.go's package documentation has no command list:\n%s", text)
	}
	text = text[i:]
	i = strings.Index(text, "\n\n")
	if i < 0 {
		t.Fatal("main.go's command list: no blank line after its heading")
	}
	var out []string
	for _, l := range strings.Split(text[i+2:], "\n") {
		if !strings.HasPrefix(l, "\t") {
			break
		}
		out = append(out, strings.TrimPrefix(l, "\t"))
	}
	return out
}

// rewriteDoc replaces main.go's command list with the table's.
func rewriteDoc(t *testing.T) {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(src, []byte(docHead))
	if i < 0 {
		t.Fatalf("main.go: no line starting %q", docHead)
	}
	j := bytes.Index(src[i:], []byte("\n//\n"))
	if j < 0 {
		t.Fatal("main.go: no blank comment line after the command list's heading")
	}
	start := i + j + len("\n//\n")
	end := start
	for bytes.HasPrefix(src[end:], []byte("//\t")) {
		end += bytes.IndexByte(src[end:], '\n') + 1
	}
	var b bytes.Buffer
	b.Write(src[:start])
	for _, l := range commandLines() {
		b.WriteString("//\t" + l + "\n")
	}
	b.Write(src[end:])
	if err := os.WriteFile("main.go", b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPackageDocListsEveryCommand: the package documentation and 'zmqguard
// help' list exactly the commands of the table, in its order, each with
// its summary: both come from commandLines, so a command added to the
// table without its line in main.go's documentation fails here (run with
// -update-doc to rewrite that list).
func TestPackageDocListsEveryCommand(t *testing.T) {
	if *updateDoc {
		rewriteDoc(t)
	}
	want := commandLines()
	got := docCommandLines(t)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("main.go's command list differs from the commands table (go test -run TestPackageDocListsEveryCommand -update-doc rewrites it)\ngot:\n%s\nwant:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var help bytes.Buffer
	code := run(t.Context(), []string{"help"}, &help, io.Discard, false)
	if code != 0 {
		t.Fatalf("zmqguard help: exit %d", code)
	}
	for _, c := range commands {
		found := false
		for _, l := range strings.Split(help.String(), "\n") {
			f := strings.Fields(l)
			if len(f) > 0 && f[0] == c.commandSpec().name && strings.Contains(l, c.commandSpec().summary) {
				found = true
			}
		}
		if !found {
			t.Errorf("zmqguard help does not list %s with its summary:\n%s", c.commandSpec().name, help.String())
		}
		if c.commandSpec().summary == "" {
			t.Errorf("command %s has no summary", c.commandSpec().name)
		}
	}
	for _, name := range []string{"keygen", "outputs"} {
		if !strings.Contains(strings.Join(got, "\n"), name+" ") {
			t.Errorf("the package documentation does not list %s", name)
		}
	}
}
