package redisstore

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

var (
	fleetEngines = flag.Int("redisstore.engines", 1000, "engines of BenchmarkScoreFleet's fleet")
	fleetBlocks  = flag.Int("redisstore.blocks", 200_000, "blocks of BenchmarkScoreFleet's fleet")
)

// nodeUsage reads each node's used_memory (INFO memory) and number of
// keys (DBSIZE): one node for a store on one server, the cluster's nodes
// for a store or a sharded store on the cluster; nil for another backend.
func nodeUsage(b *testing.B, be kvindex.Backend) (mem, keys []int64) {
	var s *store
	switch v := be.(type) {
	case *store:
		s = v
	case *sharded:
		s = v.shards[0]
	default:
		return nil, nil
	}
	if s.cluster {
		c := redistest.RequireCluster(b)
		for i := range c.Nodes {
			info, err := c.Do(i, "INFO", "memory")
			if err != nil {
				b.Fatal(err)
			}
			n, err := c.Do(i, "DBSIZE")
			if err != nil {
				b.Fatal(err)
			}
			k, _ := strconv.ParseInt(n, 10, 64)
			mem, keys = append(mem, parseUsedMemory(b, info)), append(keys, k)
		}
		return mem, keys
	}
	ctx := context.Background()
	info, err := s.client.Do(ctx, s.client.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	k, err := s.client.Do(ctx, s.client.B().Dbsize().Build()).AsInt64()
	if err != nil {
		b.Fatal(err)
	}
	return []int64{parseUsedMemory(b, info)}, []int64{k}
}

// parseUsedMemory reads used_memory from INFO memory's text.
func parseUsedMemory(b *testing.B, info string) int64 {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkScoreFleet: kvindex's fleet benchmark shape (an 8k-token
// prompt, 128 blocks of 64, 32 engines holding prefixes of 1..128 blocks,
// the rest of the fleet's blocks in other chains) on the memory backend
// and on Redis, built through the Index (build rate reported), then Score
// latency; for Redis also the server's bytes per entry (used_memory).
func BenchmarkScoreFleet(b *testing.B) {
	f := kvload.Fleet{Engines: *fleetEngines, Blocks: *fleetBlocks, BlockSize: 64, PromptBlocks: 128, Holders: 32, ChainBlocks: 128}
	benchBackends(b, 4*f.Blocks, func(b *testing.B, x *kvindex.Index, be kvindex.Backend) {
		mem0, keys0 := nodeUsage(b, be)
		t0 := time.Now()
		n, err := f.Build(x)
		if err != nil {
			b.Fatal(err)
		}
		build := time.Since(t0)
		req := kvindex.ScoreRequest{Tokens: f.Prompt()}
		if r, err := x.Score(req); err != nil {
			b.Fatal(err)
		} else if best, ok := r.Best(); !ok || best.Blocks != f.PromptBlocks || len(r.Engines) < f.Holders {
			b.Fatalf("fleet scored wrong: %d engines, best %+v", len(r.Engines), best)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t := time.Now()
			if _, err := x.Score(req); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		b.ReportMetric(float64(n), "entries")
		b.ReportMetric(float64(n)/build.Seconds(), "build-entries/s")
		if mem0 != nil {
			mem1, keys1 := nodeUsage(b, be)
			var sum int64
			for i := range mem1 {
				sum += mem1[i] - mem0[i]
			}
			b.ReportMetric(float64(sum)/float64(n), "redis-B/entry")
			if len(mem1) > 1 { // the cluster: what each node took
				for i := range mem1 {
					b.ReportMetric(float64(mem1[i]-mem0[i])/1e6, fmt.Sprintf("node%d-MB", i))
					b.ReportMetric(float64(keys1[i]-keys0[i]), fmt.Sprintf("node%d-keys", i))
				}
			}
		}
	})
}
