package socket

import (
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// callbackBound bounds the waits of the re-entrancy tests: a Close that
// deadlocks fails the test after it instead of hanging it.
const callbackBound = 10 * time.Second

type closeResult struct {
	stats Stats
	err   error
}

func boundedResult(t *testing.T, what string, ch <-chan closeResult) closeResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(callbackBound):
		t.Fatalf("%s: no return within %s (deadlock?)", what, callbackBound)
	}
	return closeResult{}
}

// checkClosed checks a socket closed from its own callback: Recv fails at
// once with ErrClosed, and a Close from outside returns (it waits for the
// goroutines the callback's Close left to finish in the background).
func checkClosed(t *testing.T, s *Socket) {
	t.Helper()
	ctx := testCtx(t, callbackBound)
	if _, err := s.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close from a callback: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second Close: %v", err)
		}
	case <-time.After(callbackBound):
		t.Fatalf("Close from outside did not return within %s", callbackBound)
	}
}

// TestOnEventCallsStatsAndClose: OnEvent, on the connected event, calls
// Stats and then Close. Both return (Close used to wait for the socket's
// goroutines, the callback's among them, and never returned).
func TestOnEventCallsStatsAndClose(t *testing.T) {
	res := make(chan closeResult, 1)
	var s *Socket
	s = mustSocket(t, NewPull, func(o *Options) {
		o.OnEvent = func(e Event) {
			if e.Kind != EventConnected {
				return
			}
			r := closeResult{stats: s.Stats()}
			r.err = s.Close()
			select {
			case res <- r:
			default:
			}
		}
	})
	ep := mustBind(t, s)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	r := boundedResult(t, "Close from OnEvent(connected)", res)
	if r.err != nil {
		t.Fatalf("Close from OnEvent: %v", r.err)
	}
	if r.stats.Connects != 1 {
		t.Fatalf("Stats from OnEvent: Connects %d, want 1", r.stats.Connects)
	}
	checkClosed(t, s)
}

// TestOnEventDisconnectedCloses: Close from the disconnected event, which
// the socket emits while it takes the peer down.
func TestOnEventDisconnectedCloses(t *testing.T) {
	res := make(chan closeResult, 1)
	var s *Socket
	s = mustSocket(t, NewPull, func(o *Options) {
		o.OnEvent = func(e Event) {
			if e.Kind != EventDisconnected {
				return
			}
			r := closeResult{stats: s.Stats()}
			r.err = s.Close()
			select {
			case res <- r:
			default:
			}
		}
	})
	ep := mustBind(t, s)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	waitPeers(t, testCtx(t, callbackBound), s, 1)
	push.Close()
	r := boundedResult(t, "Close from OnEvent(disconnected)", res)
	if r.err != nil {
		t.Fatalf("Close from OnEvent: %v", r.err)
	}
	checkClosed(t, s)
}

// TestGuardOnViolationCloses: Close from the Guard's OnViolation hook,
// called on the listener's handshake goroutine for a peer with a bad
// greeting.
func TestGuardOnViolationCloses(t *testing.T) {
	res := make(chan closeResult, 1)
	var s *Socket
	s = mustSocket(t, NewPull, func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.Guard.OnViolation = func(v zmtpguard.Violation) {
			r := closeResult{stats: s.Stats()}
			r.err = s.Close()
			select {
			case res <- r:
			default:
			}
		}
	})
	ep := mustBind(t, s)
	c, err := net.DialTimeout("tcp", ep[len("tcp://"):], callbackBound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := boundedResult(t, "Close from Guard.OnViolation", res)
	if r.err != nil {
		t.Fatalf("Close from OnViolation: %v", r.err)
	}
	checkClosed(t, s)
}
