package coordinator

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestCloseDoesNotWaitForOnDrop: with OnDrop blocked on one of Run's
// goroutines, Close from outside returns at once (Close signals, it never
// waits for a callback), and Run returns ErrClosed once OnDrop has
// returned, the sockets closed by then. Fails on the code before issue 40,
// whose Close from outside waited for Run, which waited for OnDrop.
func TestCloseDoesNotWaitForOnDrop(t *testing.T) {
	inside := make(chan struct{})
	release := make(chan struct{})
	var once atomic.Bool
	cfg := testConfig(1)
	cfg.OnDrop = func(loop.Drop) {
		if !once.CompareAndSwap(false, true) {
			return
		}
		close(inside)
		<-release
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, c.Run)
	t.Cleanup(func() {
		if once.Load() {
			select {
			case <-release:
			default:
				close(release) // a failure below must not leave OnDrop blocked
			}
		}
	})
	p, err := socket.New("PUSH", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Dial(c.BackOutputEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(testCtx(t, 2*reentrytest.Bound), []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	reentrytest.Receive(t, "OnDrop", inside)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if err := reentrytest.Receive(t, "Close while OnDrop is blocked", closed); err != nil {
		t.Fatalf("Close: %v", err)
	}
	close(release)
	if err := run.Result(t, "Run after Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v, want ErrClosed", err)
	}
	if _, err := c.front.Recv(testCtx(t, reentrytest.Bound)); !errors.Is(err, socket.ErrClosed) {
		t.Fatalf("front socket after Run returned: %v, want socket.ErrClosed", err)
	}
}
