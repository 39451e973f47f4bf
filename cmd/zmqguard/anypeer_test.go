package main

import (
	"context"
	"strings"
	"testing"
	"time"
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
