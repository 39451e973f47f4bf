package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

// row5 measures row 5 of the fair-share table (see the package doc).
func row5(nHostile, nGaps int, window time.Duration, down bool) (any, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	bad, err := replaySrv(ctx, trickle)
	if err != nil {
		return nil, err
	}
	if down {
		// A port that was bound and is closed: nobody answers there.
		r, err := socket.New("ROUTER", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
			return nil, err
		}
		bad = r.Endpoint()
		r.Close()
	}
	var honestHigh atomic.Uint64
	good, err := replaySrv(ctx, func(ctx context.Context, r *socket.Socket, id []byte, from uint64) {
		for s := from; s <= honestHigh.Load(); s++ {
			reply(ctx, r, id, s, batch(float64(s)))
		}
		endMarker(ctx, r, id)
	})
	if err != nil {
		return nil, err
	}
	var hostile []*live
	for i := range nHostile {
		l, err := newLive()
		if err != nil {
			return nil, err
		}
		defer l.xp.Close()
		if err := sub.Add(kvevents.Source{Name: fmt.Sprintf("hostile%02d", i), Live: l.xp.Endpoint(), Replay: bad}); err != nil {
			return nil, err
		}
		hostile = append(hostile, l)
	}
	honest, err := newLive()
	if err != nil {
		return nil, err
	}
	defer honest.xp.Close()
	if err := sub.Add(kvevents.Source{Name: "honest", Live: honest.xp.Endpoint(), Replay: good}); err != nil {
		return nil, err
	}
	for _, l := range append(hostile, honest) {
		if err := l.wait(); err != nil {
			return nil, err
		}
	}
	// Hostile sources open gaps, and keep opening new ones.
	go func() {
		s := uint64(0)
		for ctx.Err() == nil {
			for _, l := range hostile {
				l.send(s, batch(0))
			}
			s += 2
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	time.Sleep(time.Second) // let the hostile replays take the slots (the scenario's set-up)
	s := uint64(0)
	honest.send(s, batch(0))
	type gap struct {
		missing uint64
		at      time.Time
	}
	var gs []gap
	for range nGaps {
		s += 2 // s-1 is missing
		honestHigh.Store(s)
		gs = append(gs, gap{missing: s - 1, at: time.Now()})
		honest.send(s, batch(float64(s)))
		time.Sleep(500 * time.Millisecond)
	}
	last := gs[len(gs)-1]
	tr.until(window, func() bool {
		_, ok := tr.delivered["honest"][last.missing]
		return ok || tr.lost["honest"] > 0 && time.Since(last.at) > window
	})
	tr.mu.Lock()
	var rec []time.Duration
	recovered := 0
	for _, g := range gs {
		if at, ok := tr.delivered["honest"][g.missing]; ok {
			rec = append(rec, at.Sub(g.at))
			recovered++
		} else {
			rec = append(rec, window)
		}
	}
	lost := tr.lost["honest"]
	tr.mu.Unlock()
	return map[string]any{"row": 5, "hostile_down": down, "hostile_sources": nHostile, "gaps": nGaps, "recovered": recovered,
		"recovery_p50_ms": pct(rec, 0.5).Milliseconds(), "recovery_p99_ms": pct(rec, 0.99).Milliseconds(),
		"honest_lost": lost, "window_s": window.Seconds()}, nil
}
