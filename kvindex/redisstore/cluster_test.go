package redisstore

import (
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
