package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
)

func runEngine(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	backPub := fs.String("back-publish", "", "coordinator back publish endpoint")
	backOut := fs.String("back-output", "", "coordinator back output endpoint")
	index := fs.Int("index", 0, "this engine's data-parallel rank")
	completeAfter := fs.Duration("complete-after", 300*time.Millisecond, "rank 0: how long a wave runs before wave_complete")
	statsEvery := fs.Duration("stats-every", 10*time.Millisecond, "stats period")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	e, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: *backPub, BackOutput: *backOut, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	start := time.Now()
	if err := e.WaitReady(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s engine %d: READY after %v\n", time.Now().Format("15:04:05.000"), *index, time.Since(start).Round(time.Millisecond))
	// wave and step change together: an engine's (wave, step) pair only
	// grows, or the coordinator takes its stats for stale ones.
	var mu sync.Mutex
	var wave, step int64
	var sent atomic.Uint64
	go func() {
		reported := int64(-1)
		for ctx.Err() == nil {
			w, ex, err := e.NextStartWave(ctx)
			if err != nil {
				continue
			}
			exs := "none"
			if ex != nil {
				exs = fmt.Sprint(*ex)
			}
			fmt.Fprintf(os.Stderr, "%s engine %d: START_DP_WAVE wave=%d exclude=%s\n", time.Now().Format("15:04:05.000"), *index, w, exs)
			mu.Lock()
			if int64(w) > wave {
				wave, step = int64(w), 0
			}
			mu.Unlock()
			if *index == 0 && int64(w) > reported {
				// Rank 0 reports the paused->running edge (vLLM PR #51481),
				// once per wave.
				reported = int64(w)
				_ = e.SendStartWave(ctx, 0, w)
				go func(w int) {
					select {
					case <-ctx.Done():
						return
					case <-time.After(*completeAfter):
					}
					if e.SendWaveComplete(ctx, 0, w) == nil {
						fmt.Fprintf(os.Stderr, "%s engine 0: wave_complete=%d sent\n", time.Now().Format("15:04:05.000"), w)
					}
				}(w)
			}
		}
	}()
	t := time.NewTicker(*statsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return map[string]any{"index": *index, "stats_sent": sent.Load(), "wave": wave}, nil
		case <-t.C:
			mu.Lock()
			step++
			w, s := wave, step
			mu.Unlock()
			if e.SendStats(ctx, *index, int(s%20), 1, int(w), int(s)) == nil {
				sent.Add(1)
			}
		}
	}
}

func runFrontend(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	front := fs.String("front", "", "coordinator front publish endpoint")
	wakeEvery := fs.Duration("wake-every", time.Second, "wake the engines this long after they pause")
	scale := fs.Int("scale", 0, "if set, first send (\"SCALE_ELASTIC_EP\", N): the engine list (and every publication) grows to N engines")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: *front, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer fe.Close()
	if *scale > 0 {
		for ctx.Err() == nil && fe.Scale(ctx, *scale) != nil {
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "%s frontend: SCALE_ELASTIC_EP %d sent\n", time.Now().Format("15:04:05.000"), *scale)
	}
	var pubs uint64
	var last string
	wakeAt := time.Now().Add(*wakeEvery)
	wave, running := 0, false
	for ctx.Err() == nil {
		nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		p, err := fe.Next(nctx)
		cancel()
		if err == nil {
			pubs++
			wave, running = int(p.Wave), p.Running
			line := fmt.Sprintf("counts=%v wave=%d running=%v", p.Counts(), p.Wave, p.Running)
			if !p.HasCounts {
				line = fmt.Sprintf("wave publication: wave=%d running=%v", p.Wave, p.Running)
			}
			if line != last {
				fmt.Fprintf(os.Stderr, "%s frontend: %s\n", time.Now().Format("15:04:05.000"), line)
				last = line
			}
		}
		if !running && time.Now().After(wakeAt) && fe.Connected() {
			if fe.Wake(ctx, nil, wave) == nil {
				fmt.Fprintf(os.Stderr, "%s frontend: wake (nil, %d) sent\n", time.Now().Format("15:04:05.000"), wave)
			}
			wakeAt = time.Now().Add(*wakeEvery)
		}
	}
	return map[string]any{"publications": pubs}, nil
}

// ---- fetch ----------------------------------------------------------------------

func runFetch(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	listener := fs.String("listener", "", "handshake listener endpoint")
	duration := fs.Duration("duration", 30*time.Second, "how long to run")
	interval := fs.Duration("interval", 20*time.Millisecond, "pause between handshakes")
	timeout := fs.Duration("timeout", time.Second, "per-handshake timeout (vLLM: 5 s)")
	clients := fs.Int("clients", 1, "concurrent handshake loops")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var ok atomic.Uint64
	var failed kinds
	var wg sync.WaitGroup
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); fetchLoop(ctx, *listener, *interval, *timeout, &ok, &failed) }()
	}
	var lastOK uint64
	lastFail := map[string]uint64{}
	go progress(ctx, func(time.Duration) string {
		o, f := ok.Load(), failed.snapshot()
		var parts []string
		for k, v := range f {
			if d := v - lastFail[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", k, d))
			}
		}
		sort.Strings(parts)
		line := fmt.Sprintf("this second: ok=%d failed={%s}", o-lastOK, strings.Join(parts, " "))
		lastOK, lastFail = o, f
		return line
	})
	wg.Wait()
	return map[string]any{"ok": ok.Load(), "failed": failed.snapshot()}, nil
}

// ---- idle -----------------------------------------------------------------------
