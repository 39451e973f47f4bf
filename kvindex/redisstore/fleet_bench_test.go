package redisstore

import (
	"context"
	"flag"
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

// usedMemory reads the server's used_memory (INFO memory); on the
// cluster, the sum over its nodes.
func usedMemory(b *testing.B, s *store) int64 {
	if s.cluster {
		c := redistest.RequireCluster(b)
		var sum int64
		for i := range c.Nodes {
			info, err := c.Do(i, "INFO", "memory")
			if err != nil {
				b.Fatal(err)
			}
			sum += parseUsedMemory(b, info)
		}
		return sum
	}
	info, err := s.client.Do(context.Background(), s.client.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	return parseUsedMemory(b, info)
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
		var mem0 int64
		st, isRedis := be.(*store)
		if isRedis {
			mem0 = usedMemory(b, st)
		}
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
		if isRedis {
			b.ReportMetric(float64(usedMemory(b, st)-mem0)/float64(n), "redis-B/entry")
		}
	})
}
