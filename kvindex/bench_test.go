package kvindex_test

import (
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// The scale of the Score benchmarks: BENCHMARKS.md's figures use
// -kvindex.blocks=10000000 (10M indexed blocks over 1,000 engines); the
// default keeps `go test -bench .` small.
var (
	benchEngines = flag.Int("kvindex.engines", 1000, "engines in the Score benchmarks' fleet")
	benchBlocks  = flag.Int("kvindex.blocks", 1_000_000, "indexed blocks in the Score benchmarks' fleet")
	benchRPLive  = flag.Int("kvindex.rp-live", 100_000, "entries BenchmarkApplyRouterPath's index holds")
)

type builtFleet struct {
	x      *kvindex.Index
	prompt []int64
	n      int
	bytes  float64 // heap bytes per entry after building
}

var (
	fleetMu sync.Mutex
	fleets  = map[kvload.Fleet]*builtFleet{}
)

// fleet builds (once per process) an index holding f.
func fleet(b *testing.B, f kvload.Fleet) *builtFleet {
	fleetMu.Lock()
	defer fleetMu.Unlock()
	if bf := fleets[f]; bf != nil {
		return bf
	}
	// Drop the other fleets first: one at a time fits in memory.
	for k, bf := range fleets {
		bf.x.Close()
		delete(fleets, k)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	x, err := kvindex.New(kvindex.Config{Capacity: f.Blocks + f.Engines*f.PromptBlocks})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	n, err := f.Build(x)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("built %d entries over %d engines in %v", n, f.Engines, time.Since(start).Round(time.Millisecond))
	runtime.GC()
	runtime.ReadMemStats(&after)
	bf := &builtFleet{x: x, prompt: f.Prompt(), n: n, bytes: float64(after.HeapAlloc-before.HeapAlloc) / float64(n)}
	fleets[f] = bf
	return bf
}

func scoreFleet(b *testing.B, f kvload.Fleet) {
	bf := fleet(b, f)
	req := kvindex.ScoreRequest{Tokens: bf.prompt}
	r, err := bf.x.Score(req)
	if err != nil {
		b.Fatal(err)
	}
	if best, ok := r.Best(); !ok || best.Blocks != f.PromptBlocks || len(r.Engines) < f.Holders {
		b.Fatalf("fleet scored wrong: %d engines, best %+v", len(r.Engines), best)
	}
	lat := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := threadCPU()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := bf.x.Score(req); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	cpu1, _ := threadCPU()
	b.StopTimer()
	if cpuOK {
		// Mean CPU time per Score of this thread: unlike wall-clock
		// percentiles, not inflated by other processes' load.
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(bf.n), "entries")
	b.ReportMetric(bf.bytes, "heap-B/entry")
	b.ReportMetric(float64(len(r.Engines)), "engines-matched")
}

// BenchmarkScore8k: Score of an 8k-token prompt (128 blocks of 64) against
// a fleet of -kvindex.engines engines holding -kvindex.blocks blocks, 32
// of which hold prefixes of the prompt (lengths spread over 1..128).
func BenchmarkScore8k(b *testing.B) {
	scoreFleet(b, kvload.Fleet{Engines: *benchEngines, Blocks: *benchBlocks, BlockSize: 64, PromptBlocks: 128,
		Holders: 32, ChainBlocks: 128})
}

// BenchmarkScore8kSharedPrefix: the same with a fleet-wide system prompt:
// every engine also holds the prompt's first 8 blocks, so each of them
// has 1,000 holders.
func BenchmarkScore8kSharedPrefix(b *testing.B) {
	scoreFleet(b, kvload.Fleet{Engines: *benchEngines, Blocks: *benchBlocks, BlockSize: 64, PromptBlocks: 128,
		Holders: 32, Shared: 8, ChainBlocks: 128})
}

// BenchmarkBlockKeys8k: keying an 8k-token prompt (128 blocks of 64), the
// hashing part of Score.
func BenchmarkBlockKeys8k(b *testing.B) {
	toks := kvload.Fleet{BlockSize: 64, PromptBlocks: 128}.Prompt()
	keys := make([]kvindex.Key, 0, 128)
	b.SetBytes(int64(len(toks) * 8))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		keys = kvindex.BlockKeys(kvindex.KeyParams{BlockSize: 64}, toks, keys[:0])
	}
}

// BenchmarkIngest: events per second into a memory index on one
// goroutine (one core) while another goroutine scores 8k-token prompts
// without pause. events/s is wall time; events/cpu-s divides by the CPU
// time of the ingest goroutine's own thread (locked to it), the rate of one
// core on a machine shared with other work. 16 engines each keep 60,000
// blocks (16-token blocks) against a capacity of 1M entries; batches of 32
// events, alternately a one-block BlockStored chained to the engine's
// previous block and a BlockRemoved of its oldest.
func BenchmarkIngest(b *testing.B) {
	for _, queries := range []bool{false, true} {
		b.Run(fmt.Sprint("queries=", queries), func(b *testing.B) {
			x, err := kvindex.New(kvindex.Config{Capacity: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			const engines, batch = 16, 32
			streams := make([]*kvload.Stream, engines)
			for i := range streams {
				streams[i] = kvload.NewStream(kvload.EngineName(i), uint64(i+1), 16, 60000)
			}
			// Warm up to the steady state (removals running).
			for r := 0; r < 60000/batch+10; r++ {
				for _, s := range streams {
					if err := x.ApplyEvents(s.Engine(), s.Batch(batch)); err != nil {
						b.Fatal(err)
					}
				}
			}
			prompt := make([]int64, 8192)
			copy(prompt, kvload.Fleet{BlockSize: 16, PromptBlocks: 512}.Prompt())
			var stop atomic.Bool
			var scores atomic.Int64
			var wg sync.WaitGroup
			var lat []time.Duration // each Score's wall time, read after wg.Wait
			if queries {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						t0 := time.Now()
						if _, err := x.Score(kvindex.ScoreRequest{Tokens: prompt}); err != nil {
							panic(err)
						}
						lat = append(lat, time.Since(t0))
						scores.Add(1)
					}
				}()
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, cpuOK := threadCPU()
			start := time.Now()
			events := 0
			for events < b.N {
				for _, s := range streams {
					if err := x.ApplyEvents(s.Engine(), s.Batch(batch)); err != nil {
						b.Fatal(err)
					}
				}
				events += engines * batch
			}
			el := time.Since(start)
			cpu1, _ := threadCPU()
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			b.ReportMetric(float64(events)/el.Seconds(), "events/s")
			if cpuOK && cpu1 > cpu0 {
				// The ingest thread's own CPU time: what one core does,
				// however loaded the machine is.
				b.ReportMetric(float64(events)/(cpu1-cpu0).Seconds(), "events/cpu-s")
			}
			b.ReportMetric(float64(scores.Load())/el.Seconds(), "scores/s")
			if len(lat) > 0 {
				// Wall time, so the machine's load is in it; beside
				// ingest without pause, the index's lock (if any) too.
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "score-p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "score-p99-µs")
			}
			st := x.Stats()
			b.ReportMetric(float64(st.Backend.Entries), "entries")
		})
	}
}

// BenchmarkBytesPerEntry: heap bytes per (block, engine, medium) entry
// of a memory index (runtime.MemStats before and after, after a GC), for
// 1M entries of 1,000 engines: tables, arena and all. Run with
// -benchtime=1x.
func BenchmarkBytesPerEntry(b *testing.B) {
	for _, n := range []int{1_000_000} {
		b.Run(fmt.Sprint("entries=", n), func(b *testing.B) {
			f := kvload.Fleet{Engines: 1000, Blocks: n, BlockSize: 16, PromptBlocks: 8, ChainBlocks: 128}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			x, err := kvindex.New(kvindex.Config{Capacity: n})
			if err != nil {
				b.Fatal(err)
			}
			got, err := f.Build(x)
			if err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(got), "heap-B/entry")
			b.ReportMetric(float64(x.Stats().Backend.Bytes)/float64(got), "table-B/entry")
			runtime.KeepAlive(x)
			x.Close()
		})
	}
}

// BenchmarkApplyRouterPath applies bench/routerpath's steady stream to an
// index of 100,000 entries (-kvindex.rp-live) over 1 or 100 engines, prefilled as routerpath
// does (batches of 16 BlockStored of 16 blocks): batches of 16 events, 8
// BlockStored of 2 blocks of 16 tokens chained to the engine's previous
// block and 8 BlockRemoved of its 2 oldest, so the entry count holds; the
// engines take turns, a batch each. ns/op is per event, and cpu-ns/event
// the applying thread's CPU time per event.
func BenchmarkApplyRouterPath(b *testing.B) {
	for _, engines := range []int{1, 100} {
		b.Run(fmt.Sprintf("engines=%d", engines), func(b *testing.B) { benchApplyRouterPath(b, engines) })
	}
}

type routerPathEngine struct {
	name         string
	base         uint64
	next, oldest uint64
}

func benchApplyRouterPath(b *testing.B, engines int) {
	const bs = 16
	live := int64(*benchRPLive)
	x, err := kvindex.New(kvindex.Config{Capacity: int(live + live/8 + 1<<16)})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	r := uint64(7)
	rnd := func() int64 {
		r += 0x9e3779b97f4a7c15
		z := r
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return int64((z ^ z>>31) % 150000)
	}
	es := make([]*routerPathEngine, engines)
	for i := range es {
		es[i] = &routerPathEngine{name: fmt.Sprintf("engine-%04d", i), base: uint64(i+1) << 40, next: 1, oldest: 1}
	}
	toks := make([]int64, 16*16*bs)
	hs := make([]kvevents.Hash, 16*16)
	var evs []kvevents.Event
	store := func(e *routerPathEngine, m int, ti, hi int) kvevents.Event {
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: bs, Medium: kvevents.Some("GPU")}
		if (e.next-1)%64 != 0 {
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(e.base | (e.next - 1)), Valid: true}
		}
		for j := 0; j < m; j++ {
			hs[hi+j] = kvevents.IntHash(e.base | (e.next + uint64(j)))
		}
		t := toks[ti : ti+m*bs]
		for j := range t {
			t[j] = rnd()
		}
		ev.TokenIDs, ev.BlockHashes = t, hs[hi:hi+m]
		e.next += uint64(m)
		return ev
	}
	per := uint64(live / int64(engines))
	for _, e := range es {
		for e.next <= per {
			evs = evs[:0]
			for i := 0; i < 16 && e.next <= per; i++ {
				m := min(16, int(64-(e.next-1)%64), int(per-e.next+1))
				evs = append(evs, store(e, m, i*16*bs, i*16))
			}
			if err := x.ApplyEvents(e.name, evs); err != nil {
				b.Fatal(err)
			}
		}
	}
	turn := 0
	steady := func() {
		e := es[turn%engines]
		turn++
		evs = evs[:0]
		for i := 0; i < 16; i++ {
			if i%2 == 1 {
				hs[i*2], hs[i*2+1] = kvevents.IntHash(e.base|e.oldest), kvevents.IntHash(e.base|(e.oldest+1))
				e.oldest += 2
				evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"), BlockHashes: hs[i*2 : i*2+2]})
				continue
			}
			evs = append(evs, store(e, 2, i*2*bs, i*2))
		}
		if err := x.ApplyEvents(e.name, evs); err != nil {
			b.Fatal(err)
		}
	}
	for range 2000 {
		steady()
	}
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	cpu0, cpuOK := threadCPU()
	for i := 0; i < b.N; i += 16 {
		steady()
	}
	cpu1, _ := threadCPU()
	b.StopTimer()
	if cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/event")
	}
	if got := x.Stats().Backend.Entries; got < live-64*int64(engines) || got > live+64*int64(engines) {
		b.Fatalf("%d entries, want about %d", got, live)
	}
}
