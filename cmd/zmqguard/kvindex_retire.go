package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// snapRetire retires the engines of a snapshot that discovery never finds
// again. Without discovery kv-index knows at start which engines it
// follows and clears the snapshot's others at once (resume); with it, an
// engine may be found a moment later, so each engine of the snapshot not
// followed and not heard from within the grace (--engine-ttl, the time a
// gone engine is kept) gets an UpdateDeparted then: its entries are
// dropped, as for an engine that left (kvindex's departed rules). An
// --engine-ttl of 0 (never) keeps them. Not with --redis: the shared
// store's engines may be other writers'.
type snapRetire struct {
	// pending is set until the grace has passed; the Handler records
	// the names it sees only while it is (one atomic load per update
	// after).
	pending atomic.Bool
	mu      sync.Mutex
	seen    map[string]bool
	names   []string // the snapshot's engines
	done    chan struct{}
}

// note records that an update of name reached the Handler (the retirement
// under way, if any, first: mu orders the two).
func (r *snapRetire) note(name string) {
	r.mu.Lock()
	r.seen[name] = true
	r.mu.Unlock()
}

// startSnapRetire arms, when on (--snapshot with discovery), the
// retirement of the engines the index holds positions for (the
// snapshot's: it runs before Run) after grace; wait waits for its
// goroutine (it ends with ctx). Call it before Run: the Handler reads
// s.retire.
func (s *kvIndexServer) startSnapRetire(ctx context.Context, on bool, grace time.Duration) (wait func()) {
	var names []string
	for n := range s.x.Positions() {
		names = append(names, n)
	}
	if !on || len(names) == 0 || grace <= 0 {
		return func() {}
	}
	r := &snapRetire{seen: map[string]bool{}, names: names, done: make(chan struct{})}
	r.pending.Store(true)
	s.retire = r
	go func() {
		defer close(r.done)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		followed := map[string]bool{}
		for _, so := range s.sub.Stats().Sources {
			followed[so.Name] = true
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, n := range r.names {
			if followed[n] || r.seen[n] {
				continue
			}
			s.logger.Info("kv-index: an engine of the snapshot was not found again within --engine-ttl; its entries are dropped",
				"source", n, "engine_ttl", grace.String())
			if err := s.x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: n}); err != nil {
				s.logger.Warn("kv-index: retiring an engine of the snapshot failed", "source", n, "err", err)
			}
		}
		r.pending.Store(false)
	}()
	return func() { <-r.done }
}
