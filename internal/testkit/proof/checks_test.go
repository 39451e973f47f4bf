package proof

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
)

// quiet returns socket options whose peer-event logs are discarded: the test
// output should show the processes' story, not the probes'.
func quiet() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// valid counts the valid messages the Go peers of a test sent, for the
// accounting of TestCountersAccount.
type valid struct {
	handshakes int // V3 handshakes, each answered
	engineSubs int // engine subscriptions ("\x01") on back publish
	stats      int // stats messages on back output
	frontSubs  int // front-end subscriptions on front publish
}

// harness holds the two processes under test, a front-end subscribed for the
// whole test and never read (it holds the front publish topic, so that other
// front-ends leaving never make the socket report an unsubscription), and the
// count of valid traffic the Go peers sent.
type harness struct {
	c      *coordProc
	l      *listenerProc
	fe     *dppeer.FrontEnd
	sent   valid
	checks int
}

// newHarness connects the harness's front-end to c and waits until it is
// connected.
func newHarness(t *testing.T, ctx context.Context, c *coordProc, l *listenerProc) *harness {
	t.Helper()
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: c.front, Socket: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	h := &harness{c: c, l: l, fe: fe}
	poll.WaitFor(t, checkTimeout, "the front-end to connect", fe.Connected)
	h.sent.frontSubs++
	return h
}

// checkTimeout bounds each step of the after-checks. It is generous on
// purpose: CI runs this package with -race next to every other package's
// tests on two CPUs, and a slow answer is not what these tests are about.
const checkTimeout = 30 * time.Second

// startEngine connects a Go engine to the coordinator and waits for READY:
// the start-up READY for the first engine, a re-subscription's READY after.
// The caller closes it.
func (h *harness) startEngine(t *testing.T, ctx context.Context) *dppeer.Engine {
	t.Helper()
	e, err := dppeer.DialEngine(dppeer.EngineConfig{
		BackPublish: h.c.backPublish, BackOutput: h.c.backOutput, Socket: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := e.WaitReady(wctx); err != nil {
		e.Close()
		t.Fatalf("an engine that subscribed got no READY: %v\ncoordinator log:\n%s", err, h.c.logs())
	}
	h.sent.engineSubs++
	return e
}

// afterChecks is what must still hold after an attack: both processes run,
// a handshake succeeds, an engine that subscribes again gets READY, and the
// stats it sends reach the front-end.
func (h *harness) afterChecks(t *testing.T, ctx context.Context, after string) {
	t.Helper()
	h.checks++
	for _, p := range []*proc{h.c.proc, h.l.proc} {
		if !p.alive() {
			t.Fatalf("after %s: %s exited (%v):\n%s", after, p.name, p.waitErr, p.logs())
		}
	}

	rep, err := handshake.Fetch(ctx, h.l.endpoint, handshake.Request{Variant: handshake.V3}, handshake.ClientOptions{
		ExpectedHash: h.l.hash, ExpectedEngineID: h.l.engineID, Socket: quiet(), Timeout: checkTimeout,
	})
	if err != nil {
		t.Fatalf("after %s: handshake with the listener failed: %v\nlistener log:\n%s", after, err, h.l.logs())
	}
	h.sent.handshakes++
	if rep.Metadata.EngineID != proofEngineID {
		t.Fatalf("after %s: handshake returned engine id %q", after, rep.Metadata.EngineID)
	}

	e := h.startEngine(t, ctx)
	defer e.Close()

	// A fresh front-end sees only publications made after it subscribed
	// (the harness's own front-end holds a backlog). The coordinator keeps
	// each engine's newest (wave, step) and ignores older stats, so the
	// engine sends the current wave, read from the first fresh publication,
	// and a step no earlier peer used.
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: h.c.front, Socket: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	poll.WaitFor(t, checkTimeout, "a front-end to connect", fe.Connected)
	h.sent.frontSubs++
	sctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	_, wave, _, err := fe.NextStats(sctx)
	if err != nil {
		t.Fatalf("after %s: no stats publication reached the front-end: %v", after, err)
	}
	waiting, running := 1000+h.checks, h.checks
	if err := e.SendStats(sctx, 0, waiting, running, wave, 1_000_000+h.checks); err != nil {
		t.Fatalf("after %s: engine could not send stats: %v", after, err)
	}
	h.sent.stats++
	for {
		counts, _, _, err := fe.NextStats(sctx)
		if err != nil {
			t.Fatalf("after %s: the engine's stats [%d %d] never reached the front-end: %v\ncoordinator log:\n%s",
				after, waiting, running, err, h.c.logs())
		}
		if len(counts) == 1 && counts[0] == [2]int{waiting, running} {
			break
		}
	}
	t.Logf("after %s: both processes alive, handshake ok (rtt %v), engine re-subscribed and got READY, stats flow",
		after, rep.RTT.Round(time.Microsecond))
}
