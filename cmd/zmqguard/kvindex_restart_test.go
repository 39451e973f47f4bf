package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvevents"
)

// The restart tests of issue 35 at the command level: a kv-index restarted
// after its engines learns what they hold (replay from the start by
// default; --snapshot and a resume from the last batch applied), exact
// where the publisher holds the gap, uncertain where it does not, cleared
// where the engine restarted meanwhile; a --redis replica with no source.

const rbs = 16

func rHashes(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

func newTestPub(t *testing.T, ep string, replay bool) *kvevents.Publisher {
	t.Helper()
	cfg := kvevents.PublisherConfig{Endpoint: ep, Bind: true, Logger: quietLogger()}
	if replay {
		cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	p, err := kvevents.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kvStats reads /stats.
func kvStats(t *testing.T, addr string) map[string]any {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// until calls f until it reports true, publishing an empty batch of pub
// (if any) between tries, for at most 30 s.
func until(t *testing.T, what string, pub *kvevents.Publisher, p *proc, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s\nstderr:\n%s", what, p.stderr)
		}
		if pub != nil {
			pub.Publish()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// indexNum reads an index counter of /stats by its snake_case key, or by
// its Go field name (kvindex.Stats before its JSON tags).
func indexNum(st map[string]any, key string) float64 {
	if idx, ok := st["index"].(map[string]any); ok {
		if _, ok := idx[key]; ok {
			return num(st, "index."+key)
		}
	}
	return num(st, "index."+strings.ToUpper(key[:1])+key[1:])
}

func scoreOf(t *testing.T, addr string, body string) kvScoreResponse {
	t.Helper()
	code, r, raw := postScore(t, addr, body)
	if code != http.StatusOK {
		t.Fatalf("/score %s: %d %s", body, code, raw)
	}
	return r
}

// TestKVIndexFromStartByDefault: kv-index started after its engine stored
// a prompt learns it (the replay from the start is the default); /score
// takes candidate engines and says when no engine serves the model. Fails
// on the code before: without --from-start the index never learned what
// was stored before it started (the README's example scored nothing).
func TestKVIndexFromStartByDefault(t *testing.T) {
	a := newTestPub(t, "tcp://127.0.0.1:0", true)
	defer a.Close()
	doc1 := kvmodel.Tokens(1, 8*rbs)
	a.Publish(kvmodel.Store(rHashes(100, 8), -1, doc1, rbs, "GPU", 0))
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--connect", a.Endpoint(), "--replay", a.ReplayEndpoint(), "--http", "127.0.0.1:0",
		"--model", "m1", "--log-format", "json")
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	until(t, "doc1 stored before the index started routes to its engine", a, p, func() bool {
		r := scoreOf(t, addr, tokensJSON(doc1))
		return r.Best != nil && r.Best.Engine == a.Endpoint() && r.Best.Blocks == 8
	})
	body, _ := json.Marshal(map[string]any{"tokens": doc1, "engines": []string{"tcp://10.0.0.9:5557"}})
	if r := scoreOf(t, addr, string(body)); r.Best != nil || len(r.Engines) != 0 {
		t.Fatalf("candidates without the holder: %+v", r)
	}
	body, _ = json.Marshal(map[string]any{"tokens": doc1, "engines": []string{a.Endpoint()}})
	if r := scoreOf(t, addr, string(body)); r.Best == nil || r.Best.Engine != a.Endpoint() {
		t.Fatalf("candidates with the holder: %+v", r)
	}
	body, _ = json.Marshal(map[string]any{"tokens": doc1, "model": "m2"})
	_, _, raw := postScore(t, addr, string(body))
	if !strings.Contains(raw, `"unknown_model":true`) {
		t.Fatalf("a model no engine serves: %s", raw)
	}
	if _, _, raw := postScore(t, addr, tokensJSON(doc1)); strings.Contains(raw, "unknown_model") {
		t.Fatalf("the served model called unknown: %s", raw)
	}
	if st := kvStats(t, addr); num(st, "http.unknown_model") != 1 || num(st, "index.unknown_models") != 1 {
		t.Fatalf("/stats: unknown_model %v, index.unknown_models %v, want 1", num(st, "http.unknown_model"), num(st, "index.unknown_models"))
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
}

// TestKVIndexRestartFromSnapshot: kv-index --snapshot, stopped, its engine
// goes on (removes half of doc1, stores doc2), kv-index started again:
// doc1 is uncertain until the source resumes, then exact (4 blocks,
// certain) where the publisher holds the gap; with no replay endpoint the
// gap cannot be proven and doc1 stays uncertain; when the engine restarted
// meanwhile, doc1 is gone. "redis": kv-index --redis restarted resumes
// from the positions kept in Redis, exact the same way. Fails on the code
// before: there was no snapshot (the restarted index knew nothing of doc1
// until re-stored), and no position in Redis (the restarted index joined
// mid-stream, the removal made while it was down never applied).
func TestKVIndexRestartFromSnapshot(t *testing.T) {
	for _, c := range []string{"replay", "no replay", "publisher restarted", "redis"} {
		t.Run(c, func(t *testing.T) {
			snap := filepath.Join(t.TempDir(), "kv.snap")
			keep := []string{"--snapshot", snap}
			if c == "redis" {
				keep = []string{"--redis", redistest.StartT(t).URL()}
			}
			a := newTestPub(t, "tcp://127.0.0.1:0", c != "no replay")
			defer func() { a.Close() }()
			doc1, doc2, doc3 := kvmodel.Tokens(1, 8*rbs), kvmodel.Tokens(2, 4*rbs), kvmodel.Tokens(3, 8*rbs)
			args := func() []string {
				out := append([]string{"kv-index", "--connect", a.Endpoint(), "--http", "127.0.0.1:0", "--log-format", "json"}, keep...)
				if c != "no replay" {
					out = append(out, "--replay", a.ReplayEndpoint())
				}
				return out
			}
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			p := start(t, ctx, args()...)
			addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
			a.Publish(kvmodel.Store(rHashes(100, 8), -1, doc1, rbs, "GPU", 0))
			until(t, "doc1 indexed", a, p, func() bool {
				r := scoreOf(t, addr, tokensJSON(doc1))
				if r.Best == nil && c == "no replay" {
					// No replay: a store sent before the subscription
					// arrived is gone; send it again (idempotent).
					a.Publish(kvmodel.Store(rHashes(100, 8), -1, doc1, rbs, "GPU", 0))
				}
				return r.Best != nil && r.Best.Blocks == 8
			})
			if code := p.terminate(20 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
			}
			if fi, err := os.Stat(snap); c != "redis" && (err != nil || fi.Size() == 0) {
				t.Fatalf("no snapshot written: %v", err)
			}
			aEP := a.Endpoint()
			if c == "publisher restarted" {
				a.Close()
				a = newTestPub(t, aEP, true)
				a.Publish(kvmodel.Store(rHashes(300, 8), -1, doc3, rbs, "GPU", 0))
			} else {
				// The engine goes on while the index is down.
				a.Publish(kvmodel.Remove(rHashes(104, 4), "GPU", 0), kvmodel.Store(rHashes(200, 4), -1, doc2, rbs, "GPU", 0))
			}

			p = start(t, ctx, args()...)
			addr = p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
			// The source resumes from the kept position (the snapshot's or
			// Redis'), not from the start.
			if !regexp.MustCompile(`"msg":"kv-index following"[^\n]*"resume_after_seq":[0-9]`).MatchString(p.stderr.String()) {
				t.Fatalf("the source did not resume from a kept position\nstderr:\n%s", p.stderr)
			}
			// Before the source resumed (no batch published yet): doc1 is
			// known but uncertain.
			r := scoreOf(t, addr, tokensJSON(doc1))
			if c != "redis" && (r.Best != nil || len(r.Engines) != 1 || r.Engines[0].MaybeBlocks != 8 || r.Engines[0].Blocks != 0) {
				t.Fatalf("doc1 right after the restart: %+v, want %s maybe 8, certain 0", r, aEP)
			}
			switch c {
			case "replay", "redis":
				until(t, "doc2 (stored while the index was down) routes to A", a, p, func() bool {
					r := scoreOf(t, addr, tokensJSON(doc2))
					return r.Best != nil && r.Best.Blocks == 4
				})
				r := scoreOf(t, addr, tokensJSON(doc1))
				if r.Best == nil || r.Best.Blocks != 4 || r.Best.MaybeBlocks != 4 {
					t.Fatalf("doc1 after an exact resume: %+v, want certain 4 (the removal replayed)", r)
				}
				if st := kvStats(t, addr); indexNum(st, "resets") != 0 || indexNum(st, "losses") != 0 {
					t.Fatalf("an exact resume counted resets %v, losses %v", indexNum(st, "resets"), indexNum(st, "losses"))
				}
			case "no replay":
				until(t, "the unproven resume reported", a, p, func() bool { return indexNum(kvStats(t, addr), "losses") >= 1 })
				r := scoreOf(t, addr, tokensJSON(doc1))
				if r.Best != nil || len(r.Engines) != 1 || r.Engines[0].Blocks != 0 {
					t.Fatalf("doc1 after an unproven resume: %+v, want nothing certain", r)
				}
			case "publisher restarted":
				until(t, "doc3 of the new run routes to A", a, p, func() bool {
					r := scoreOf(t, addr, tokensJSON(doc3))
					return r.Best != nil && r.Best.Blocks == 8
				})
				if r := scoreOf(t, addr, tokensJSON(doc1)); len(r.Engines) != 0 {
					t.Fatalf("doc1 of the old run after the engine's restart: %+v, want nothing", r)
				}
			}
			if code := p.terminate(20 * time.Second); code != 0 {
				t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
			}
		})
	}
}

// TestKVIndexReplica: kv-index --redis URL with no source is a read-only
// replica answering /score from the shared index another kv-index writes.
// Fails on the code before (no source was a usage error).
func TestKVIndexReplica(t *testing.T) {
	url := redistest.StartT(t).URL()
	a := newTestPub(t, "tcp://127.0.0.1:0", true)
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	w := start(t, ctx, "kv-index", "--connect", a.Endpoint(), "--replay", a.ReplayEndpoint(), "--redis", url,
		"--http", "127.0.0.1:0", "--log-format", "json")
	w.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	rp := start(t, ctx, "kv-index", "--redis", url, "--http", "127.0.0.1:0", "--log-format", "json")
	raddr := rp.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	doc1 := kvmodel.Tokens(1, 8*rbs)
	a.Publish(kvmodel.Store(rHashes(100, 8), -1, doc1, rbs, "GPU", 0))
	until(t, "the replica routes doc1", a, rp, func() bool {
		r := scoreOf(t, raddr, tokensJSON(doc1))
		return r.Best != nil && r.Best.Engine == a.Endpoint() && r.Best.Blocks == 8
	})
	for _, p := range []*proc{rp, w} {
		if code := p.terminate(20 * time.Second); code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
		}
	}
}

// TestKVIndexRestartUsage: the restart flags' usage errors name the flag.
func TestKVIndexRestartUsage(t *testing.T) {
	base := []string{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-lease"}, "--redis-lease needs --redis"},
		{[]string{"--redis-prefix", "p:"}, "--redis-prefix"},
		{[]string{"--redis-lease-ttl", "5s"}, "--redis-lease-ttl needs --redis"},
		{[]string{"--snapshot", "/tmp/x", "--redis", "redis://127.0.0.1:1"}, "--snapshot"},
		{[]string{"--snapshot-interval", "1s"}, "--snapshot-interval needs --snapshot"},
		{[]string{"--snapshot", "/tmp/x", "--snapshot-interval", "-1s"}, "negative"},
	} {
		code, _, stderr := runBin(t, 20*time.Second, append(base, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 naming %q\n%s", c.args, code, c.want, stderr)
		}
	}
	if code, _, stderr := runBin(t, 20*time.Second, "kv-index", "--http", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "--redis URL alone") {
		t.Errorf("no source, no --redis: exit %d\n%s", code, stderr)
	}
}

// TestKVIndexRedisLost: the redis-server under kv-index restarts empty;
// kv-index notices (one ERROR line, index.BackendLosses 1), resyncs its
// source from the start, and doc1 routes again, to the right engine.
// Fails on the code before: nothing noticed the loss, and doc1's
// continuation was never indexed again.
func TestKVIndexRedisLost(t *testing.T) {
	srv := redistest.StartT(t)
	a := newTestPub(t, "tcp://127.0.0.1:0", true)
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--connect", a.Endpoint(), "--replay", a.ReplayEndpoint(), "--redis", srv.URL(),
		"--http", "127.0.0.1:0", "--log-format", "json")
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	doc1 := kvmodel.Tokens(1, 8*rbs)
	a.Publish(kvmodel.Store(rHashes(100, 8), -1, doc1, rbs, "GPU", 0))
	until(t, "doc1 indexed", a, p, func() bool {
		r := scoreOf(t, addr, tokensJSON(doc1))
		return r.Best != nil && r.Best.Engine == a.Endpoint() && r.Best.Blocks == 8
	})
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	until(t, "the loss noticed and doc1 re-indexed from the replay", a, p, func() bool {
		code, r, _ := postScore(t, addr, tokensJSON(doc1))
		return code == http.StatusOK && r.Best != nil && r.Best.Engine == a.Endpoint() && r.Best.Blocks == 8 &&
			num(kvStats(t, addr), "index.backend_losses") >= 1
	})
	if n := num(kvStats(t, addr), "index.backend_losses"); n != 1 {
		t.Fatalf("BackendLosses %v, want 1", n)
	}
	n := 0
	for _, ln := range strings.Split(p.stderr.String(), "\n") {
		if strings.Contains(ln, `"level":"ERROR"`) && strings.Contains(ln, `"msg":"kvindex: the shared index lost its data`) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d loss lines, want 1\nstderr:\n%s", n, p.stderr)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
}
