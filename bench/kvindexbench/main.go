// Command kvindexbench measures package kvindex's in-memory index at fleet
// scale, the way BENCHMARKS.md reports it: it builds a fleet's index (by
// default 1,000 engines and 10M blocks of 64 tokens, 32 engines holding
// prefixes of one 8k-token prompt), then measures
//
//   - bytes per entry: heap growth (runtime.MemStats after a GC) ÷ entries;
//   - Score of the 8k-token prompt (128 blocks of 64): median and p99 of
//     the wall time, and the mean CPU time of the scoring thread;
//   - ingest: events per second into the same index from 16 engines'
//     streams (batches of 32 events, alternately a one-block BlockStored
//     chained to the engine's previous block and a BlockRemoved of its
//     oldest, each engine keeping 60,000 blocks)
//     on one goroutine locked to its thread, with and without another
//     goroutine scoring the prompt without pause; per wall second and per
//     CPU second of the ingest thread (RUSAGE_THREAD: one core's rate on a
//     machine shared with other work).
//
// It prints one JSON line. bench/run.sh runs it (comparison kvindex).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
	"github.com/zmqguard/zmqguard/kvindex"
)

func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type ingestResult struct {
	EventsPerSec    float64 `json:"events_per_sec"`
	EventsPerCPUSec float64 `json:"events_per_cpu_sec"`
	ScoresPerSec    float64 `json:"scores_per_sec"`
	QueryP50us      float64 `json:"query_p50_us,omitempty"`
}

func main() {
	engines := flag.Int("engines", 1000, "engines in the fleet")
	blocks := flag.Int("blocks", 10_000_000, "blocks indexed (one entry each)")
	bs := flag.Int("block-size", 64, "tokens per block")
	promptBlocks := flag.Int("prompt-blocks", 128, "blocks of the scored prompt")
	holders := flag.Int("holders", 32, "engines holding a prefix of the prompt")
	shared := flag.Int("shared", 0, "leading prompt blocks every engine holds")
	scores := flag.Int("scores", 20000, "Score calls timed")
	events := flag.Int("events", 4_000_000, "events ingested per ingest run")
	flag.Parse()

	f := kvload.Fleet{Engines: *engines, Blocks: *blocks, BlockSize: *bs, PromptBlocks: *promptBlocks,
		Holders: *holders, Shared: *shared, ChainBlocks: 128}
	const streams, batch, live = 16, 32, 60000
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	x, err := kvindex.New(kvindex.Config{Capacity: f.Blocks + f.Engines*f.PromptBlocks + streams*(live+2*batch)})
	if err != nil {
		fail(err)
	}
	t0 := time.Now()
	n, err := f.Build(x)
	if err != nil {
		fail(err)
	}
	build := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	bytesPerEntry := float64(m1.HeapAlloc-m0.HeapAlloc) / float64(n)

	req := kvindex.ScoreRequest{Tokens: f.Prompt()}
	r, err := x.Score(req)
	if err != nil {
		fail(err)
	}
	if best, ok := r.Best(); !ok || best.Blocks != min(f.PromptBlocks, f.Blocks/f.Engines) {
		fail(fmt.Errorf("the fleet scores wrong: best %+v", best))
	}
	lat := make([]time.Duration, 0, *scores)
	runtime.LockOSThread()
	sc0 := threadCPU()
	for i := 0; i < *scores; i++ {
		s := time.Now()
		if _, err := x.Score(req); err != nil {
			fail(err)
		}
		lat = append(lat, time.Since(s))
	}
	scoreCPU := threadCPU() - sc0
	runtime.UnlockOSThread()
	slices.Sort(lat)

	ss := make([]*kvload.Stream, streams)
	for i := range ss {
		ss[i] = kvload.NewStream(kvload.EngineName(*engines+i), uint64(i+1), 16, live)
	}
	// Warm the streams up to their steady state (removals running).
	for k := 0; k < live/batch+10; k++ {
		for _, s := range ss {
			if err := x.ApplyEvents(s.Engine(), s.Batch(batch)); err != nil {
				fail(err)
			}
		}
	}
	ingest := func(queries bool) ingestResult {
		var stop atomic.Bool
		var nScores atomic.Int64
		var wg sync.WaitGroup
		var qlat []time.Duration
		if queries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					s := time.Now()
					if _, err := x.Score(req); err != nil {
						fail(err)
					}
					qlat = append(qlat, time.Since(s))
					nScores.Add(1)
				}
			}()
		}
		runtime.LockOSThread()
		c0, w0 := threadCPU(), time.Now()
		done := 0
		for done < *events {
			for _, s := range ss {
				if err := x.ApplyEvents(s.Engine(), s.Batch(batch)); err != nil {
					fail(err)
				}
			}
			done += streams * batch
		}
		wall, cpu := time.Since(w0), threadCPU()-c0
		runtime.UnlockOSThread()
		stop.Store(true)
		wg.Wait()
		res := ingestResult{EventsPerSec: float64(done) / wall.Seconds(), ScoresPerSec: float64(nScores.Load()) / wall.Seconds()}
		if cpu > 0 {
			res.EventsPerCPUSec = float64(done) / cpu.Seconds()
		}
		if len(qlat) > 0 {
			slices.Sort(qlat)
			res.QueryP50us = us(qlat[len(qlat)/2])
		}
		return res
	}
	alone := ingest(false)
	withQueries := ingest(true)
	st := x.Stats()
	out := map[string]any{
		"engines":                   *engines,
		"entries":                   n,
		"block_size":                *bs,
		"prompt_blocks":             *promptBlocks,
		"holders":                   *holders,
		"shared":                    *shared,
		"build_seconds":             build.Seconds(),
		"bytes_per_entry":           bytesPerEntry,
		"table_bytes_per_entry":     float64(st.Backend.Bytes) / float64(st.Backend.Entries),
		"score_p50_us":              us(lat[len(lat)/2]),
		"score_p99_us":              us(lat[len(lat)*99/100]),
		"score_cpu_us":              us(scoreCPU) / float64(*scores),
		"engines_matched":           len(r.Engines),
		"ingest":                    alone,
		"ingest_with_queries":       withQueries,
		"alone_events_per_sec":      alone.EventsPerSec,
		"alone_events_per_cpu_sec":  alone.EventsPerCPUSec,
		"ingest_events_per_sec":     withQueries.EventsPerSec,
		"ingest_events_per_cpu_sec": withQueries.EventsPerCPUSec,
		"entries_after":             st.Backend.Entries,
		"evicted":                   st.Evicted,
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	runtime.KeepAlive(x)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kvindexbench:", err)
	os.Exit(1)
}
