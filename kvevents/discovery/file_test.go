package discovery

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// TestParseSources: LIVE [REPLAY] per line, comments and blank lines
// skipped, each bad line reported with its number while the others apply.
func TestParseSources(t *testing.T) {
	in := strings.Join([]string{
		"# engines of pool a",
		"tcp://10.0.0.5:5557 tcp://10.0.0.5:5558",
		"",
		"   tcp://10.0.0.6:5557   # no replay",
		"tcp://10.0.0.7:5557 tcp://10.0.0.7:5558 extra",
		"udp://10.0.0.8:5557",
		"tcp://10.0.0.9:0",
		"tcp://*:5557",
		"tcp://10.0.0.5:5557",
		"ipc:///run/vllm/kv.sock",
		"tcp://[fd00::1]:5557 tcp://[fd00::1]:5558",
		"tcp://10.0.0.10:5557 tcp://10.0.0.10",
		"tcp://10.0.0.11:5557\r",
		"tcp://10.0.0.12:5557\x1b[31m",
	}, "\n")
	got, bad := parseSources([]byte(in))
	want := []kvevents.Source{
		{Name: "tcp://10.0.0.5:5557", Live: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"},
		{Name: "tcp://10.0.0.6:5557", Live: "tcp://10.0.0.6:5557"},
		{Name: "ipc:///run/vllm/kv.sock", Live: "ipc:///run/vllm/kv.sock"},
		{Name: "tcp://[fd00::1]:5557", Live: "tcp://[fd00::1]:5557", Replay: "tcp://[fd00::1]:5558"},
		{Name: "tcp://10.0.0.11:5557", Live: "tcp://10.0.0.11:5557"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sources\n%v\nwant\n%v", got, want)
	}
	var lines []int
	for _, b := range bad {
		lines = append(lines, b.line)
		if strings.ContainsRune(b.Error(), 0x1b) {
			t.Errorf("line %d's error carries an escape byte raw: %q", b.line, b.Error())
		}
	}
	if fmt.Sprint(lines) != "[5 6 7 8 9 12 14]" {
		t.Fatalf("bad lines %v (%v), want [5 6 7 8 9 12 14]", lines, bad)
	}
	if !strings.Contains(bad[4].Error(), "on line 2") {
		t.Errorf("duplicate: %v", bad[4])
	}
}

// logCapture records log lines' messages and attributes.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) count(sub string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Count(c.buf.String(), sub)
}

// writeAtomically replaces path by a rename, as editors and Kubernetes do.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// writeInPlace rewrites path in place (same inode) with one write at
// offset 0 of content padded with a comment to at least the old size, so
// that no poll can see it truncated or half-written (a writer that
// truncates first can be read half-way: File documents it).
func writeInPlace(t *testing.T, path, content string) {
	t.Helper()
	old, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if pad := int(old.Size()) - len(content); pad > 0 {
		content += "#" + strings.Repeat("x", max(pad-2, 0)) + "\n"
	}
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
}

func lineOf(e *engine, replay bool) string {
	if replay {
		return e.name + " " + e.pub.ReplayEndpoint()
	}
	return e.name
}

// TestFileFollowsFleet: a sources file edited in place, replaced by a
// rename, swapped the way Kubernetes updates a mounted ConfigMap (a
// symbolic link renamed over another), with a bad line, an endpoint
// changed and the file missing for a while; the index holds exactly what
// the listed engines hold after each step, departed engines retired.
func TestFileFollowsFleet(t *testing.T) {
	f := newFleet(t)
	var e []*engine
	for i := range 4 {
		en, err := startEngine(t, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", i+1)
		if err != nil {
			t.Fatal(err)
		}
		f.add(en)
		e = append(e, en)
	}
	dir := t.TempDir()
	// Kubernetes' layout: sources -> ..data/sources, ..data -> ..v1.
	write := func(version, content string) {
		t.Helper()
		vdir := filepath.Join(dir, version)
		if err := os.Mkdir(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, "sources"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..v1", lineOf(e[0], true)+"\n"+lineOf(e[1], true)+"\n")
	path := filepath.Join(dir, "sources")
	if err := os.Symlink(filepath.Join("..data", "sources"), path); err != nil {
		t.Fatal(err)
	}
	logs := &logCapture{}
	f.follow(File{Path: path, Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	f.waitExact("first file", []*engine{e[0], e[1]}, 0)

	// ConfigMap update: e[0] leaves, e[2] joins, and a bad line.
	write("..v2", "# v2\n"+lineOf(e[1], true)+"\nnot-an-endpoint\n"+lineOf(e[2], true)+"\n")
	f.waitExact("configmap swap", []*engine{e[1], e[2]}, 1)
	if n := logs.count(`"line":3`); n != 1 {
		t.Fatalf("the bad line logged %d times with its number 3, want once", n)
	}

	// Replaced by a rename (an editor): a plain file now.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, path, lineOf(e[1], true)+"\n"+lineOf(e[2], true)+"\n"+lineOf(e[3], true)+"\n")
	f.waitExact("replaced by a rename", []*engine{e[1], e[2], e[3]}, 1)

	// Replaced by a rename with a file of the same size and modification
	// time: only its identity (the inode) tells.
	old, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	content := lineOf(e[1], true) + "\n" + lineOf(e[2], true) + "\n#"
	content += strings.Repeat("x", int(old.Size())-len(content)-1) + "\n"
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, old.ModTime(), old.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if now, err := os.Stat(path); err != nil || now.Size() != old.Size() || !now.ModTime().Equal(old.ModTime()) || os.SameFile(now, old) {
		t.Fatalf("the replacement is not the same size and time in another file: %v", err)
	}
	f.waitExact("same size and time, another file", []*engine{e[1], e[2]}, 2)

	// Edited in place: e[1]'s replay endpoint dropped: removed, then added
	// again without a replay endpoint, so what it stored before is gone.
	writeInPlace(t, path, lineOf(e[1], false)+"\n"+lineOf(e[2], true)+"\n"+lineOf(e[3], true)+"\n")
	f.waitExact("endpoint changed", []*engine{e[2], e[3]}, 3)
	// And given back: removed and added again, replayed from the start.
	writeAtomically(t, path, lineOf(e[1], true)+"\n"+lineOf(e[2], true)+"\n"+lineOf(e[3], true)+"\n")
	f.waitExact("endpoint back", []*engine{e[1], e[2], e[3]}, 4)

	// Missing for a while: nothing changes.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitCount(t, "the missing file logged", func() bool { return logs.count("sources file not read") == 1 })
	f.waitExact("file missing", []*engine{e[1], e[2], e[3]}, 4)
	// Back, with comments only: every engine retired.
	writeAtomically(t, path, "# drained\n")
	f.waitExact("emptied", nil, 7)
	if n := logs.count("sources file read again"); n != 1 {
		t.Fatalf("recovery logged %d times, want once", n)
	}
	if n := logs.count("sources file not read"); n != 1 {
		t.Fatalf("the missing file logged %d times, want once", n)
	}
}

// TestFileBadConfig: a bad field is an error naming it, at once.
func TestFileBadConfig(t *testing.T) {
	for _, f := range []File{{}, {Path: "x", Interval: -1}} {
		if err := f.Discover(t.Context(), nil); err == nil {
			t.Errorf("%+v accepted", f)
		}
	}
}
