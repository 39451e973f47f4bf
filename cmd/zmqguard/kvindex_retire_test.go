package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
)

// TestKVIndexRetiresSnapshotEnginesNotFound: kv-index --snapshot with two
// engines, restarted with discovery (--sources-file) that lists only one
// of them: the other is never followed again, and --engine-ttl after the
// start its entries are dropped (its UpdateDeparted, logged, counted in
// index.departed); the one found again keeps its entries. Fails on the
// code before: with discovery no engine of the snapshot was ever retired,
// so the engine gone for good stayed in every answer (uncertain) forever.
func TestKVIndexRetiresSnapshotEnginesNotFound(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "kv.snap")
	a, c := newTestPub(t, "tcp://127.0.0.1:0", true), newTestPub(t, "tcp://127.0.0.1:0", true)
	defer a.Close()
	defer c.Close()
	docA, docC := kvmodel.Tokens(1, 8*rbs), kvmodel.Tokens(2, 8*rbs)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--connect", a.Endpoint(), "--replay", a.ReplayEndpoint(),
		"--connect", c.Endpoint(), "--replay", c.ReplayEndpoint(), "--snapshot", snap, "--http", "127.0.0.1:0", "--log-format", "json")
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	a.Publish(kvmodel.Store(rHashes(100, 8), -1, docA, rbs, "GPU", 0))
	c.Publish(kvmodel.Store(rHashes(200, 8), -1, docC, rbs, "GPU", 0))
	until(t, "both documents indexed", c, p, func() bool {
		ra, rc := scoreOf(t, addr, tokensJSON(docA)), scoreOf(t, addr, tokensJSON(docC))
		return ra.Best != nil && ra.Best.Blocks == 8 && rc.Best != nil && rc.Best.Blocks == 8
	})
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}

	// Restarted with discovery: the file lists a, not c.
	file := filepath.Join(t.TempDir(), "engines.txt")
	if err := os.WriteFile(file, []byte(a.Endpoint()+" "+a.ReplayEndpoint()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p = start(t, ctx, "kv-index", "--sources-file", file, "--snapshot", snap, "--engine-ttl", "3s",
		"--http", "127.0.0.1:0", "--log-format", "json")
	addr = p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	until(t, "c retired", nil, p, func() bool { return len(scoreOf(t, addr, tokensJSON(docC)).Engines) == 0 })
	if !strings.Contains(p.stderr.String(), "not found again within --engine-ttl") || !strings.Contains(p.stderr.String(), c.Endpoint()) {
		t.Errorf("no log line for c's retirement\nstderr:\n%s", p.stderr)
	}
	if n := indexNum(kvStats(t, addr), "departed"); n != 1 {
		t.Errorf("index.departed %v, want 1", n)
	}
	// a was found again: its entries stay (it resumes, exact).
	until(t, "a resumed", a, p, func() bool {
		r := scoreOf(t, addr, tokensJSON(docA))
		return r.Best != nil && r.Best.Engine == a.Endpoint() && r.Best.Blocks == 8
	})
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
}
