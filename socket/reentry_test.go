package socket

import (
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// checkClosed checks a socket closed from its own callback: Recv fails at
// once with ErrClosed, and a Close from outside returns (it waits for the
// goroutines the callback's Close left to finish in the background).
func checkClosed(t *testing.T, s *Socket) {
	t.Helper()
	ctx := testCtx(t, reentrytest.Bound)
	if _, err := s.Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after Close from a callback: %v", err)
	}
	reentrytest.CloseAgain(t, s.Close)
}

// newProbe returns the probe of a socket assigned to *s later.
func newProbe(s **Socket) *reentrytest.Probe[Stats] {
	return reentrytest.NewProbe(func() Stats { return (*s).Stats() }, func() error { return (*s).Close() })
}

// TestOnEventCallsStatsAndClose: OnEvent, on the connected event, calls
// Stats and then Close. Both return (Close used to wait for the socket's
// goroutines, the callback's among them, and never returned).
func TestOnEventCallsStatsAndClose(t *testing.T) {
	var s *Socket
	probe := newProbe(&s)
	s = mustSocket(t, NewPull, func(o *Options) {
		o.OnEvent = func(e Event) {
			if e.Kind != EventConnected {
				return
			}
			probe.Act()
		}
	})
	ep := mustBind(t, s)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	st := probe.Closed(t, "OnEvent(connected)")
	if st.Connects != 1 {
		t.Fatalf("Stats from OnEvent: Connects %d, want 1", st.Connects)
	}
	checkClosed(t, s)
}

// TestOnEventDisconnectedCloses: Close from the disconnected event, which
// the socket emits while it takes the peer down.
func TestOnEventDisconnectedCloses(t *testing.T) {
	var s *Socket
	probe := newProbe(&s)
	s = mustSocket(t, NewPull, func(o *Options) {
		o.OnEvent = func(e Event) {
			if e.Kind != EventDisconnected {
				return
			}
			probe.Act()
		}
	})
	ep := mustBind(t, s)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	waitPeers(t, testCtx(t, reentrytest.Bound), s, 1)
	push.Close()
	probe.Closed(t, "OnEvent(disconnected)")
	checkClosed(t, s)
}

// TestGuardOnViolationCloses: Close from the Guard's OnViolation hook,
// called on the listener's handshake goroutine for a peer with a bad
// greeting.
func TestGuardOnViolationCloses(t *testing.T) {
	var s *Socket
	probe := newProbe(&s)
	s = mustSocket(t, NewPull, func(o *Options) {
		o.Logger = slog.New(slog.DiscardHandler)
		o.Guard.OnViolation = func(zmtpguard.Violation) { probe.Act() }
	})
	ep := mustBind(t, s)
	c, err := net.DialTimeout("tcp", ep[len("tcp://"):], reentrytest.Bound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	probe.Closed(t, "Guard.OnViolation")
	checkClosed(t, s)
}
