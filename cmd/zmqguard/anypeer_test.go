package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// TestAnyPeer: kv-events and kv-index refuse a --bind on all interfaces
// without --allow or CURVE keys, naming the endpoint and the remedy (issue
// 35: no one takes an engine's stream by being first); with --allow or
// --any-peer they start.
func TestAnyPeer(t *testing.T) {
	for _, c := range []struct{ name, follow string }{
		{"kv-events", "kv-events following"},
		{"kv-index", "kv-index following"},
	} {
		base := []string{c.name, "--bind", "tcp://0.0.0.0:0"}
		if c.name == "kv-index" {
			base = append(base, "--http", "127.0.0.1:0")
		}
		code, _, stderr := runBin(t, 20*time.Second, base...)
		if code == 0 || !strings.Contains(stderr, "tcp://0.0.0.0:0") || !strings.Contains(stderr, "--any-peer") {
			t.Errorf("%v: exit %d, want a refusal naming the endpoint and --any-peer\n%s", base, code, stderr)
		}
		for _, extra := range [][]string{{"--any-peer"}, {"--allow", "10.0.0.0/8"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			p := start(t, ctx, append(append([]string(nil), base...), extra...)...)
			p.waitStderr(c.follow, 20*time.Second)
			p.terminate(10 * time.Second)
			cancel()
		}
	}
}

// TestKVIndexStatsHolder: kv-index's /stats names the peer holding a bound
// source's slot (address, since when, batches delivered since; issue 35).
func TestKVIndexStatsHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--bind", "tcp://127.0.0.1:0", "--http", "127.0.0.1:0", "--log-format", "json")
	defer p.terminate(10 * time.Second)
	ep := p.logField("kv-index following", "endpoint", 20*time.Second)
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: ep, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	hc := &http.Client{Timeout: 10 * time.Second}
	var holder map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		pub.Publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(1)}})
		resp, err := hc.Get("http://" + addr + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		var st map[string]any
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		srcs, _ := st["sources"].(map[string]any)
		one, _ := srcs["tcp://127.0.0.1:0"].(map[string]any)
		holder, _ = one["holder"].(map[string]any)
		if holder != nil && num(holder, "batches") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no holder with batches in /stats: %v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a, _ := holder["addr"].(string); !strings.HasPrefix(a, "127.0.0.1:") || holder["since"] == "" {
		t.Fatalf("holder %v", holder)
	}
}
