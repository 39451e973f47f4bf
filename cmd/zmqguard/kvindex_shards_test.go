package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
)

// TestKVIndexRedisShardsFlag: --redis-shards refuses 0, over 256 and a
// non-number with one line naming the value (exit 2), and needs --redis.
func TestKVIndexRedisShardsFlag(t *testing.T) {
	for _, v := range []string{"0", "257", "-1", "x", "1.5", ""} {
		code, _, stderr := runBin(t, 20*time.Second, "kv-index", "--redis", "redis://127.0.0.1:1", "--http", "127.0.0.1:0",
			"--redis-shards", v)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], `invalid value "`+v+`" for flag -redis-shards: want a number in 1..256`) {
			t.Errorf("--redis-shards %q: exit %d, want 2 and one line naming the value\n%s", v, code, stderr)
		}
	}
	code, _, stderr := runBin(t, 20*time.Second, "kv-index", "--connect", "tcp://127.0.0.1:2", "--http", "127.0.0.1:0",
		"--redis-shards", "4")
	if code != 2 || !strings.Contains(stderr, "--redis-shards 4 needs --redis") {
		t.Errorf("--redis-shards without --redis: exit %d, want 2\n%s", code, stderr)
	}
}

// TestKVIndexRedisShards: kv-index --redis (a read-only replica, to keep
// it short) splits the index as --redis-shards says, and by default into
// 1 shard on a single server and 16 on a Redis Cluster, which it detects
// by itself from the seed addresses (all of them, or one), as /stats
// reports (redis.shards, redis.cluster).
func TestKVIndexRedisShards(t *testing.T) {
	srv := redistest.StartT(t)
	c := redistest.StartClusterT(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		url     string
		flag    string
		shards  float64
		cluster bool
	}{
		{"server, default", srv.URL(), "", 1, false},
		{"server, 4", srv.URL(), "4", 4, false},
		{"cluster seeds, default", c.URL(), "", 16, true},
		{"one cluster seed, default", "redis://" + c.Nodes[1].Addr(), "", 16, true},
		{"cluster seeds, 1", c.URL(), "1", 1, true},
		{"cluster seeds, 3", c.URL(), "3", 3, true},
	} {
		args := []string{"kv-index", "--redis", tc.url, "--http", "127.0.0.1:0", "--log-format", "json",
			"--redis-prefix", "{" + strings.NewReplacer(" ", "-", ",", "").Replace(tc.name) + "}:"}
		if tc.flag != "" {
			args = append(args, "--redis-shards", tc.flag)
		}
		p := start(t, ctx, args...)
		addr := p.logField("kv-index endpoint serving", "http_addr", 30*time.Second)
		st := kvStats(t, addr)
		red, _ := st["redis"].(map[string]any)
		if num(st, "redis.shards") != tc.shards || red["cluster"] != tc.cluster {
			t.Errorf("%s: /stats redis %v, want %v shards, cluster %v", tc.name, red, tc.shards, tc.cluster)
		}
		if code := p.terminate(20 * time.Second); code != 0 {
			t.Fatalf("%s: exit %d\nstderr:\n%s", tc.name, code, p.stderr)
		}
	}
}
