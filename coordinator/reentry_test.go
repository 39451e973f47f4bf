package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestOnDropMayCloseAndStat: OnDrop (here for a junk frame on the back
// output socket) calls Stats and Close. Both return (Close used to wait for
// Run, which waited for OnDrop: a deadlock, documented as forbidden), Run
// returns ErrClosed, and a later Close from outside returns too.
func TestOnDropMayCloseAndStat(t *testing.T) {
	const bound = 10 * time.Second
	type result struct {
		stats Stats
		err   error
	}
	var c *Coordinator
	res := make(chan result, 1)
	cfg := testConfig(1)
	cfg.OnDrop = func(loop.Drop) {
		x := result{stats: c.Stats()}
		x.err = c.Close()
		select {
		case res <- x:
		default:
		}
	}
	var err error
	c, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	p, err := socket.New("PUSH", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Dial(c.BackOutputEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	var x result
	select {
	case x = <-res:
	case <-time.After(bound):
		t.Fatalf("Stats and Close from OnDrop: no return within %s (deadlock?)", bound)
	}
	if x.err != nil {
		t.Fatalf("Close from OnDrop: %v", x.err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close from OnDrop: %v, want ErrClosed", err)
		}
	case <-time.After(bound):
		t.Fatalf("Run did not return within %s of Close from OnDrop", bound)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from outside: %v", err)
		}
	case <-time.After(bound):
		t.Fatalf("Close from outside did not return within %s", bound)
	}
}
