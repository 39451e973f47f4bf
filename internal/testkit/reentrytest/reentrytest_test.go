package reentrytest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a toy object whose callback runs on its Run goroutine and whose
// Close waits for Run unless called from the callback.
type server struct {
	mu       sync.Mutex
	closed   bool
	stop     chan struct{}
	done     chan struct{}
	callback func()
	calls    int
}

var errClosed = errors.New("closed")

func newServer() *server { return &server{stop: make(chan struct{}), done: make(chan struct{})} }

func (s *server) Stats() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

func (s *server) Run(ctx context.Context) error {
	defer close(s.done)
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	s.callback()
	select {
	case <-s.stop:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *server) closeInside() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.stop)
	}
	return nil
}

func (s *server) Close() error {
	err := s.closeInside()
	<-s.done
	return err
}

// TestShape runs the whole shape on the toy server: the callback's Stats
// and Close return, Run returns the closed error, a second Close returns.
func TestShape(t *testing.T) {
	var s *server
	p := NewProbe(func() int { return s.Stats() }, func() error { return s.closeInside() })
	s = newServer()
	s.callback = p.Act
	run := Start(t, s.Run)
	if n := p.Closed(t, "callback"); n != 1 {
		t.Fatalf("Stats from the callback: %d, want 1", n)
	}
	if err := run.Result(t, "Run after Close from the callback"); !errors.Is(err, errClosed) {
		t.Fatalf("Run: %v, want errClosed", err)
	}
	CloseAgain(t, s.Close)
	if got := Receive(t, "a value", func() <-chan int { c := make(chan int, 1); c <- 7; return c }()); got != 7 {
		t.Fatalf("Receive = %d", got)
	}
}

// TestProbeKeepsFirst: a second Act neither blocks nor replaces the first
// result.
func TestProbeKeepsFirst(t *testing.T) {
	n := 0
	p := NewProbe(func() int { n++; return n }, func() error { return nil })
	p.Act()
	p.Act()
	if r := p.Wait(t, "twice"); r.Stats != 1 || r.Err != nil {
		t.Fatalf("Wait = %+v, want the first call's", r)
	}
}

// TestCancel: Cancel ends the run function's context.
func TestCancel(t *testing.T) {
	run := Start(t, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	run.Cancel()
	if err := run.Result(t, "Run"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after Cancel: %v", err)
	}
}
