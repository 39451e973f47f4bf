// Package poll is the one way a test waits for a condition: WaitFor polls
// cond until it holds and fails the test when its time is up, so every wait
// is bounded and named ("timed out after 5s waiting for the peer to
// connect"). A test waits for a condition, never sleeps for luck.
//
// Only tests and tools import it (internal/testkit).
package poll

import (
	"context"
	"time"
)

// T is what WaitFor needs of a test: a *testing.T, *testing.B or
// testing.TB is one.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
}

// The poll interval starts at minPoll and doubles up to maxPoll: a
// condition that holds at once costs no sleep worth the name, one that
// takes seconds costs a few hundred calls.
const (
	minPoll = time.Millisecond
	maxPoll = 5 * time.Millisecond
)

// WaitFor calls cond until it returns true and fails t (Fatalf) when
// timeout passes first, naming what it waited for. cond runs on the
// caller's goroutine.
func WaitFor(t T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !until(ctx, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// WaitForCtx is WaitFor bounded by ctx instead of a timeout: it fails t
// when ctx ends (its deadline passes or it is cancelled) before cond holds.
func WaitForCtx(t T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !until(ctx, cond) {
		t.Fatalf("timed out waiting for %s: %v", what, context.Cause(ctx))
	}
}

// until polls cond until it holds (true) or ctx ends (false). cond is
// asked once more after ctx ends, so a condition that became true during
// the last sleep is not reported as a timeout.
func until(ctx context.Context, cond func() bool) bool {
	d := minPoll
	tm := time.NewTimer(d)
	defer tm.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tm.C:
		}
		d = min(2*d, maxPoll)
		tm.Reset(d)
	}
	return true
}
