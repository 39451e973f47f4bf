// Package reentrytest is the one shape of zmqguard's re-entrancy tests: a
// callback calls the Stats and Close of the object running it, and every
// wait that would hang on a deadlock is bounded.
//
//	var r *outputs.Receiver
//	probe := reentrytest.NewProbe(func() outputs.Stats { return r.Stats() }, func() error { return r.Close() })
//	cfg.OnDrop = func(loop.Drop) { probe.Act() }
//	r, _ = outputs.New(cfg)
//	run := reentrytest.Start(t, r.Run)
//	// ... make the callback run ...
//	probe.Closed(t, "OnDrop")
//	if err := run.Result(t, "Run after Close from OnDrop"); !errors.Is(err, loop.ErrLoopClosed) {
//		t.Fatalf("Run after Close from OnDrop: %v", err)
//	}
//	reentrytest.CloseAgain(t, r.Close)
//
// The packages that run user callbacks (socket, handshake, coordinator,
// outputs, kvevents) test their Close and Remove from inside each callback
// with it; what makes those calls safe is that no callback runs under a
// component's lock and Close never waits for the goroutine running one.
package reentrytest

import (
	"context"
	"time"
)

// TB is the part of testing.TB the helpers use; a *testing.T is one.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// Bound bounds every wait of a re-entrancy test: a call that deadlocks
// fails the test after it instead of hanging it.
const Bound = 10 * time.Second

// Receive waits for one value on ch and returns it, failing t after Bound.
func Receive[T any](t TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Bound):
		t.Fatalf("%s: nothing within %s (deadlock?)", what, Bound)
	}
	var zero T
	return zero
}

// Result is what a callback saw: the object's Stats, then Close's error.
type Result[S any] struct {
	Stats S
	Err   error
}

// Probe makes a callback call Stats and then Close of the object running
// it, and hands the result to the test.
type Probe[S any] struct {
	stats func() S
	close func() error
	ch    chan Result[S]
}

// NewProbe returns a Probe calling stats and close; they are usually
// closures over a variable the object is assigned to after its callbacks
// were configured.
func NewProbe[S any](stats func() S, close func() error) *Probe[S] {
	return &Probe[S]{stats: stats, close: close, ch: make(chan Result[S], 1)}
}

// Act calls Stats and then Close. Call it from inside the callback under
// test; the first call's result is kept, later ones are dropped.
func (p *Probe[S]) Act() {
	r := Result[S]{Stats: p.stats()}
	r.Err = p.close()
	select {
	case p.ch <- r:
	default:
	}
}

// Wait returns the result of the first Act, failing t if Stats and Close
// did not both return within Bound.
func (p *Probe[S]) Wait(t TB, from string) Result[S] {
	t.Helper()
	select {
	case r := <-p.ch:
		return r
	case <-time.After(Bound):
		t.Fatalf("Stats and Close from %s: no return within %s (deadlock?)", from, Bound)
	}
	return Result[S]{}
}

// Closed is Wait followed by the check that Close returned nil; it returns
// the Stats the callback saw.
func (p *Probe[S]) Closed(t TB, from string) S {
	t.Helper()
	r := p.Wait(t, from)
	if r.Err != nil {
		t.Fatalf("Close from %s: %v", from, r.Err)
	}
	return r.Stats
}

// Run is a run function (Run, Serve) started by Start.
type Run struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// Start runs run in a goroutine with a context that ends after 6 Bounds.
// A cleanup cancels that context and waits, bounded, for run to return.
func Start(t TB, run func(context.Context) error) *Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*Bound)
	r := &Run{done: make(chan struct{}), cancel: cancel}
	go func() { r.err = run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(Bound):
			t.Errorf("the run function did not return within %s of its ctx's end", Bound)
		}
	})
	return r
}

// Cancel ends the run function's context.
func (r *Run) Cancel() { r.cancel() }

// Result waits for the run function to return, failing t after Bound, and
// returns its error.
func (r *Run) Result(t TB, what string) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(Bound):
		t.Fatalf("%s: no return within %s (deadlock?)", what, Bound)
	}
	return nil
}

// CloseAgain checks that a Close from outside, after a Close from a
// callback, returns nil within Bound.
func CloseAgain(t TB, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close from outside: %v", err)
		}
	case <-time.After(Bound):
		t.Fatalf("Close from outside did not return within %s", Bound)
	}
}
