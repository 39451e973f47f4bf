package socket

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
)

// TestCloseDoesNotWaitForCallback: Close from outside returns while
// Options.OnEvent is blocked on one of the socket's goroutines (Close
// signals, it never waits for a callback), and Shutdown waits until that
// callback has returned and the goroutine ended. Fails on the code before
// issue 40, whose Close from outside waited for every goroutine, the
// blocked callback's included.
func TestCloseDoesNotWaitForCallback(t *testing.T) {
	inside := make(chan struct{})
	release := make(chan struct{})
	var once atomic.Bool
	s := mustSocket(t, NewPull, func(o *Options) {
		o.OnEvent = func(e Event) {
			if e.Kind != EventConnected || !once.CompareAndSwap(false, true) {
				return
			}
			close(inside)
			<-release
		}
	})
	ep := mustBind(t, s)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	reentrytest.Receive(t, "OnEvent(connected)", inside)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if err := reentrytest.Receive(t, "Close while OnEvent is blocked", closed); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Recv(testCtx(t, reentrytest.Bound)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	// Shutdown waits for the blocked callback: not done before release.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := s.Shutdown(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with OnEvent blocked: %v, want the ctx's deadline", err)
	}
	close(release)
	if err := s.Shutdown(testCtx(t, reentrytest.Bound)); err != nil {
		t.Fatalf("Shutdown after OnEvent returned: %v", err)
	}
}

// TestCloseFreesAddress: once Close has returned the bound address is
// free (the OS listener closes in Close; the rest of the shutdown goes on
// in the background), so a new socket binds it at once.
func TestCloseFreesAddress(t *testing.T) {
	s := mustSocket(t, NewPull)
	ep := mustBind(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustSocket(t, NewPull)
	if err := again.Bind(ep); err != nil {
		t.Fatalf("Bind %s after Close returned: %v", ep, err)
	}
}
