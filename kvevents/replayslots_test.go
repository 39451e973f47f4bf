package kvevents

import (
	"context"
	"testing"
	"time"
)

// TestReplaySlotsFIFOAndPreempt: with every slot held, a waiter gets the
// slot of the holder preempted after its slice; waiters are served in
// arrival order; a waiter whose ctx ends leaves the queue.
func TestReplaySlotsFIFOAndPreempt(t *testing.T) {
	s := newReplaySlots(1, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h1, err := s.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gives up leaves no trace.
	gone, gcancel := context.WithCancel(ctx)
	gerr := make(chan error, 1)
	go func() { _, err := s.acquire(gone); gerr <- err }()
	got := make(chan *slotHold, 1)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
			s.mu.Lock()
			n := len(s.waiters)
			s.mu.Unlock()
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the first waiter never queued")
				got <- nil
				return
			}
		}
		gcancel()
		if err := <-gerr; err == nil {
			t.Error("a cancelled waiter got a slot")
		}
		h, err := s.acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	// h1 is preempted once the second waiter queues and its slice passed.
	select {
	case <-h1.ctx.Done():
	case <-ctx.Done():
		t.Fatal("the holder was never preempted")
	}
	if !h1.wasPreempted() {
		t.Fatalf("cause %v", context.Cause(h1.ctx))
	}
	h1.release()
	h1.release() // idempotent
	h2 := <-got
	if h2 == nil {
		t.Fatal("no slot for the waiter")
	}
	if h2.wasPreempted() {
		t.Fatal("a hold with no waiter behind it was preempted")
	}
	h2.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) != 0 || len(s.waiters) != 0 || s.preempting != 0 {
		t.Fatalf("held %d waiters %d preempting %d", len(s.held), len(s.waiters), s.preempting)
	}
}
