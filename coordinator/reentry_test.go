package coordinator

import (
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestOnDropMayCloseAndStat: OnDrop (here for a junk frame on the back
// output socket) calls Stats and Close. Both return (Close used to wait for
// Run, which waited for OnDrop: a deadlock, documented as forbidden), Run
// returns ErrClosed, and a later Close from outside returns too.
func TestOnDropMayCloseAndStat(t *testing.T) {
	var c *Coordinator
	probe := reentrytest.NewProbe(func() Stats { return c.Stats() }, func() error { return c.Close() })
	cfg := testConfig(1)
	cfg.OnDrop = func(loop.Drop) { probe.Act() }
	var err error
	c, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := reentrytest.Start(t, c.Run)
	p, err := socket.New("PUSH", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Dial(c.BackOutputEndpoint()); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t, 2*reentrytest.Bound)
	if err := p.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	probe.Closed(t, "OnDrop")
	if err := run.Result(t, "Run after Close from OnDrop"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close from OnDrop: %v, want ErrClosed", err)
	}
	reentrytest.CloseAgain(t, c.Close)
}
