package poll_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// recT records a failure instead of ending the test.
type recT struct{ failed []string }

func (*recT) Helper() {}
func (r *recT) Fatalf(f string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(f, args...))
}

// TestWaitForHolds: a condition that becomes true after a few calls ends
// the wait without a failure, and cond is polled again and again.
func TestWaitForHolds(t *testing.T) {
	var calls atomic.Int32
	var r recT
	poll.WaitFor(&r, time.Minute, "three calls", func() bool { return calls.Add(1) >= 3 })
	if len(r.failed) != 0 || calls.Load() != 3 {
		t.Fatalf("failed %q after %d calls; want no failure after 3", r.failed, calls.Load())
	}
}

// TestWaitForTimesOut: a condition that never holds fails the test with a
// message naming the timeout and what was awaited; the wait is bounded.
func TestWaitForTimesOut(t *testing.T) {
	var r recT
	poll.WaitFor(&r, 20*time.Millisecond, "the impossible", func() bool { return false })
	if len(r.failed) != 1 || r.failed[0] != "timed out after 20ms waiting for the impossible" {
		t.Fatalf("failures %q", r.failed)
	}
}

// TestWaitForCtx: the context bounds the wait; a cancelled one ends it at
// once with the cause, a live one lets the condition come true.
func TestWaitForCtx(t *testing.T) {
	var r recT
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	poll.WaitForCtx(&r, ctx, "a cancelled wait", func() bool { return false })
	if len(r.failed) != 1 || !strings.Contains(r.failed[0], "waiting for a cancelled wait: context canceled") {
		t.Fatalf("failures %q", r.failed)
	}
	r.failed = nil
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls atomic.Int32
	poll.WaitForCtx(&r, ctx, "two calls", func() bool { return calls.Add(1) >= 2 })
	if len(r.failed) != 0 {
		t.Fatalf("failures %q", r.failed)
	}
}

// TestWaitForLastLook: a condition that turns true while the wait sleeps
// past its deadline still counts (cond is asked once more at the end).
func TestWaitForLastLook(t *testing.T) {
	var r recT
	var calls atomic.Int32
	poll.WaitFor(&r, time.Nanosecond, "the second look", func() bool { return calls.Add(1) >= 2 })
	if len(r.failed) != 0 {
		t.Fatalf("failures %q", r.failed)
	}
}

// TestRealT: *testing.T and testing.TB satisfy poll.T.
func TestRealT(t *testing.T) {
	var tb testing.TB = t
	poll.WaitFor(tb, time.Minute, "true", func() bool { return true })
	poll.WaitFor(t, time.Minute, "true", func() bool { return true })
}
