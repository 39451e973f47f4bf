package redisstore

import (
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

// TestRedisConformance runs kvindex's backend conformance suite (the
// hand-written rules and the model-based property test) against a store on
// a real redis-server: the same suite the in-memory backend passes.
func TestRedisConformance(t *testing.T) {
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return newStore(t, Config{Capacity: capacity})
	}, kvindextest.Options{})
}

// TestRedisConformanceMapBuckets runs the suite with engine maps moving to
// more buckets past one mapping per bucket (level 1 from 2 mappings, 2
// from 11, 3 from 101), so the suite's engines live in bucketed maps.
func TestRedisConformanceMapBuckets(t *testing.T) {
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return newStore(t, Config{Capacity: capacity, mapSplit: 1})
	}, kvindextest.Options{})
}
