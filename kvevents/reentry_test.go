package kvevents

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/vllm"
)

// reentryBound bounds every wait of these tests: a call that deadlocks
// fails the test after it instead of hanging it.
const reentryBound = reentrytest.Bound

// publishUntil publishes on each publisher every few milliseconds until
// ch yields a value (bounded) and returns it.
func publishUntil[T any](t *testing.T, what string, ch <-chan T, pubs ...*Publisher) T {
	t.Helper()
	deadline := time.After(reentryBound)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var n uint64
	for {
		select {
		case v := <-ch:
			return v
		case <-tick.C:
			n++
			for _, p := range pubs {
				p.Publish(storedEvent(n))
			}
		case <-deadline:
			t.Fatalf("%s: nothing within %s (deadlock?)", what, reentryBound)
		}
	}
}

// waitRemoved waits until the sources removed from inside a Handler have
// finished stopping in the background.
func waitRemoved(t *testing.T, sub *Subscriber) {
	t.Helper()
	poll.WaitFor(t, waitTimeout, "background removal", func() bool {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		return len(sub.removing) == 0
	})
}

type removeResult struct {
	stats  SourceStats
	err    error
	ctxErr error
}

// TestHandlerRemovesOwnSource: a Handler calls Stats and then Remove of its
// own source. Both return (the old Subscriber deadlocked here: the Handler
// ran under the source's lock, which Remove took, and Remove waited for the
// source's goroutine, which was the Handler's). The Handler's ctx is
// cancelled by the Remove, nothing more is delivered for the source (not
// even batches already received when the Handler returns) but its
// UpdateDeparted, Stats no longer
// lists it, and Run ends normally.
func TestHandlerRemovesOwnSource(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), false)
	var sub *Subscriber
	var gone atomic.Bool
	var after, departed atomic.Int32
	removed := make(chan removeResult, 1)
	release := make(chan struct{})
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		if u.Kind == UpdateDeparted { // Remove's last call for the source (departed_test.go)
			departed.Add(1)
			return nil
		}
		if gone.Load() {
			after.Add(1)
			return nil
		}
		r := removeResult{stats: sub.Stats()}
		r.err = sub.Remove("e0")
		gone.Store(true)
		r.ctxErr = ctx.Err()
		removed <- r
		// Hold the Handler while the test publishes more: those batches
		// reach the source's queue, and must not be delivered.
		select {
		case <-release:
		case <-time.After(reentryBound):
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
	r := publishUntil(t, "Remove from the Handler", removed, pub)
	if r.err != nil {
		t.Fatalf("Remove(own source) from its Handler: %v", r.err)
	}
	if len(r.stats.Sources) != 1 || r.stats.Sources[0].Name != "e0" {
		t.Fatalf("Stats from the Handler: %+v", r.stats.Sources)
	}
	if !errors.Is(r.ctxErr, context.Canceled) {
		t.Fatalf("the Handler's ctx after Remove of its source: %v, want canceled", r.ctxErr)
	}
	if st := sub.Stats(); len(st.Sources) != 0 {
		t.Fatalf("Stats after Remove lists %+v", st.Sources)
	}
	before := pub.Stats().Published
	for i := uint64(0); i < 20; i++ {
		pub.Publish(storedEvent(1000 + i))
	}
	poll.WaitFor(t, waitTimeout, "20 more published", func() bool { return pub.Stats().Published >= before+20 })
	close(release)
	waitRemoved(t, sub)
	if n := after.Load(); n != 0 {
		t.Fatalf("%d Handler calls for the source after its Remove returned", n)
	}
	poll.WaitFor(t, waitTimeout, "the source's UpdateDeparted", func() bool { return departed.Load() == 1 })
	if err := sub.Remove("e0"); !errors.Is(err, errUnknownSource) {
		t.Fatalf("second Remove: %v", err)
	}
	run.Cancel()
	if err := run.Result(t, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestHandlerClosesSubscriber: a Handler calls Close. Close returns without
// waiting for that Handler, no Handler call follows, Run returns ErrClosed,
// and every goroutine ends (goleak in TestMain).
func TestHandlerClosesSubscriber(t *testing.T) {
	pubs := []*Publisher{newTestPublisher(t, vllm.Latest(), false), newTestPublisher(t, vllm.Latest(), false)}
	var sub *Subscriber
	var closed atomic.Bool
	var after atomic.Int32
	closedCh := make(chan error, 1)
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		if !closed.CompareAndSwap(false, true) {
			// the other source's call already under way may still run;
			// no call may begin once Close has returned.
			after.Add(1)
			return nil
		}
		_ = sub.Stats()
		closedCh <- sub.Close()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pubs {
		if err := sub.Add(Source{Name: string(rune('a' + i)), Live: loopback(p.Endpoint())}); err != nil {
			t.Fatal(err)
		}
	}
	run := reentrytest.Start(t, sub.Run)
	if err := publishUntil(t, "Close from the Handler", closedCh, pubs...); err != nil {
		t.Fatalf("Close from a Handler: %v", err)
	}
	if err := run.Result(t, "Run"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v, want ErrClosed", err)
	}
	if n := after.Load(); n > 1 {
		t.Fatalf("%d Handler calls after Close (at most the other source's one in flight)", n)
	}
	if err := sub.Add(Source{Name: "late", Live: "tcp://127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestHandlersRemoveEachOther: the Handlers of two sources, both in a call
// at once, each Remove the other source. Neither waits for the other (the
// old Subscriber deadlocked: each Remove waited for the other's Handler).
func TestHandlersRemoveEachOther(t *testing.T) {
	pubs := []*Publisher{newTestPublisher(t, vllm.Latest(), false), newTestPublisher(t, vllm.Latest(), false)}
	var sub *Subscriber
	var arrived sync.WaitGroup
	arrived.Add(2)
	var first [2]atomic.Bool
	results := make(chan error, 2)
	other := map[string]string{"p0": "p1", "p1": "p0"}
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		i := 0
		if u.Source == "p1" {
			i = 1
		}
		if !first[i].CompareAndSwap(false, true) {
			return nil
		}
		arrived.Done()
		both := make(chan struct{})
		go func() { arrived.Wait(); close(both) }()
		select {
		case <-both:
		case <-time.After(reentryBound):
			results <- errors.New("the other source's Handler never ran")
			return nil
		}
		results <- sub.Remove(other[u.Source])
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pubs {
		if err := sub.Add(Source{Name: []string{"p0", "p1"}[i], Live: loopback(p.Endpoint())}); err != nil {
			t.Fatal(err)
		}
	}
	run := reentrytest.Start(t, sub.Run)
	for k := 0; k < 2; k++ {
		if err := publishUntil(t, "Remove of the other source", results, pubs...); err != nil {
			t.Fatalf("Remove from a Handler: %v", err)
		}
	}
	waitRemoved(t, sub)
	if st := sub.Stats(); len(st.Sources) != 0 {
		t.Fatalf("sources left: %+v", st.Sources)
	}
	run.Cancel()
	if err := run.Result(t, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestHandlerRemovesOwnSourceDuringReplay: the Remove comes from a Handler
// called by the replay goroutine (a replayed batch), not the receive loop.
func TestHandlerRemovesOwnSourceDuringReplay(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), true)
	for i := 0; i < 50; i++ {
		if err := pub.Publish(storedEvent(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "50 published", func() bool { return pub.Stats().Published == 50 })
	var sub *Subscriber
	var gone atomic.Bool
	removed := make(chan error, 1)
	sub, err := NewSubscriber(Config{Logger: quiet, FromStart: true, Handler: func(ctx context.Context, u Update) error {
		if u.Kind != UpdateBatch || !u.Batch.Replayed || !gone.CompareAndSwap(false, true) {
			return nil
		}
		removed <- sub.Remove("e0")
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint()), Replay: pub.ReplayEndpoint()}); err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, sub.Run)
	if err := publishUntil(t, "Remove from a replayed batch's Handler", removed, pub); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	waitRemoved(t, sub)
	run.Cancel()
	if err := run.Result(t, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestRemoveCancelsBlockedHandler: Remove from outside cancels the source's
// ctx before it waits for the in-flight Handler call, so a Handler blocked
// on its ctx returns and Remove with it.
func TestRemoveCancelsBlockedHandler(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), false)
	inside := make(chan struct{}, 1)
	how := make(chan string, 1)
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(ctx context.Context, u Update) error {
		if u.Kind == UpdateDeparted { // Remove's last call, after the blocked one returned
			return nil
		}
		select {
		case inside <- struct{}{}:
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			how <- "canceled"
		case <-time.After(reentryBound):
			how <- "not canceled within the bound"
		}
		return ctx.Err()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, sub.Run)
	publishUntil(t, "a Handler call", inside, pub)
	if err := sub.Remove("e0"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if h := reentrytest.Receive(t, "the Handler", how); h != "canceled" {
		t.Fatalf("the blocked Handler was %s", h)
	}
	run.Cancel()
	if err := run.Result(t, "Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
