package doccheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The run rule. What the documentation says a program prints, it prints:
//
//   - A Markdown ```go block that is a whole program (package main with a
//     func main), or that is followed by an output block (a text, console,
//     output or json block with only blank lines between), carries one of
//     two markers on the line before its fence:
//     `<!-- doccheck: run -->` (TestSnippetsRun builds it, runs it and
//     compares its stdout with the output block right after it, which it
//     must have), or `<!-- doccheck: not run (REASON) -->` (counted in
//     the test's log, with the reason). A run program talks to real
//     sockets on loopback, on ports the kernel picks (port 0), and ends
//     by itself: each gets runTimeout. Its stderr (logs) is not compared.
//   - A ```sh block of README.md or docs/*.md with the run marker is a
//     sequence of zmqguard commands a reader types (TestShellRun): each
//     line (a trailing \ continues it) runs in bash, a line ending in &
//     in the background, with the zmqguard binary (built once) first on
//     PATH. Ports are the kernel's: in a background command, the address
//     of a listening flag (--bind, --replay-bind, --http) whose port has
//     not been seen yet is given port 0, and the port the command logs
//     (listenLogKeys) replaces the documented one in every later line;
//     in the output, the documented port stands for it again. The last
//     command's stdout must equal the output block right after the sh
//     block; it is run again (every 200 ms, up to runTimeout) until it
//     does, as a reader waiting for the index to catch up would.
//
// Both compare after normalising addresses and durations (normalise): a
// doc shows ports and times of one run, not of every run. A program may
// print nothing the doc calls timing- or load-dependent (a replayed flag,
// a count of heartbeats): the comparison is exact otherwise.

// mdRun marks a Markdown block that the tests run.
const mdRun = "<!-- doccheck: run -->"

// mdNoRun marks a whole-program block that cannot run in a test.
var mdNoRun = regexp.MustCompile(`^<!-- doccheck: not run \((.*\S.*)\) -->$`)

// outputLangs are the tags of a block that shows what the one before it
// prints.
var outputLangs = map[string]bool{"text": true, "console": true, "output": true, "json": true}

// runTimeout bounds each run of a snippet, and the wait of a shell block's
// last command for its documented output.
const runTimeout = 20 * time.Second

// block is a fenced block's text and the line of its fence.
type block struct {
	text string
	line int
}

// outputBlock returns the fenced block starting at lines[from], past
// blank lines, with its tag; ok is false when a non-blank line that is not
// a fence comes first.
func outputBlock(lines []string, from int) (b block, lang string, ok bool, err error) {
	j := from
	for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
		j++
	}
	if j == len(lines) {
		return block{}, "", false, nil
	}
	lang, fence := strings.CutPrefix(strings.TrimSpace(lines[j]), "```")
	if !fence {
		return block{}, "", false, nil
	}
	k := j + 1
	for k < len(lines) && strings.TrimSpace(lines[k]) != "```" {
		k++
	}
	if k == len(lines) {
		return block{}, "", false, fmt.Errorf("line %d: unterminated code block", j+1)
	}
	return block{text: strings.Join(lines[j+1:k], "\n") + "\n", line: j + 1}, lang, true, nil
}

var (
	addrRE = regexp.MustCompile(`\b(127\.0\.0\.1|localhost|\[::1\]):\d+\b`)
	durRE  = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)\b`)
)

// normalise makes a program's output and a doc's comparable: every
// loopback address's port becomes PORT and every duration DURATION;
// trailing blank space of lines and of the whole text is dropped.
func normalise(s string) string {
	s = addrRE.ReplaceAllString(s, "$1:PORT")
	s = durRE.ReplaceAllString(s, "DURATION")
	lines := strings.Split(strings.TrimRight(s, " \t\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// isProgram reports whether a snippet is a whole program.
func isProgram(code string) bool {
	return regexp.MustCompile(`(?m)^package main\b`).MatchString(code) && regexp.MustCompile(`(?m)^func main\(\)`).MatchString(code)
}

// runPlan sorts the Markdown snippets of the repository for running: the
// ones marked run, the reasons of those marked not run, and a problem for
// each program or snippet shown with its output that has neither marker.
func runPlan(snippets []snippet) (run []snippet, notRun, problems []string) {
	for _, s := range snippets {
		if strings.Contains(s.where, "(package doc)") {
			continue // package docs show programs as testable Examples
		}
		switch {
		case s.run && s.skip != "":
			problems = append(problems, fmt.Sprintf("%s: marked both run and not compiled", s.where))
		case s.run && !isProgram(s.code):
			problems = append(problems, fmt.Sprintf("%s: marked run, but not a whole program (package main, func main)", s.where))
		case s.run:
			run = append(run, s)
		case s.noRun != "":
			notRun = append(notRun, fmt.Sprintf("%s: not run (%s)", s.where, s.noRun))
		case s.skip != "":
			// pseudo-code, counted by TestSnippetsCompile
		case isProgram(s.code):
			problems = append(problems, fmt.Sprintf("%s: a whole program: mark it %s (with its output right after) or <!-- doccheck: not run (REASON) -->", s.where, mdRun))
		case s.shown:
			problems = append(problems, fmt.Sprintf("%s: shown with its output (line %d): make it a program marked %s, or mark it <!-- doccheck: not run (REASON) -->", s.where, s.outLine, mdRun))
		}
	}
	return run, notRun, problems
}

// TestSnippetsRun builds every Markdown snippet marked run in one go
// build, runs each (runTimeout) and compares its stdout with the output
// block the doc shows after it.
func TestSnippetsRun(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	snippets, err := repoSnippets(root)
	if err != nil {
		t.Fatal(err)
	}
	run, notRun, problems := runPlan(snippets)
	for _, p := range problems {
		t.Error(p)
	}
	for _, n := range notRun {
		t.Log(n)
	}
	t.Logf("%d snippets marked run, %d marked not run", len(run), len(notRun))
	if len(run) < 2 {
		t.Fatalf("%d snippets marked run; docs/kv-index.md and docs/kv-events.md have one each: is the extraction broken?", len(run))
	}
	bins := buildRunnable(t, root, run)
	for i, s := range run {
		got, stderr, err := runBinary(bins[i], runTimeout)
		if err != nil {
			t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", s.where, err, got, stderr)
			continue
		}
		if d := outputDiff(normalise(s.output), normalise(got)); d != "" {
			t.Errorf("%s: prints what its doc does not show (output block at line %d; after normalise):\n%s", s.where, s.outLine, d)
		}
	}
}

// buildRunnable builds the snippets as programs of the module at root, in
// one go build through an overlay (as buildSnippets), and returns their
// binaries' paths in order.
func buildRunnable(t *testing.T, root string, run []snippet) []string {
	t.Helper()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	overlay := map[string]string{}
	var pkgs, bins []string
	for i, s := range run {
		pkg := fmt.Sprintf("r%03d", i)
		files, err := wrapSnippet(s, "main")
		if err != nil {
			t.Fatalf("%s: %v", s.where, err)
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
		bins = append(bins, filepath.Join(bin, pkg))
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	goBuild(t, root, append([]string{"build", "-overlay", ovPath, "-o", bin + string(filepath.Separator)}, pkgs...)...)
	return bins
}

// goBuild runs the go command in root (4 minutes at most) and fails the
// test with its output when it fails.
func goBuild(t *testing.T, root string, args ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), workspaceEnv(t, root))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runBinary runs a program in a temporary directory of its own and
// returns its stdout and stderr; more than timeout is an error.
func runBinary(path string, timeout time.Duration) (stdout, stderr string, err error) {
	dir, err := os.MkdirTemp("", "doccheck-run")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("did not end within %s", timeout)
	}
	return o.String(), e.String(), err
}

// outputDiff returns "" when want and got are equal, else both, line by
// line, the first differing line marked.
func outputDiff(want, got string) string {
	if want == got {
		return ""
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		mark := " "
		if w != g {
			mark = "!"
		}
		fmt.Fprintf(&b, "%s doc: %s\n%s got: %s\n", mark, w, mark, g)
	}
	return b.String()
}

// shellBlock is a ```sh block marked run, with the output block after it.
type shellBlock struct {
	where    string
	cmds     []string // continuation lines joined
	output   string
	outWhere string
}

// shellRuns returns the sh blocks marked run of one Markdown file.
func shellRuns(rel, text string) ([]shellBlock, error) {
	var out []shellBlock
	lines := strings.Split(text, "\n")
	for i := 1; i < len(lines); i++ {
		if lines[i-1] != mdRun || !strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
			continue
		}
		lang := strings.TrimPrefix(strings.TrimSpace(lines[i]), "```")
		if lang == "go" {
			continue // TestSnippetsRun's
		}
		sb := shellBlock{where: fmt.Sprintf("%s:%d", rel, i+1)}
		if lang != "sh" {
			return nil, fmt.Errorf("%s: %s before a %q block (want go or sh)", sb.where, mdRun, lang)
		}
		j := i + 1
		var cur string
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			l := strings.TrimSpace(lines[j])
			if c, ok := strings.CutSuffix(l, `\`); ok {
				cur += c
				continue
			}
			if l = cur + l; l != "" && !strings.HasPrefix(l, "#") {
				sb.cmds = append(sb.cmds, l)
			}
			cur = ""
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s: unterminated code block", sb.where)
		}
		ob, olang, ok, err := outputBlock(lines, j+1)
		if err != nil || !ok || !outputLangs[olang] {
			return nil, fmt.Errorf("%s: a %s sh block needs its output right after it (%v)", sb.where, mdRun, err)
		}
		sb.output, sb.outWhere = ob.text, fmt.Sprintf("%s:%d", rel, ob.line)
		if len(sb.cmds) == 0 || strings.HasSuffix(sb.cmds[len(sb.cmds)-1], "&") {
			return nil, fmt.Errorf("%s: the last command must run in the foreground (its output is the block after)", sb.where)
		}
		out = append(out, sb)
		i = j
	}
	return out, nil
}

// listenLogKeys maps a listening flag to the key under which the
// command's log line gives the address it bound.
var listenLogKeys = map[string]string{"--bind": "endpoint", "--replay-bind": "replay", "--http": "http_addr"}

var listenFlagRE = regexp.MustCompile(`(--bind|--replay-bind|--http)[ =](\S*?)(127\.0\.0\.1):(\d+)\b`)

// bgProc is a background command of a shell block.
type bgProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
}

// Write collects the process's stderr.
func (p *bgProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *bgProc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// stop ends the process (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *bgProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// runShell runs a shell block's commands as the run rule says, with the
// directory bin first on PATH, and returns the last command's stdout
// (documented ports put back) once it equals the documented output, or
// the last one it got with an error.
func runShell(t *testing.T, sb shellBlock, bin string) (string, error) {
	t.Helper()
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ports := map[string]string{} // documented port -> the kernel's
	subst := func(s string) string {
		return addrRE.ReplaceAllStringFunc(s, func(a string) string {
			i := strings.LastIndexByte(a, ':')
			if p, ok := ports[a[i+1:]]; ok {
				return a[:i+1] + p
			}
			return a
		})
	}
	back := func(s string) string {
		for doc, real := range ports {
			s = strings.ReplaceAll(s, ":"+real, ":"+doc)
		}
		return s
	}
	dir := t.TempDir()
	for i, c := range sb.cmds {
		line, bg := strings.CutSuffix(c, "&")
		line = strings.TrimSpace(line)
		if i == len(sb.cmds)-1 {
			line = subst(line)
			deadline := time.Now().Add(runTimeout)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				cmd := exec.CommandContext(ctx, "bash", "-c", line)
				cmd.Dir, cmd.Env = dir, env
				out, err := cmd.Output()
				cancel()
				got := back(string(out))
				if err == nil && normalise(got) == normalise(sb.output) {
					return got, nil
				}
				if time.Now().After(deadline) {
					return got, fmt.Errorf("%q: %v; its last output is not the documented one within %s", line, err, runTimeout)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		if !bg {
			return "", fmt.Errorf("%q: only the last command may run in the foreground", line)
		}
		// Listening addresses with ports not seen yet get port 0.
		type listen struct{ flag, port string }
		var fresh []listen
		line = listenFlagRE.ReplaceAllStringFunc(line, func(m string) string {
			sm := listenFlagRE.FindStringSubmatch(m)
			if _, seen := ports[sm[4]]; seen {
				return m
			}
			fresh = append(fresh, listen{sm[1], sm[4]})
			return sm[1] + m[len(sm[1]):len(m)-len(sm[4])] + "0"
		})
		line = subst(line)
		p := &bgProc{cmd: exec.Command("bash", "-c", "exec "+line), done: make(chan struct{})}
		p.cmd.Dir, p.cmd.Env, p.cmd.Stderr = dir, env, p
		if err := p.cmd.Start(); err != nil {
			return "", fmt.Errorf("%q: %v", line, err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		t.Cleanup(func() {
			p.stop()
			if t.Failed() {
				t.Logf("%q stderr:\n%s", line, p.text())
			}
		})
		for _, l := range fresh {
			key := listenLogKeys[l.flag]
			re := regexp.MustCompile(`\b` + key + `="?(?:\w+://)?127\.0\.0\.1:(\d+)`)
			deadline := time.Now().Add(runTimeout)
			for {
				if m := re.FindStringSubmatch(p.text()); m != nil {
					ports[l.port] = m[1]
					break
				}
				select {
				case <-p.done:
					return "", fmt.Errorf("%q exited before logging %s=", line, key)
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					return "", fmt.Errorf("%q did not log %s= within %s", line, key, runTimeout)
				}
			}
		}
	}
	return "", errors.New("no commands")
}

// TestShellRun runs the sh blocks of README.md and docs/*.md marked run,
// with zmqguard built once, and compares what the last command prints with
// the doc. The README's kv-index example must also score a real prompt:
// its answer names an engine holding cached tokens.
func TestShellRun(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []shellBlock
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		bs, err := shellRuns(filepath.ToSlash(rel), string(b))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	kvIndex := -1
	for i, sb := range blocks {
		if strings.HasPrefix(sb.where, "README.md:") && strings.Contains(strings.Join(sb.cmds, "\n"), "zmqguard kv-index") {
			kvIndex = i
		}
	}
	if kvIndex < 0 {
		t.Fatalf("README.md has no sh block marked %s running zmqguard kv-index (%d blocks marked)", mdRun, len(blocks))
	}
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("MISSING PEER: curl (Debian package curl): %v", err)
		}
		t.Skipf("MISSING PEER: curl (Debian package curl): %v", err)
	}
	bin := t.TempDir()
	goBuild(t, root, "build", "-o", filepath.Join(bin, "zmqguard"), "./cmd/zmqguard")
	for i, sb := range blocks {
		t.Run(sb.where, func(t *testing.T) {
			got, err := runShell(t, sb, bin)
			if err != nil {
				t.Fatalf("%s: %v\n%s", sb.where, err, outputDiff(normalise(sb.output), normalise(got)))
			}
			if i != kvIndex {
				return
			}
			var r struct {
				Best *struct {
					Engine string `json:"engine"`
					Tokens int    `json:"tokens"`
				} `json:"best"`
			}
			if err := json.Unmarshal([]byte(got), &r); err != nil || r.Best == nil || r.Best.Engine == "" || r.Best.Tokens <= 0 {
				t.Fatalf("%s: /score does not name an engine with cached tokens (%v): %s", sb.where, err, got)
			}
			t.Logf("%s: /score: %s holds %d tokens of the prompt", sb.where, r.Best.Engine, r.Best.Tokens)
		})
	}
}

// TestRunRule checks the run rule on small inputs: the markers and the
// output block they need, the plan's complaints about programs and shown
// outputs left unmarked, the shell block parser, and normalise.
func TestRunRule(t *testing.T) {
	prog := "package main\n\nfunc main() {}\n"
	md := "<!-- doccheck: run -->\n```go\n" + prog + "```\n\n```text\nhi\n```\n" +
		"<!-- doccheck: not run (needs a GPU) -->\n```go\n" + prog + "```\n" +
		"```go\n" + prog + "```\n" +
		"```go\nfmt.Println(1)\n```\n```output\n1\n```\n" +
		"```go\nfmt.Println(2)\n```\nprose\n```text\n2\n```\n"
	ss, err := markdownSnippets("a.md", md)
	if err != nil || len(ss) != 5 {
		t.Fatalf("markdownSnippets = %+v, %v", ss, err)
	}
	if !ss[0].run || ss[0].output != "hi\n" || ss[0].outLine != 8 || ss[1].noRun != "needs a GPU" || !ss[3].shown || ss[4].shown {
		t.Fatalf("markers or outputs misread: %+v", ss)
	}
	run, notRun, problems := runPlan(ss)
	if len(run) != 1 || len(notRun) != 1 || len(problems) != 2 ||
		!strings.Contains(problems[0], "a.md:17: a whole program") || !strings.Contains(problems[1], "a.md:22: shown with its output") {
		t.Fatalf("runPlan = %d run, %q, %q", len(run), notRun, problems)
	}
	for _, bad := range []string{
		"<!-- doccheck: run -->\n```go\n" + prog + "```\nprose\n```text\nhi\n```\n", // output not right after
		"<!-- doccheck: not run () -->\n```go\n" + prog + "```\n",                   // no reason
		"<!-- doccheck: run it -->\n```go\n" + prog + "```\n",
	} {
		if _, err := markdownSnippets("b.md", bad); err == nil {
			t.Errorf("markdownSnippets(%q): no error", bad)
		}
	}
	if _, _, p := runPlan([]snippet{{where: "c.md:1", code: "x := 1\n", run: true, output: "1\n", shown: true}}); len(p) != 1 {
		t.Errorf("a fragment marked run: %q", p)
	}

	sh := "x\n" + mdRun + "\n```sh\n# a comment\nzmqguard a --bind tcp://127.0.0.1:1 \\\n   --http 127.0.0.1:2 &\n\ncurl http://127.0.0.1:2/\n```\n\n```json\n{}\n```\n"
	bs, err := shellRuns("r.md", sh)
	if err != nil || len(bs) != 1 || bs[0].where != "r.md:3" || bs[0].output != "{}\n" || bs[0].outWhere != "r.md:11" ||
		len(bs[0].cmds) != 2 || bs[0].cmds[0] != "zmqguard a --bind tcp://127.0.0.1:1 --http 127.0.0.1:2 &" {
		t.Fatalf("shellRuns = %+v, %v", bs, err)
	}
	for _, bad := range []string{
		mdRun + "\n```sh\ncurl x\n```\n",                        // no output
		mdRun + "\n```sh\nzmqguard a &\n```\n```text\n\n```\n",  // last in the background
		mdRun + "\n```python\nprint(1)\n```\n```text\n1\n```\n", // not sh
	} {
		if _, err := shellRuns("s.md", bad); err == nil {
			t.Errorf("shellRuns(%q): no error", bad)
		}
	}

	if a, b := normalise("at tcp://127.0.0.1:40123 in 1.5ms \n\n"), normalise("at tcp://127.0.0.1:5557 in 20s"); a != b || a != "at tcp://127.0.0.1:PORT in DURATION" {
		t.Errorf("normalise: %q, %q", a, b)
	}
	if outputDiff("a\nb", "a\nb") != "" || !strings.Contains(outputDiff("a\nb", "a\nc"), "! doc: b\n! got: c") {
		t.Errorf("outputDiff")
	}
}

// workspaceEnv is the GOWORK setting for a go command run in root: the
// repository's go.work, so that a snippet or program may import any of the
// repository's modules (cmd/, examples/, the metrics and Redis adapters are
// modules of their own), whatever GOWORK the caller's environment holds.
func workspaceEnv(t *testing.T, root string) string {
	t.Helper()
	work, err := filepath.Abs(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(work); err != nil {
		t.Fatalf("the repository's go.work is needed to build its modules together: %v", err)
	}
	return "GOWORK=" + work
}
