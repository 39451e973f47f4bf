package redisstore

import (
	"flag"
	"fmt"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

var benchShards = flag.Int("redisstore.shards", 0, "shards of the redis-cluster-sharded benchmarks (0: the default, 16)")

// benchBackends runs f against the memory backend, a store on the test
// binary's redis-server (UNIX socket) and one on its 3-node Redis Cluster
// (TCP loopback), the index in one slot and in 16 shards, side by side.
func benchBackends(b *testing.B, capacity int, f func(b *testing.B, x *kvindex.Index, be kvindex.Backend)) {
	for _, name := range []string{"memory", "redis", "redis-cluster", "redis-cluster-sharded"} {
		b.Run(name, func(b *testing.B) {
			var be kvindex.Backend
			if name == "memory" {
				m, err := kvindex.NewMemory(capacity)
				if err != nil {
					b.Fatal(err)
				}
				be = m
			} else if name == "redis" {
				be = newStore(b, Config{Capacity: capacity})
			} else if name == "redis-cluster" {
				be = newClusterStore(b, Config{Capacity: capacity, Shards: 1})
			} else { // Shards 0: 16 on a cluster
				be = newSharded(b, redistest.RequireCluster(b).URL(), Config{Capacity: capacity, Shards: *benchShards})
			}
			x, err := kvindex.New(kvindex.Config{Backend: be})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			f(b, x, be)
		})
	}
}

// BenchmarkIngest applies batches as vLLM publishes them: 16 BlockStored
// events of 4 blocks of 16 tokens each, chained, and one BlockRemoved, for
// 8 engines in turn; events/s counts the 17 events of a batch, entries/s
// the blocks stored.
func BenchmarkIngest(b *testing.B) {
	benchBackends(b, 1<<20, func(b *testing.B, x *kvindex.Index, _ kvindex.Backend) {
		const engines, perBatch, blocks, bs = 8, 16, 4, 16
		next := make([]uint64, engines)
		evs := make([]kvevents.Event, 0, perBatch+1)
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			e := n % engines
			n++
			evs = evs[:0]
			for i := 0; i < perBatch; i++ {
				base := next[e]
				hashes := []uint64{base + 1, base + 2, base + 3, base + 4}
				parent := int64(-1)
				if base%1024 != 0 {
					parent = int64(base)
				} else {
					base = 0
				}
				evs = append(evs, kvmodel.Store(hashes, parent, kvmodel.Tokens(int(next[e]/1024)*engines+e, blocks*bs)[:], bs, "GPU", 0))
				next[e] += blocks
			}
			evs = append(evs, kvmodel.Remove([]uint64{next[e] - 1}, "GPU", 0))
			if err := x.ApplyEvents(fmt.Sprintf("engine-%d", e), evs); err != nil {
				b.Fatal(err)
			}
		}
		sec := b.Elapsed().Seconds()
		b.ReportMetric(float64(n*(perBatch+1))/sec, "events/s")
		b.ReportMetric(float64(n*perBatch*blocks)/sec, "entries/s")
	})
}

// BenchmarkScore scores an 8k-token prompt (128 blocks of 64) against 16
// engines holding prefixes of it from 8 to 128 blocks, serially and from
// parallel goroutines (the Redis client pipelines them on one connection).
func BenchmarkScore(b *testing.B) {
	const engines, blocks, bs = 16, 128, 64
	prompt := kvmodel.Tokens(7, blocks*bs)
	benchBackends(b, 1<<20, func(b *testing.B, x *kvindex.Index, _ kvindex.Backend) {
		for e := 0; e < engines; e++ {
			held := (e + 1) * blocks / engines
			hashes := make([]uint64, held)
			for i := range hashes {
				hashes[i] = uint64(e)<<32 | uint64(i+1)
			}
			if err := x.ApplyEvents(fmt.Sprintf("engine-%d", e),
				[]kvevents.Event{kvmodel.Store(hashes, -1, prompt[:held*bs], bs, "GPU", 0)}); err != nil {
				b.Fatal(err)
			}
		}
		req := kvindex.ScoreRequest{Tokens: prompt, BlockSize: bs}
		check := func(r kvindex.ScoreResult) {
			if m, ok := r.Best(); !ok || m.Blocks != blocks {
				b.Fatalf("best %+v, want %d blocks", m, blocks)
			}
		}
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r, err := x.Score(req)
				if err != nil {
					b.Fatal(err)
				}
				check(r)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "scores/s")
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r, err := x.Score(req)
					if err != nil {
						b.Error(err)
						return
					}
					check(r)
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "scores/s")
		})
	})
}
