package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

// newSharded returns a sharded store on url under a prefix of its own.
func newSharded(t testing.TB, url string, cfg Config) *sharded {
	t.Helper()
	cfg.URL = url
	if cfg.Prefix == "" {
		cfg.Prefix = "{" + redistest.Prefix(t) + "}"
	}
	be, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	s, ok := be.(*sharded)
	if !ok {
		t.Fatalf("New with Shards %d made a %T", cfg.Shards, be)
	}
	return s
}

// TestShardPrefix: a shard's prefix puts ":sN" inside the hash tag (its
// own slot), or appends "sN:" to a prefix without one.
func TestShardPrefix(t *testing.T) {
	for _, c := range []struct {
		prefix string
		n      int
		want   string
	}{
		{"{zmqguard-kvindex}:", 3, "{zmqguard-kvindex:s3}:"},
		{"a{b}c:", 0, "a{b:s0}c:"},
		{"kv:", 15, "kv:s15:"},
		{"{}kv:", 1, "{}kv:s1:"},
	} {
		if got := shardPrefix(c.prefix, c.n); got != c.want {
			t.Fatalf("shardPrefix(%q, %d) = %q, want %q", c.prefix, c.n, got, c.want)
		}
	}
}

// TestShardOfStable: an engine's shard is a fixed function of its name
// (every store of a prefix, of any version, must agree), and the
// differential test's engines fall in at least two shards.
func TestShardOfStable(t *testing.T) {
	got := []int{shardOf("e0", 16), shardOf("e1", 16), shardOf("engine-a:8000", 16), shardOf("", 16)}
	if want := []int{0, 3, 1, 5}; !slices.Equal(got, want) {
		t.Fatalf("shardOf = %v, want %v (changing it moves every engine of an existing index)", got, want)
	}
	for _, n := range []int{3, 4} {
		seen := map[int]bool{}
		for _, e := range []string{"e0", "e1", "e2"} {
			seen[shardOf(e, n)] = true
		}
		if len(seen) < 2 {
			t.Fatalf("with %d shards e0, e1, e2 share one shard: the differential test would merge nothing", n)
		}
	}
}

// TestShardedConformance runs kvindex's conformance suite on 3 shards on
// one server; the Capacity case (a global bound, evicting oldest-first
// over the whole index) runs with one shard.
func TestShardedConformance(t *testing.T) {
	url := redistest.Require(t).URL()
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return newSharded(t, url, Config{Capacity: capacity, Shards: 3})
	}, kvindextest.Options{CapacityBackend: func(t *testing.T, capacity int) kvindex.Backend {
		return newStore(t, Config{Capacity: capacity})
	}})
}

// TestShardedClusterConformance runs the suite on 6 shards on the 3-node
// cluster (the Capacity case with one shard).
func TestShardedClusterConformance(t *testing.T) {
	url := redistest.RequireCluster(t).URL()
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return newSharded(t, url, Config{Capacity: capacity, Shards: 6})
	}, kvindextest.Options{CapacityBackend: func(t *testing.T, capacity int) kvindex.Backend {
		return newClusterStore(t, Config{Capacity: capacity})
	}})
}

// TestShardsDefault: Shards 0 is one shard with the prefix's keys
// unchanged on a single server, and 16 shards on a cluster, whose slots
// fall on every node of the 3 (StatsOf says so); a bad Shards or a Capacity under it is
// refused, naming the value.
func TestShardsDefault(t *testing.T) {
	url := redistest.Require(t).URL()
	prefix := "{" + redistest.Prefix(t) + "}"
	be, err := New(Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if s, ok := be.(*store); !ok || s.prefix != prefix {
		t.Fatalf("Shards 0 on a server: %T, want a store under %q", be, prefix)
	}
	if st, _ := StatsOf(be); st.Shards != 1 || st.Cluster {
		t.Fatalf("StatsOf a store on a server: %+v, want 1 shard, no cluster", st)
	}
	c := redistest.RequireCluster(t)
	s := newSharded(t, c.URL(), Config{})
	if len(s.shards) != defaultClusterShards {
		t.Fatalf("Shards 0 on a cluster: %d shards, want %d", len(s.shards), defaultClusterShards)
	}
	if st, _ := StatsOf(s); st.Shards != defaultClusterShards || !st.Cluster {
		t.Fatalf("StatsOf the sharded store on a cluster: %+v, want %d shards, a cluster", st, defaultClusterShards)
	}
	nodes := map[int]bool{}
	for _, sh := range s.shards {
		nodes[slotNode(t, c, sh.prefix)] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("16 shards on %d of 3 nodes", len(nodes))
	}
	for _, cfg := range []Config{{Shards: -1}, {Shards: 257}, {Shards: 8, Capacity: 7}} {
		cfg.URL = url
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprint(cfg.Shards)) {
			t.Fatalf("Config %+v: %v; want a refusal naming %d", cfg, err, cfg.Shards)
		}
	}
}

// TestShardedEngineInOneShard: an engine's batch writes keys of its own
// shard only (one slot: one atomic script), and Score's holders merge the
// shards, with ids that name the right engine and medium.
func TestShardedEngineInOneShard(t *testing.T) {
	s := newSharded(t, redistest.Require(t).URL(), Config{Shards: 4})
	keys := []kvindex.Key{101, 102}
	engines := []string{"e0", "e1", "e2", "e3", "e4", "e5"}
	for _, e := range engines {
		if _, err := s.Apply(e, storeOps(keys)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sh := range s.shards {
		want := 0
		for _, e := range engines {
			if shardOf(e, 4) == i {
				want++
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := s.client.Do(ctx, s.client.B().Hlen().Key(sh.prefix+"eid").Build()).AsInt64()
		cancel()
		if err != nil || n != int64(want) {
			t.Fatalf("shard %d holds %d engines (%v), want %d", i, n, err, want)
		}
	}
	var got []string
	err := s.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		var row []string
		for _, h := range hs {
			row = append(row, s.EngineName(h.Engine)+"/"+s.MediumName(h.Medium))
		}
		slices.Sort(row)
		got = append(got, strings.Join(row, " "))
		return true
	})
	want := "e0/GPU e1/GPU e2/GPU e3/GPU e4/GPU e5/GPU"
	if err != nil || len(got) != 2 || got[0] != want || got[1] != want {
		t.Fatalf("holders %q, %v; want %q twice", got, err, want)
	}
}

// TestShardedClusterRestart: 16 shards on a private 3-node cluster, 48
// engines holding one prompt. Node 1 restarts empty: the next Holders
// reports the loss once (ErrBackendLost, for all the node's shards
// together), then the engines of the shards on the other nodes still hold
// the prompt, trusted, and the engines of the node's shards are gone (their
// indexers resync); the shards on the other nodes counted no loss.
func TestShardedClusterRestart(t *testing.T) {
	c := redistest.StartClusterT(t, 3)
	s := newSharded(t, c.URL(), Config{})
	keys := []kvindex.Key{11, 12, 13}
	var engines []string
	for i := 0; i < 48; i++ {
		e := fmt.Sprintf("engine-%d", i)
		engines = append(engines, e)
		if _, err := s.Apply(e, storeOps(keys)); err != nil {
			t.Fatal(err)
		}
	}
	const restarted = 1
	onNode := map[string]bool{}
	for _, e := range engines {
		onNode[e] = slotNode(t, c, s.shard(e).prefix) == restarted
	}
	if err := c.Restart(restarted); err != nil {
		t.Fatal(err)
	}
	lost := 0
	var names map[string]int
	retry(t, "Holders after the restart", &lost, func() error {
		names = map[string]int{}
		return s.Holders(keys, func(i int, hs []kvindex.Holder) bool {
			for _, h := range hs {
				if h.Trusted {
					names[s.EngineName(h.Engine)]++
				}
			}
			return true
		})
	})
	if lost != 1 {
		t.Fatalf("%d loss errors, want 1", lost)
	}
	kept, gone := 0, 0
	for _, e := range engines {
		switch {
		case onNode[e] && names[e] != 0:
			t.Fatalf("%s (a shard on the restarted node) still holds %d keys", e, names[e])
		case !onNode[e] && names[e] != len(keys):
			t.Fatalf("%s (a shard on another node) holds %d trusted keys, want %d", e, names[e], len(keys))
		case onNode[e]:
			gone++
		default:
			kept++
		}
	}
	if kept == 0 || gone == 0 {
		t.Fatalf("%d engines kept, %d gone: the test needs both", kept, gone)
	}
	for _, sh := range s.shards {
		onR := slotNode(t, c, sh.prefix) == restarted
		if l := sh.ownStats().Losses; onR != (l == 1) || l > 1 {
			t.Fatalf("shard %s (on the restarted node: %v) counted %d losses", sh.prefix, onR, l)
		}
	}
	// Apply works again for an engine of a lost shard.
	for _, e := range engines {
		if onNode[e] {
			if _, err := s.Apply(e, storeOps(keys)); err != nil && !errors.Is(err, kvindex.ErrBackendLost) {
				t.Fatal(err)
			}
			break
		}
	}
}
