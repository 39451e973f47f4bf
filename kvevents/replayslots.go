package kvevents

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errPreempted is the cause a replay's context is cancelled with when its
// slot is taken back for a waiting source.
var errPreempted = errors.New("kvevents: replay slot taken back for a waiting source")

// replaySlots shares Config.MaxReplays replay slots among sources, fairly:
// a source runs at most one replay at a time (so it holds at most one
// slot), sources waiting for a slot are served first come, first served,
// and while one waits, a replay that has held its slot for ReplaySlice is
// preempted (its context cancelled with errPreempted): its source keeps
// what it already applied and queues again behind the waiters. So sources
// whose replay servers trickle or hang cannot keep the slots from an honest
// source for longer than one slice.
type replaySlots struct {
	n     int
	slice time.Duration

	mu         sync.Mutex
	held       []*slotHold
	waiters    []slotWaiter
	preempting int // held slots preempted and not yet released
}

type slotWaiter struct {
	ctx context.Context
	ch  chan *slotHold
}

type slotHold struct {
	s         *replaySlots
	ctx       context.Context
	cancel    context.CancelCauseFunc
	start     time.Time
	timer     *time.Timer
	preempted bool
	released  bool
}

func newReplaySlots(n int, slice time.Duration) *replaySlots {
	return &replaySlots{n: n, slice: slice}
}

// acquire waits for a slot and returns it; its ctx (derived from ctx) is
// cancelled with errPreempted if the slot is taken back. The caller must
// call release.
func (s *replaySlots) acquire(ctx context.Context) (*slotHold, error) {
	s.mu.Lock()
	if len(s.held) < s.n && len(s.waiters) == 0 {
		h := s.takeLocked(ctx)
		s.mu.Unlock()
		return h, nil
	}
	w := make(chan *slotHold, 1)
	s.waiters = append(s.waiters, slotWaiter{ctx: ctx, ch: w})
	s.preemptLocked()
	s.mu.Unlock()
	select {
	case h := <-w:
		return h, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for i, x := range s.waiters {
		if x.ch == w {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			s.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	s.mu.Unlock()
	// A slot was handed over meanwhile: give it on.
	(<-w).release()
	return nil, ctx.Err()
}

// takeLocked creates a hold for a caller whose ctx is ctx (s.mu held).
func (s *replaySlots) takeLocked(ctx context.Context) *slotHold {
	h := &slotHold{s: s, start: time.Now()}
	h.ctx, h.cancel = context.WithCancelCause(ctx)
	h.timer = time.AfterFunc(s.slice, func() {
		s.mu.Lock()
		if len(s.waiters) > s.preempting {
			s.preemptHoldLocked(h)
		}
		s.mu.Unlock()
	})
	s.held = append(s.held, h)
	return h
}

// preemptLocked takes back the oldest slot held for a whole slice, if the
// waiters outnumber the slots already being taken back (s.mu held). Slots
// held for less are taken back by their own timer when it fires.
func (s *replaySlots) preemptLocked() {
	if len(s.waiters) <= s.preempting {
		return
	}
	var oldest *slotHold
	for _, h := range s.held {
		if !h.preempted && time.Since(h.start) >= s.slice && (oldest == nil || h.start.Before(oldest.start)) {
			oldest = h
		}
	}
	if oldest != nil {
		s.preemptHoldLocked(oldest)
	}
}

func (s *replaySlots) preemptHoldLocked(h *slotHold) {
	if h.preempted || h.released {
		return
	}
	h.preempted = true
	s.preempting++
	h.cancel(errPreempted)
}

// wasPreempted reports whether the hold's slot was taken back.
func (h *slotHold) wasPreempted() bool {
	return errors.Is(context.Cause(h.ctx), errPreempted)
}

// release gives the slot back, to the first waiter if any. Idempotent.
func (h *slotHold) release() {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	h.timer.Stop()
	h.cancel(context.Canceled)
	if h.preempted {
		s.preempting--
	}
	for i, x := range s.held {
		if x == h {
			s.held = append(s.held[:i], s.held[i+1:]...)
			break
		}
	}
	if len(s.waiters) > 0 {
		w := s.waiters[0]
		s.waiters = s.waiters[1:]
		w.ch <- s.takeLocked(w.ctx)
		s.preemptLocked()
	}
}
