package coordinator

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/socket"
)

// testCtx returns a context that ends after d or at the end of the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var quiet = slog.New(slog.DiscardHandler)

// testSocketOptions reconnect fast, so dialers find a coordinator that
// binds a moment later without slowing the tests down.
func testSocketOptions() socket.Options {
	o := socket.DefaultOptions()
	o.ReconnectMin = 10 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	o.Logger = quiet
	return o
}

func testConfig(engines int) Config {
	return Config{
		Front:         "tcp://127.0.0.1:0",
		BackOutput:    "tcp://127.0.0.1:0",
		BackPublish:   "tcp://127.0.0.1:0",
		Engines:       engines,
		StatsInterval: 10 * time.Millisecond,
		IdleInterval:  200 * time.Millisecond,
		Socket:        testSocketOptions(),
		Logger:        quiet,
	}
}

// harness is a coordinator running in the background for one test.
type harness struct {
	c      *Coordinator
	cancel context.CancelFunc
	done   chan error
}

// startCoordinator creates and runs a coordinator; at the end of the test
// it cancels Run, checks that Run returned nil, and closes it.
func startCoordinator(t *testing.T, cfg Config) *harness {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { h.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run returned %v after cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

// runErr returns Run's error if it has ended, for failure messages.
func (h *harness) failIfEnded(t testing.TB) {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		t.Fatalf("coordinator Run ended: %v", err)
	default:
	}
}

func (h *harness) engineConfig() dppeer.EngineConfig {
	return dppeer.EngineConfig{BackPublish: h.c.BackPublishEndpoint(), BackOutput: h.c.BackOutputEndpoint(), Socket: testSocketOptions()}
}

func dialEngine(t *testing.T, h *harness) *dppeer.Engine {
	t.Helper()
	e, err := dppeer.DialEngine(h.engineConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// readyEngines dials n engines and waits for READY at each.
func readyEngines(t *testing.T, ctx context.Context, h *harness, n int) []*dppeer.Engine {
	t.Helper()
	es := make([]*dppeer.Engine, n)
	for i := range es {
		es[i] = dialEngine(t, h)
	}
	for i, e := range es {
		if err := e.WaitReady(ctx); err != nil {
			h.failIfEnded(t)
			t.Fatalf("engine %d: READY: %v", i, err)
		}
	}
	return es
}

func dialFront(t *testing.T, h *harness) *dppeer.FrontEnd {
	t.Helper()
	f, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: h.c.FrontEndpoint(), Socket: testSocketOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// Wake and Scale refuse to send before the connection is up: wait for
	// it, so a test's first wake is never lost to a slow start.
	deadline := time.Now().Add(20 * time.Second)
	for !f.Connected() {
		if time.Now().After(deadline) {
			t.Fatal("front-end not connected to the coordinator after 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return f
}

// waitCounts reads publications until a stats publication with counts
// want arrives, calling seen (if set) on every stats publication read.
func waitCounts(t *testing.T, ctx context.Context, h *harness, f *dppeer.FrontEnd, want [][2]int, seen func([][2]int)) dpwire.Publication {
	t.Helper()
	for {
		p, err := f.Next(ctx)
		if err != nil {
			h.failIfEnded(t)
			t.Fatalf("waiting for counts %v: %v (snapshot %+v)", want, err, h.c.stateSnapshot())
		}
		if !p.HasCounts {
			continue
		}
		got := p.Counts()
		if seen != nil {
			seen(got)
		}
		if slices.Equal(got, want) {
			return p
		}
	}
}

// waitWave reads publications until a wave publication (nil, wave,
// running) arrives.
func waitWave(t *testing.T, ctx context.Context, h *harness, f *dppeer.FrontEnd, wave int, running bool) {
	t.Helper()
	for {
		p, err := f.Next(ctx)
		if err != nil {
			h.failIfEnded(t)
			t.Fatalf("waiting for wave publication (%d, %v): %v (snapshot %+v)", wave, running, err, h.c.stateSnapshot())
		}
		if !p.HasCounts && int(p.Wave) == wave && p.Running == running {
			return
		}
	}
}

// expectStartWave checks the next START_DP_WAVE an engine receives.
func expectStartWave(t *testing.T, ctx context.Context, e *dppeer.Engine, i, wave int, exclude *int) {
	t.Helper()
	w, x, err := e.NextStartWave(ctx)
	if err != nil {
		t.Fatalf("engine %d: START_DP_WAVE: %v", i, err)
	}
	if w != wave || (x == nil) != (exclude == nil) || (x != nil && *x != *exclude) {
		t.Fatalf("engine %d: START_DP_WAVE(%d, %v), want (%d, %v)", i, w, ptrText(x), wave, ptrText(exclude))
	}
}

func ptrText(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func intp(i int) *int { return &i }

// dropsOf returns the non-zero counts of d, keyed by reason.
func dropsOf(d decodeguard.Counts) map[decodeguard.Reason]uint64 {
	m := map[decodeguard.Reason]uint64{}
	for r, v := range d {
		if v != 0 {
			m[decodeguard.Reason(r)] = v
		}
	}
	return m
}

func sameDrops(d decodeguard.Counts, want map[decodeguard.Reason]uint64) bool {
	got := dropsOf(d)
	if len(got) != len(want) {
		return false
	}
	for r, v := range want {
		if got[r] != v {
			return false
		}
	}
	return true
}

// docs/protocol.md §2 front-end and publication vectors.
const (
	vecScale4        = "92b05343414c455f454c41535449435f455004"
	vecWakeNil7      = "92c007"
	vecWake2_7       = "920207"
	vecWakeIdentity  = "92c402020007"
	vecStatsPublish  = "939292050392000107c3"
	vecWavePublish   = "93c007c2"
	vecStartDPWave72 = "920702"
)
