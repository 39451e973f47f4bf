package kvevents

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/vllm"
)

// TestRemoveAndCloseDoNotWaitForHandler: with a Handler blocked (deaf to
// its ctx) on the source's goroutine, Remove and Close from outside return
// at once: the Handler runs under no lock of the Subscriber's (the old code
// held the source's lock across it, which Close's stop took) and neither
// waits for a callback. No Handler call begins after Remove; Run returns
// ErrClosed once the blocked call has returned. Fails on the code before
// issue 40 (Remove and Close from outside waited for the Handler).
func TestRemoveAndCloseDoNotWaitForHandler(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), false)
	inside := make(chan struct{})
	release := make(chan struct{})
	var calls, late atomic.Int64
	var removed atomic.Bool
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		if calls.Add(1) > 1 {
			if removed.Load() {
				late.Add(1)
			}
			return nil
		}
		close(inside)
		<-release
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, sub.Run)
	publishUntil(t, "a Handler call", inside, pub)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release) // a failure below must not leave the Handler blocked
		}
	})

	done := make(chan error, 1)
	go func() { done <- sub.Remove("e0") }()
	if err := reentrytest.Receive(t, "Remove while the Handler is blocked", done); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	removed.Store(true)
	go func() { done <- sub.Close() }()
	if err := reentrytest.Receive(t, "Close while the Handler is blocked", done); err != nil {
		t.Fatalf("Close: %v", err)
	}
	pub.Publish(storedEvent(1 << 20))
	close(release)
	if err := run.Result(t, "Run after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d Handler calls began after Remove returned", n)
	}
}

// TestHandlerRunsWithoutLocks: every lock of the Subscriber and of the
// source is free while the Handler runs, for a live batch and for the
// reset a Resync delivers. Fails on the code before issue 40, which called
// the Handler with the source's mu held.
func TestHandlerRunsWithoutLocks(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), false)
	var sub *Subscriber
	type seen struct {
		kind string
		held []string
	}
	got := make(chan seen, 16)
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		sub.mu.Lock() // Run does not hold it while sources deliver
		so := sub.sources[u.Source]
		sub.mu.Unlock()
		var held []string
		for name, mu := range map[string]*sync.Mutex{"so.mu": &so.mu, "so.smu": &so.smu, "so.bgMu": &so.bgMu} {
			if !mu.TryLock() {
				held = append(held, name)
				continue
			}
			mu.Unlock()
		}
		select {
		case got <- seen{u.Kind, held}:
		case <-ctx.Done():
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, sub.Run)
	first := publishUntil(t, "a Handler call", got, pub)
	if first.kind != UpdateBatch || len(first.held) != 0 {
		t.Fatalf("Handler(%s) ran with %v held", first.kind, first.held)
	}
	if err := sub.Resync("e0"); err != nil {
		t.Fatal(err)
	}
	for {
		s := reentrytest.Receive(t, "the Resync's reset", got)
		if len(s.held) != 0 {
			t.Fatalf("Handler(%s) ran with %v held", s.kind, s.held)
		}
		if s.kind == UpdateReset {
			break
		}
	}
	run.Cancel()
	if err := run.Result(t, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
