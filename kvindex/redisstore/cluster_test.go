package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

// newClusterStore returns a store on the test binary's 3-node Redis
// Cluster, dialed through the seed-address URL, under a prefix of its own.
func newClusterStore(t testing.TB, cfg Config) *store {
	t.Helper()
	c := redistest.RequireCluster(t)
	cfg.URL = c.URL()
	if cfg.Prefix == "" {
		cfg.Prefix = "{" + redistest.Prefix(t) + "}"
	}
	s, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.cluster {
		t.Fatalf("the store on %s did not detect the cluster", cfg.URL)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestClusterConformance runs kvindex's conformance suite (the
// hand-written rules and the model-based property test) against a store
// on a real 3-node Redis Cluster.
func TestClusterConformance(t *testing.T) {
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return newClusterStore(t, Config{Capacity: capacity})
	}, kvindextest.Options{})
}

// slotNode returns the cluster node serving prefix's keys.
func slotNode(t *testing.T, c *redistest.Cluster, prefix string) int {
	t.Helper()
	v, err := c.Do(0, "CLUSTER", "KEYSLOT", prefix+"gen")
	if err != nil {
		t.Fatal(err)
	}
	slot, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %q", v)
	}
	return c.NodeOfSlot(slot)
}

// TestClusterNodeRestart: on a private 3-node cluster, two indexes whose
// prefixes fall on different nodes. The node serving the first one's slot
// restarts without persistence: the first index's store reports the loss
// once (ErrBackendLost, Stats.Losses 1) and names its holders right after
// the engines are stored again; the second index, on a node that kept its
// data, sees no loss and keeps its entries. The generation lives in the
// prefix's slot, so a loss is per index, found by the node that lost it.
func TestClusterNodeRestart(t *testing.T) {
	c := redistest.StartClusterT(t, 3)
	var prefixes []string
	nodes := map[int]bool{}
	for i := 0; len(prefixes) < 2 && i < 100; i++ {
		p := fmt.Sprintf("{restart%d}:", i)
		if n := slotNode(t, c, p); !nodes[n] {
			nodes[n] = true
			prefixes = append(prefixes, p)
		}
	}
	if len(prefixes) < 2 {
		t.Fatal("no two prefixes on different nodes")
	}
	open2 := func(p string) *store {
		s, err := open(Config{URL: c.URL(), Prefix: p})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	lostS, keptS := open2(prefixes[0]), open2(prefixes[1])
	keys := []kvindex.Key{11, 12, 13}
	for _, s := range []*store{lostS, keptS} {
		if _, err := s.Apply("e1", storeOps(keys)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restart(slotNode(t, c, prefixes[0])); err != nil {
		t.Fatal(err)
	}
	lost := 0
	retry(t, "Apply after the restart", &lost, func() error {
		_, err := lostS.Apply("e2", storeOps(keys))
		return err
	})
	if lost != 1 || lostS.ownStats().Losses != 1 {
		t.Fatalf("the restarted node's index: %d loss errors, Stats.Losses %d; want 1, 1", lost, lostS.ownStats().Losses)
	}
	names, err := holderNames(lostS, keys)
	if err != nil || fmt.Sprint(names) != "[[e2] [e2] [e2]]" {
		t.Fatalf("holders after the loss: %v, %v; want e2 only", names, err)
	}
	keptLost := 0
	retry(t, "Apply on the other node", &keptLost, func() error {
		_, err := keptS.Apply("e2", storeOps(keys))
		return err
	})
	names, err = holderNames(keptS, keys)
	if keptLost != 0 || keptS.ownStats().Losses != 0 || err != nil || fmt.Sprint(names) != "[[e1 e2] [e1 e2] [e1 e2]]" {
		t.Fatalf("the other node's index: %d loss errors, Stats.Losses %d, holders %v, %v; want no loss, e1 and e2",
			keptLost, keptS.ownStats().Losses, names, err)
	}
}

// TestClusterNeedsHashTag: on a cluster, a prefix without a {hash tag}
// would scatter one index's keys over slots that no script can reach in
// one call: New refuses it, naming the prefix.
func TestClusterNeedsHashTag(t *testing.T) {
	c := redistest.RequireCluster(t)
	for _, p := range []string{"kv:", "{}kv:", "kv}{:"} {
		_, err := open(Config{URL: c.URL(), Prefix: p})
		if err == nil || !strings.Contains(err.Error(), "hash tag") || !strings.Contains(err.Error(), fmt.Sprintf("%q", p)) {
			t.Fatalf("prefix %q on a cluster: %v; want a refusal naming the missing hash tag", p, err)
		}
	}
}

// TestParseURLSeeds: a URL's host part may list a cluster's seeds.
func TestParseURLSeeds(t *testing.T) {
	for _, c := range []struct{ url, want, err string }{
		{"redis://127.0.0.1:7000", "[127.0.0.1:7000]", ""},
		{"redis://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002/0", "[127.0.0.1:7000 127.0.0.1:7001 [::1]:7002]", ""},
		{"redis://u:p@h1:1,h2:2?dial_timeout=1s", "[h1:1 h2:2]", ""},
		{"redis://h1:1,h2", "", `seed address "h2" is not host:port`},
		{"unix:///run/redis.sock", "[/run/redis.sock]", ""},
	} {
		opt, err := parseURL(c.url)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%s: %v; want %s", c.url, err, c.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(opt.InitAddress) != c.want {
			t.Fatalf("%s: %v, %v; want %s", c.url, opt.InitAddress, err, c.want)
		}
	}
	if opt, err := parseURL("redis://u:p@h1:1,h2:2"); err != nil || opt.Username != "u" || opt.Password != "p" {
		t.Fatalf("user and password: %+v, %v", opt, err)
	}
}
