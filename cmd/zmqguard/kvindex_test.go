package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex/vllmhash"
)

// postScore posts body to /score and decodes the answer.
func postScore(t *testing.T, addr, body string) (int, kvScoreResponse, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post("http://"+addr+"/score", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var r kvScoreResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("bad /score answer %q: %v", raw, err)
		}
	}
	return resp.StatusCode, r, string(raw)
}

func tokensJSON(tokens []int64) string {
	b, _ := json.Marshal(map[string]any{"tokens": tokens})
	return string(b)
}

// waitBest polls /score until its best match is engine with blocks
// certain blocks (bounded).
func waitBest(t *testing.T, addr string, tokens []int64, engine string, blocks int) kvScoreResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, r, raw := postScore(t, addr, tokensJSON(tokens))
		if code == http.StatusOK && (engine == "" && r.Best == nil || r.Best != nil && r.Best.Engine == engine && r.Best.Blocks == blocks) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("best never became %q with %d blocks; last answer %d %s", engine, blocks, code, raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKVIndexHelpAndUsage(t *testing.T) {
	code, out, _ := runBin(t, 20*time.Second, "kv-index", "-h")
	if code != 0 || !strings.Contains(out, "usage: zmqguard kv-index") {
		t.Fatalf("kv-index -h: exit %d\n%s", code, out)
	}
	for _, f := range []string{"-connect", "-replay", "-bind", "-http", "-redis", "-redis-prefix", "-redis-lease", "-model", "-capacity", "-block-size", "-seed"} {
		if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
			t.Errorf("kv-index -h does not list %s", f)
		}
	}
	for _, args := range [][]string{
		{"kv-index", "--http", "127.0.0.1:0"},
		{"kv-index", "--connect", "tcp://127.0.0.1:2"},
		{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "0.0.0.0:0"},
		{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0", "--capacity", "-1"},
	} {
		if code, _, stderr := runBin(t, 20*time.Second, args...); code != 2 {
			t.Errorf("%v: exit %d (want 2)\n%s", args, code, stderr)
		}
	}
	// An unreachable Redis: exit 1 with a line naming it.
	code, _, stderr := runBin(t, 30*time.Second, "kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0",
		"--redis", "unix:///nonexistent/redis.sock")
	if code != 1 || !strings.Contains(stderr, "/nonexistent/redis.sock") {
		t.Errorf("unreachable --redis: exit %d (want 1)\n%s", code, stderr)
	}
}

// TestKVIndexServes runs kv-index against two Go publishers, on memory and
// on a real redis-server and on a real 3-node Redis Cluster (--redis with
// the seed addresses, the cluster detected by itself): /score routes each prompt to the engine holding
// its prefix, through a publisher restart (its engine is cleared), refuses
// bad requests, /metrics and /stats answer, and SIGTERM ends it with exit 0
// and the counters line. (The demo's kv-index stage adds a lost range.)
func TestKVIndexServes(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "redis-cluster"} {
		t.Run(backend, func(t *testing.T) {
			var extra []string
			switch backend {
			case "redis":
				extra = []string{"--redis", redistest.StartT(t).URL(), "--redis-lease"}
			case "redis-cluster":
				extra = []string{"--redis", redistest.StartClusterT(t, 3).URL(), "--redis-lease"}
			}
			testKVIndexServes(t, extra)
		})
	}
}

func testKVIndexServes(t *testing.T, extra []string) {
	newPub := func(ep string, replay bool) *kvevents.Publisher {
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
	a, b := newPub("tcp://127.0.0.1:0", true), newPub("tcp://127.0.0.1:0", false)
	defer func() { a.Close() }()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"kv-index", "--connect", a.Endpoint(), "--replay", a.ReplayEndpoint(), "--connect", b.Endpoint(),
		"--http", "127.0.0.1:0", "--from-start", "--log-format", "json"}, extra...)
	p := start(t, ctx, args...)
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	hc := &http.Client{Timeout: 10 * time.Second}

	const bs = 16
	doc1, doc2, doc3 := kvmodel.Tokens(1, 8*bs), kvmodel.Tokens(2, 8*bs), kvmodel.Tokens(3, 8*bs)
	hashes := func(base uint64, n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = base + uint64(i)
		}
		return out
	}
	// A holds doc1 (8 blocks), B holds doc2's first 4 blocks. Publish until
	// the subscriber is connected and the index knows (a PUB drops what it
	// sends before the subscription arrives; the index is idempotent).
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.Publish(kvmodel.Store(hashes(100, 8), -1, doc1, bs, "GPU", 0))
		b.Publish(kvmodel.Store(hashes(200, 4), -1, doc2[:4*bs], bs, "GPU", 0))
		_, r1, _ := postScore(t, addr, tokensJSON(doc1))
		_, r2, _ := postScore(t, addr, tokensJSON(doc2))
		if r1.Best != nil && r2.Best != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index never learned the stores\nstderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := waitBest(t, addr, doc1, a.Endpoint(), 8)
	if r.PromptBlocks != 8 || r.Best.Tokens != 8*bs || len(r.Best.Tiers) != 1 || r.Best.Tiers[0].Medium != "GPU" ||
		r.Best.Tiers[0].Blocks != 8 || len(r.Engines) != 1 {
		t.Fatalf("doc1: %+v", r)
	}
	waitBest(t, addr, doc2, b.Endpoint(), 4)

	// Publisher A restarts on the same endpoint (seq back to 0) and now
	// holds doc3 only: doc1 must stop routing to it. A restart is only
	// seen as one when the new publisher's first seq to arrive is below the
	// last one seen: the index is first taken well past what the new
	// publisher can reach while the subscriber reconnects (empty batches
	// change nothing). Otherwise it looks like a lost range, which is safe
	// too (doc1 would be a maybe, never a certain hit), but this test wants
	// the reset.
	batchesOf := func(src string) float64 {
		resp, err := hc.Get("http://" + addr + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st map[string]any
		json.NewDecoder(resp.Body).Decode(&st)
		srcs, _ := st["sources"].(map[string]any)
		one, _ := srcs[src].(map[string]any)
		return num(one, "batches")
	}
	deadline = time.Now().Add(30 * time.Second)
	for batchesOf(a.Endpoint()) < 500 {
		for range 50 {
			a.Publish()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index never saw 500 batches of A: %+v", a.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	aEP := a.Endpoint()
	a.Close()
	a = newPub(aEP, false)
	deadline = time.Now().Add(20 * time.Second)
	for {
		a.Publish(kvmodel.Store(hashes(300, 8), -1, doc3, bs, "GPU", 0))
		_, r3, _ := postScore(t, addr, tokensJSON(doc3))
		if r3.Best != nil && r3.Best.Engine == aEP {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("doc3 never routed to the restarted publisher\nstderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitBest(t, addr, doc1, "", 0)

	// Bad requests.
	for _, body := range []string{`{`, `{"tokens": [1], "nope": 1}`, `{"tokens": "x"}`, `{"tokens": [1]} {}`, `{"tokens": [1], "block_size": -1}`} {
		if code, _, raw := postScore(t, addr, body); code != http.StatusBadRequest || !strings.Contains(raw, `"error"`) {
			t.Errorf("body %q: %d %s (want 400 with an error)", body, code, raw)
		}
	}
	if resp, err := hc.Get("http://" + addr + "/score"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /score: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// 8-digit ids: the body passes the cap before its tokens pass
	// kvindex.MaxScoreTokens (which would be a 400, found first).
	big := bytes.Repeat([]byte("12345678,"), kvIndexMaxBody/9+10)
	if code, _, _ := postScore(t, addr, `{"tokens": [`+string(big)+`1]}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d (want 413)", code)
	}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`zmqguard_kvindex_entries{loop="kv-index"}`, `zmqguard_kvindex_engine_resets_total{loop="kv-index"} 1`,
		`zmqguard_source_messages_received_total{loop="kv-index"`, `zmqguard_http_score_requests_total{result="bad_request"} 5`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	resp, err = hc.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var stats map[string]any
	json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if num(stats, "index.resets") != 1 || num(stats, "http.bad_requests") < 5 {
		t.Errorf("/stats: %v", stats)
	}

	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	m := p.jsonLine()
	if num(m, "counters.index.stores") < 3 || num(m, "counters.index.resets") != 1 || num(m, "counters.http.scores") < 4 ||
		num(m, "counters.total.resets") != 1 {
		t.Fatalf("counters: %s", p.stdout)
	}
	if len(extra) > 0 && num(m, "counters.redis.calls") == 0 {
		t.Fatalf("no Redis calls counted: %s", p.stdout)
	}
}

// TestDemoKVIndexStage: the demo's kv-index stage routes both prompts,
// goes through the restart and the lost range, and says so.
func TestDemoKVIndexStage(t *testing.T) {
	code, out, errOut := runBin(t, 90*time.Second, "demo", "--duration", "2s", "--log-format", "json")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kv-index:") {
			for _, want := range []string{"doc1 -> engine-a 8/8", "engine-a restarted: doc1 -> no engine", "0 certain/8 maybe",
				"(1 resets, ", "routed correctly throughout: yes"} {
				if !strings.Contains(line, want) {
					t.Fatalf("kv-index stage lacks %q: %q", want, line)
				}
			}
			return
		}
	}
	t.Fatalf("no kv-index line:\n%s", out)
}

// TestKVIndexVLLMKeys: kv-index in vLLM-key mode routes a prompt to the
// engine that published vLLM's own sha256_cbor hashes of its blocks.
func TestKVIndexVLLMKeys(t *testing.T) {
	for _, args := range [][]string{
		{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0", "--vllm-hash", "sha256_cbor"},
		{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0", "--vllm-hash", "xxhash", "--block-size", "16", "--pythonhashseed", "0"},
		{"kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0", "--pythonhashseed", "0"},
	} {
		if code, _, stderr := runBin(t, 20*time.Second, args...); code != 2 {
			t.Errorf("%v: exit %d (want 2)\n%s", args, code, stderr)
		}
	}
	const bs = 16
	h, err := vllmhash.New("sha256_cbor", "0")
	if err != nil {
		t.Fatal(err)
	}
	doc := kvmodel.Tokens(5, 6*bs)
	ds, err := h.Request(&vllmhash.Request{TokenIDs: doc, LoRAName: "sql-lora"}, bs)
	if err != nil {
		t.Fatal(err)
	}
	ev := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: doc, BlockSize: bs, Medium: kvevents.Some("GPU"),
		LoraName: kvevents.Some("sql-lora")}
	for _, d := range ds {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(d.Uint64()))
	}
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--connect", pub.Endpoint(), "--replay", pub.ReplayEndpoint(), "--from-start",
		"--http", "127.0.0.1:0", "--vllm-hash", "sha256_cbor", "--pythonhashseed", "0", "--block-size", "16", "--log-format", "json")
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	body := func(lora string, blockSize int) string {
		b, _ := json.Marshal(map[string]any{"tokens": doc, "lora": lora, "block_size": blockSize})
		return string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pub.Publish(ev) // until the subscriber is connected (stores are idempotent)
		code, r, raw := postScore(t, addr, body("sql-lora", 0))
		if code == http.StatusOK && r.Best != nil && r.Best.Engine == pub.Endpoint() && r.Best.Blocks == 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never routed in vLLM-key mode: %d %s\nstderr:\n%s", code, raw, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Without the LoRA the hashes differ: no engine.
	if code, r, raw := postScore(t, addr, body("", 0)); code != http.StatusOK || len(r.Engines) != 0 {
		t.Fatalf("no-LoRA request: %d %s", code, raw)
	}
	if code, _, raw := postScore(t, addr, body("sql-lora", 32)); code != http.StatusBadRequest {
		t.Fatalf("other block size: %d %s (want 400)", code, raw)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, p.stderr)
	}
	if m := p.jsonLine(); num(m, "counters.vllm_key_index.added") != 6 || num(m, "counters.http.scores") < 2 {
		t.Fatalf("counters: %s", p.stdout)
	}
}

// TestKVIndexRedisLeases: two kv-index processes share one Redis index and
// follow the same engine with --redis-lease. Both score correctly; one is
// the writer and the other a counted no-op; when the writer stops, the
// other takes the engine over (its entries uncertain first) and indexes
// what comes next.
func TestKVIndexRedisLeases(t *testing.T) {
	srv := redistest.StartT(t)
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var procs []*proc
	var addrs []string
	for range 2 {
		p := start(t, ctx, "kv-index", "--connect", pub.Endpoint(), "--http", "127.0.0.1:0", "--redis", srv.URL(),
			"--redis-lease", "--redis-lease-ttl", "500ms", "--log-format", "json")
		procs = append(procs, p)
		addrs = append(addrs, p.logField("kv-index endpoint serving", "http_addr", 20*time.Second))
	}
	const bs = 16
	doc1, doc2 := kvmodel.Tokens(11, 4*bs), kvmodel.Tokens(12, 4*bs)
	hashes := func(base uint64) []uint64 { return []uint64{base, base + 1, base + 2, base + 3} }
	until := func(what string, step func(), ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within the bound", what)
			}
			step()
			time.Sleep(20 * time.Millisecond)
		}
	}
	routes := func(addr string, doc []int64, blocks int) bool {
		_, r, _ := postScore(t, addr, tokensJSON(doc))
		return r.Best != nil && r.Best.Engine == pub.Endpoint() && r.Best.Blocks == blocks
	}
	until("both route doc1", func() { pub.Publish(kvmodel.Store(hashes(100), -1, doc1, bs, "GPU", 0)) },
		func() bool { return routes(addrs[0], doc1, 4) && routes(addrs[1], doc1, 4) })
	stats := func(addr string) map[string]any {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return m
	}
	// Exactly one is the standby (its applies are counted no-ops).
	standby := -1
	for i, a := range addrs {
		if num(stats(a), "redis.not_writer") > 0 {
			standby = i
		}
	}
	if standby < 0 || num(stats(addrs[1-standby]), "redis.not_writer") != 0 {
		t.Fatalf("no single standby: %v / %v", stats(addrs[0]), stats(addrs[1]))
	}
	writer := 1 - standby
	if code := procs[writer].terminate(20 * time.Second); code != 0 {
		t.Fatalf("writer exit %d\n%s", code, procs[writer].stderr)
	}
	// The standby takes over: doc1 is now only a maybe (what the old writer
	// missed is unknown), and doc2, stored afterwards, routes.
	until("takeover", func() { pub.Publish(kvmodel.Store(hashes(200), -1, doc2, bs, "GPU", 0)) },
		func() bool { return routes(addrs[standby], doc2, 4) })
	if num(stats(addrs[standby]), "redis.takeovers") != 1 {
		t.Fatalf("standby stats: %v", stats(addrs[standby]))
	}
	if _, r, raw := postScore(t, addrs[standby], tokensJSON(doc1)); r.Best != nil || len(r.Engines) != 1 || r.Engines[0].MaybeBlocks != 4 {
		t.Fatalf("doc1 after the takeover: %s (want 4 maybe blocks, none certain)", raw)
	}
	if code := procs[standby].terminate(20 * time.Second); code != 0 {
		t.Fatalf("standby exit %d\n%s", code, procs[standby].stderr)
	}
}
