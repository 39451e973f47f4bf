package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/vllm"
)

// guarded runs f, turning a panic into an error (with the stack logged), so
// that a crashing component is counted rather than taking the demo down
// without its table.
func guarded(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("component panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// demoEngine plays one DP engine: it waits for READY, pushes stats every
// 20 ms, follows START_DP_WAVE broadcasts, and (engine 0) reports the end of
// each wave a second after it started, so the front-end wakes the next one.
// Under releases where a wake no longer sets running (vLLM PR #51481),
// engine 0 also reports each wave's start with start_wave, as DP rank 0
// does.
func demoEngine(ctx context.Context, eng *dppeer.Engine, idx int, release vllm.Release, c *demoCounters) {
	reportStart := idx == 0 && !release.Rules().WakeSetsRunning
	reported := int64(-1)
	if err := eng.WaitReady(ctx); err != nil {
		return
	}
	var wave atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			w, _, err := eng.NextStartWave(ctx)
			if err != nil {
				if decodeguard.IsBadInput(err) && ctx.Err() == nil {
					continue
				}
				return
			}
			c.startWaves.Add(1)
			if int64(w) > wave.Load() {
				wave.Store(int64(w))
			}
			if reportStart && int64(w) > reported && eng.SendStartWave(ctx, 0, w) == nil {
				reported = int64(w)
				c.engineMsgs.Add(1)
			}
		}
	})
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	cur, step, completed := wave.Load(), 0, int64(-1)
	waveStart := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w := wave.Load(); w != cur {
			cur, step, waveStart = w, 0, time.Now()
		}
		step++
		waiting, running := (step*7+idx*3)%11, (step+idx)%5+1
		if eng.SendStats(ctx, idx, waiting, running, int(cur), step) == nil {
			c.engineMsgs.Add(1)
		}
		if idx == 0 && completed < cur && time.Since(waveStart) > time.Second {
			if eng.SendWaveComplete(ctx, 0, int(cur)) == nil {
				c.engineMsgs.Add(1)
				completed = cur
			}
		}
	}
}

// demoFrontEnd plays the API front-end: it reads every publication and wakes
// the engines whenever they are paused.
func demoFrontEnd(ctx context.Context, fe *dppeer.FrontEnd, c *demoCounters) {
	woken := int64(-1)
	for {
		p, err := fe.Next(ctx)
		if err != nil {
			if decodeguard.IsBadInput(err) && ctx.Err() == nil {
				continue
			}
			return
		}
		c.publications.Add(1)
		if !p.Running && p.Wave != woken {
			if fe.Wake(ctx, nil, int(p.Wave)) == nil {
				woken = p.Wave
				c.wakes.Add(1)
			}
		}
	}
}

// demoClient plays one decode worker fetching metadata in a loop: V3 for
// tp rank i%2 (the third client asks in the V2 form); the last client asks
// every tenth time for a rank the listener does not serve and expects the
// explicit rejection.
func demoClient(ctx context.Context, ep string, i, n int, opts handshake.ClientOptions, c *demoCounters, logger *slog.Logger) {
	for k := 1; ctx.Err() == nil; k++ {
		req := handshake.Request{Variant: handshake.V3, TP: i % demoTP}
		if i == 2 {
			req.Variant = handshake.V2
		}
		unserved := i == n-1 && k%10 == 0
		if unserved {
			req.TP = 7
		}
		_, err := handshake.Fetch(ctx, ep, req, opts)
		if ctx.Err() != nil {
			return
		}
		switch {
		case unserved && errors.Is(err, handshake.ErrRejected):
			c.rejected.Add(1)
		case !unserved && err == nil:
			c.fetchOK.Add(1)
		default:
			c.fetchFail.Add(1)
			logger.Warn("handshake failed", "client", i, "rank", handshake.Rank{PP: req.PP, TP: req.TP}, "err", err)
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
