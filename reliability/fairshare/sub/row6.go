package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

// row6 (and row12 when hostile): gaps recovered by a replay server that
// answers 500 ms late, while the live stream drops one more batch; or by
// one that answers in reverse order, from 1,000 past the live stream.
func row6(trials int, hostile bool) (any, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	var high, served atomic.Uint64
	requests := make(chan uint64, 64)
	rep, err := replaySrv(ctx, func(ctx context.Context, r *socket.Socket, id []byte, from uint64) {
		at := high.Load()
		served.Add(1)
		if os.Getenv("G3DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "request from", from, "at", at)
		}
		select {
		case requests <- from:
		default:
		}
		if hostile {
			reply(ctx, r, id, at+1000, batch(0))
			for s := at; s >= from && s+1 > 0; s-- {
				reply(ctx, r, id, s, batch(float64(s)))
			}
			endMarker(ctx, r, id)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for s := from; s <= at; s++ {
			reply(ctx, r, id, s, batch(float64(s)))
		}
		endMarker(ctx, r, id)
	})
	if err != nil {
		return nil, err
	}
	l, err := newLive()
	if err != nil {
		return nil, err
	}
	defer l.xp.Close()
	if err := sub.Add(kvevents.Source{Name: "s", Live: l.xp.Endpoint(), Replay: rep}); err != nil {
		return nil, err
	}
	if err := l.wait(); err != nil {
		return nil, err
	}
	pub := func(s uint64) { high.Store(s); l.send(s, batch(float64(s))) }
	s := uint64(0)
	pub(s)
	withLoss, stuck, done, noGap := 0, 0, 0, 0
	for range trials {
		before := func() uint64 { tr.mu.Lock(); defer tr.mu.Unlock(); return tr.lost["s"] }()
		// s+1 missing; s+2 published: a gap.
		pub(s + 2)
		select {
		case <-requests:
		case <-time.After(5 * time.Second):
			// No gap seen: next was pushed past the live stream.
			noGap++
		}
		if noGap > 0 {
			break
		}
		if !hostile {
			pub(s + 3) // s+4 dropped while the replay runs
			pub(s + 5)
			s += 5
		} else {
			s += 2
		}
		pub(s + 1)
		s++
		want := s
		if !tr.until(10*time.Second, func() bool { _, ok := tr.delivered["s"][want]; return ok }) {
			stuck++
			break
		}
		done++
		// The notices of this trial's later requests (the hole's second
		// replay) are not the next trial's.
		for {
			select {
			case <-requests:
				continue
			default:
			}
			break
		}
		tr.mu.Lock()
		if tr.lost["s"] > before {
			withLoss++
		}
		tr.mu.Unlock()
	}
	// Then 1,000 live batches in order: how many are delivered?
	first := s + 1
	for range 1000 {
		s++
		pub(s)
		time.Sleep(time.Millisecond)
	}
	last := s
	tr.until(5*time.Second, func() bool { _, ok := tr.delivered["s"][last]; return ok })
	st := sub.Stats()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	after := 0
	for x := first; x <= last; x++ {
		if _, ok := tr.delivered["s"][x]; ok {
			after++
		}
	}
	row := 6
	if hostile {
		row = 12
	}
	return map[string]any{"row": row, "trials": trials, "trials_done": done, "stuck_live_batch_never_delivered": stuck, "gap_not_detected": noGap, "then_live_delivered_of_1000": after, "trials_with_loss": withLoss, "lost": tr.lost["s"],
		"published": s + 1, "delivered": len(tr.delivered["s"]), "duplicates": st.Duplicates, "replays": st.Replays, "replay_requests_served": served.Load()}, nil
}
