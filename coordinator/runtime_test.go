package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// TestSeedUndecodableEngineFrame is the seed's first coordinator test: a
// garbage frame (an int, msgspec's "Expected array, got int") pushed to the
// back output socket is dropped, and the next valid stats are published to
// the front-ends.
func TestSeedUndecodableEngineFrame(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	var mu sync.Mutex
	var drops []loop.Drop
	cfg := testConfig(1)
	cfg.OnDrop = func(d loop.Drop) {
		mu.Lock()
		d.Prefix = nil // aliases the frame
		drops = append(drops, d)
		mu.Unlock()
	}
	h := startCoordinator(t, cfg)
	f := dialFront(t, h)
	e := readyEngines(t, ctx, h, 1)[0]

	if err := e.SendRaw(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	if err := e.SendStats(ctx, 0, 5, 3, 0, 1); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{5, 3}}, nil)

	st := h.c.Stats()
	if !sameDrops(st.BackOutput.Drops, map[decodeguard.Reason]uint64{decodeguard.ReasonDecode: 1}) || st.Dropped != 1 {
		t.Fatalf("drops %+v, total %d", dropsOf(st.BackOutput.Drops), st.Dropped)
	}
	if st.StatsApplied != 1 || st.BackOutput.Received != 2 || st.BackOutput.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(drops) != 1 || drops[0].Loop != LoopBackOutput || drops[0].Reason != decodeguard.ReasonDecode ||
		drops[0].Stage != "decode" || drops[0].Length != 1 {
		t.Fatalf("OnDrop saw %+v", drops)
	}
}

// TestSeedStraySubscriberBeforeEngines is the seed's second test, extended:
// a SUB subscribing to "probe" and a peer sending junk reach the back
// publish socket before the engines; start-up skips them (counted) and
// every engine still receives READY.
func TestSeedStraySubscriberBeforeEngines(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, testConfig(3))

	stray, err := socket.New("SUB", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	if err := stray.Subscribe([]byte("probe")); err != nil {
		t.Fatal(err)
	}
	if err := stray.Dial(h.c.BackPublishEndpoint()); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the stray subscription to be dropped", func() bool {
		return h.c.Stats().BackPublish.Drops[decodeguard.ReasonValidate] == 1
	})

	junk := junkXSub(t, ctx, h.c.BackPublishEndpoint())
	for _, b := range [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), {0x45}, {0x02}} {
		if err := junk.Send(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := junk.Send(ctx, []byte("\x01"), []byte("two frames")); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the junk to be dropped", func() bool {
		return h.c.Stats().BackPublish.Dropped == 5
	})
	if snap := h.c.stateSnapshot(); snap.Started || snap.Subscribed != 0 {
		t.Fatalf("stray messages counted as engines: %+v", snap)
	}

	// A subscriber that leaves during start-up: its subscription still
	// counts (as in vLLM; the XPUB's "\x00" for it is ignored).
	ghost, err := socket.New("SUB", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := ghost.Subscribe(nil); err != nil {
		t.Fatal(err)
	}
	if err := ghost.Dial(h.c.BackPublishEndpoint()); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the ghost's subscription", func() bool { return h.c.stateSnapshot().Subscribed == 1 })
	ghost.Close()
	poll.WaitForCtx(t, ctx, "the ghost's unsubscription", func() bool { return h.c.Stats().BackUnsubscribed == 1 })

	readyEngines(t, ctx, h, 2)
	st := h.c.Stats()
	want := map[decodeguard.Reason]uint64{decodeguard.ReasonValidate: 1, decodeguard.ReasonDecode: 3, decodeguard.ReasonEnvelope: 1}
	if !st.Started || st.Subscribed != 3 || st.ReadySent != 1 || !sameDrops(st.BackPublish.Drops, want) {
		t.Fatalf("after start-up: %+v drops %v", st, dropsOf(st.BackPublish.Drops))
	}
}

// junkXSub returns an XSUB connected to endpoint: what it sends arrives at
// an XPUB as data (or, for "\x01..." / "\x00...", as subscriptions).
func junkXSub(t *testing.T, ctx context.Context, endpoint string) *socket.Socket {
	t.Helper()
	s, err := socket.New("XSUB", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the junk XSUB to connect", func() bool { return s.Stats().Peers == 1 })
	return s
}

// junkPush returns a PUSH connected to endpoint.
func junkPush(t *testing.T, endpoint string) *socket.Socket {
	t.Helper()
	s, err := socket.New("PUSH", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStatsFlow(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, oldestConfig(2))
	f := dialFront(t, h)
	es := readyEngines(t, ctx, h, 2)
	// Before any stats: zeros.
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}}, nil)
	if err := es[0].SendStats(ctx, 0, 5, 3, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := es[1].SendStats(ctx, 1, 0, 1, 0, 1); err != nil {
		t.Fatal(err)
	}
	p := waitCounts(t, ctx, h, f, [][2]int{{5, 3}, {0, 1}}, nil)
	if p.KV || p.Wave != 0 || p.Running {
		t.Fatalf("publication %+v", p)
	}
	snap := h.c.stateSnapshot()
	if len(snap.Loads) != 2 || snap.Loads[0].Waiting != 5 || snap.Loads[1].Running != 1 || !snap.Started {
		t.Fatalf("snapshot %+v", snap)
	}
	st := h.c.Stats()
	if st.StatsApplied != 2 || st.StatsPublished < 2 || st.Dropped != 0 || st.Engines != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Stats carries the per-engine loads, the same the publication carries.
	if len(st.Loads) != 2 || st.Loads[0] != (EngineLoad{Waiting: 5, Running: 3}) || st.Loads[1] != (EngineLoad{Running: 1}) {
		t.Fatalf("Stats().Loads %+v", st.Loads)
	}
	if j, err := json.Marshal(st.Loads[0]); err != nil || string(j) != `{"waiting":5,"running":3,"kv_cache_usage":0}` {
		t.Fatalf("loads JSON %s %v", j, err)
	}
}

// TestLatestStatsLayoutLive checks the current-vLLM layout (vLLM PR #49204) end to end.
func TestLatestStatsLayoutLive(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	cfg := testConfig(1)
	cfg.Release = vllm.Latest()
	h := startCoordinator(t, cfg)
	f := dialFront(t, h)
	e := readyEngines(t, ctx, h, 1)[0]
	m := &enginecore.Header{HasStats: true, Stats: enginecore.SchedulerStats{NumWaitingReqs: 2, NumRunningReqs: 4, KVCacheUsage: 0.25, StepCounter: 1}}
	if err := e.SendOutputs(ctx, m); err != nil {
		t.Fatal(err)
	}
	p := waitCounts(t, ctx, h, f, [][2]int{{2, 4}}, nil)
	if !p.KV || p.Loads[0].KVCacheUsage != 0.25 {
		t.Fatalf("publication %+v", p)
	}
}

// TestStatsOrderingLive: stale stats from an engine (an older (wave, step))
// never make its counts go backwards.
func TestStatsOrderingLive(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, testConfig(1))
	f := dialFront(t, h)
	e := readyEngines(t, ctx, h, 1)[0]
	for _, s := range []struct{ waiting, wave, step int }{
		{5, 1, 5},
		{9, 1, 3}, // stale: older step
		{9, 0, 7}, // stale: older wave
		{2, 1, 6},
	} {
		if err := e.SendStats(ctx, 0, s.waiting, 1, s.wave, s.step); err != nil {
			t.Fatal(err)
		}
	}
	waitCounts(t, ctx, h, f, [][2]int{{2, 1}}, func(c [][2]int) {
		if c[0][0] == 9 {
			t.Errorf("stale counts published: %v", c)
		}
	})
	if st := h.c.Stats(); st.StaleStats != 2 || st.StatsApplied != 2 {
		t.Fatalf("stale %d applied %d", st.StaleStats, st.StatsApplied)
	}
}

// TestWaveRoundTrip drives the wave machine through the sockets: a
// front-end wake-up, rank 0's wave_complete, an engine's start_wave, a
// wake-up while running (ignored) and a stale wake-up (no exclusion).
func TestWaveRoundTrip(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, oldestConfig(2))
	f := dialFront(t, h)
	es := readyEngines(t, ctx, h, 2)
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}}, nil) // connected and subscribed

	// A request for engine 1 while paused: wake the others.
	if err := f.WakeIdentity(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		expectStartWave(t, ctx, e, i, 0, intp(1))
	}
	waitWave(t, ctx, h, f, 0, true)

	// Rank 0 reports the end of wave 0.
	if err := es[0].SendWaveComplete(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	waitWave(t, ctx, h, f, 1, false)
	if s := h.c.stateSnapshot(); s.Wave != 1 || s.Running {
		t.Fatalf("after wave_complete: %+v", s)
	}

	// Engine 1 got a request for wave 3 while paused.
	if err := es[1].SendStartWave(ctx, 1, 3); err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		expectStartWave(t, ctx, e, i, 3, intp(1))
	}
	waitWave(t, ctx, h, f, 3, true)

	// A wake-up while running changes nothing; wave 3 completes; a wake-up
	// for a stale wave (2 < 4) wakes every engine, the exclusion dropped.
	if err := f.Wake(ctx, intp(0), 3); err != nil {
		t.Fatal(err)
	}
	if err := es[0].SendWaveComplete(ctx, 0, 3); err != nil {
		t.Fatal(err)
	}
	waitWave(t, ctx, h, f, 4, false)
	if err := f.Wake(ctx, intp(1), 2); err != nil {
		t.Fatal(err)
	}
	for i, e := range es {
		expectStartWave(t, ctx, e, i, 4, nil) // not a START_DP_WAVE for the ignored wake
	}
	waitWave(t, ctx, h, f, 4, true)
	if st := h.c.Stats(); st.StartWaveSent != 3 || st.WavePublished != 5 || st.Dropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestElasticResizeLive: SCALE_ELASTIC_EP grows the engine list (a new
// engine subscribes and gets READY, its stats are taken; growing while
// running pauses, as vLLM does) and shrinks it (the removed engine's stats
// are unknown-rank drops).
func TestElasticResizeLive(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, oldestConfig(2))
	f := dialFront(t, h)
	es := readyEngines(t, ctx, h, 2)
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}}, nil)
	if err := f.Wake(ctx, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitWave(t, ctx, h, f, 0, true)

	if err := f.Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waitWave(t, ctx, h, f, 0, false)
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}, {0, 0}}, nil)
	e2 := dialEngine(t, h)
	if err := e2.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e2.SendStats(ctx, 2, 7, 7, 0, 1); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}, {7, 7}}, nil)

	if err := f.Scale(ctx, 1); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}}, nil)
	if err := e2.SendStats(ctx, 2, 8, 8, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := es[0].SendStats(ctx, 0, 1, 1, 0, 1); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{1, 1}}, nil)
	poll.WaitForCtx(t, ctx, "the removed engine's stats to be dropped", func() bool {
		return h.c.Stats().BackOutput.StateDrops[decodeguard.ReasonUnknownRank] == 1
	})
	st := h.c.Stats()
	if st.Resizes != 2 || st.Engines != 1 || st.Dropped != 1 || st.ReadySent != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEngineIndexAndShapeLive: messages the state machine or the loop's
// checks refuse are counted under their reasons and change nothing.
func TestEngineIndexAndShapeLive(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := startCoordinator(t, testConfig(2))
	f := dialFront(t, h)
	e := readyEngines(t, ctx, h, 2)[0]

	send := func(b ...[]byte) {
		t.Helper()
		if err := e.SendRaw(ctx, b...); err != nil {
			t.Fatal(err)
		}
	}
	stats := func(idx int64) []byte {
		return dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: idx, HasStats: true, Timestamp: ts,
			Stats: enginecore.SchedulerStats{NumWaitingReqs: 9, NumRunningReqs: 9}})
	}
	send(stats(2))     // engine_index == engine count: unknown-rank
	send(stats(70000)) // beyond MaxEngines: unknown-rank
	send(stats(-1))    // negative: validate (Python's engines[-1])
	// Request outputs present: [0, [1], nil, ts].
	outputs := msgp.AppendArrayHeader(nil, 4)
	outputs = msgp.AppendUint(outputs, 0)
	outputs = msgp.AppendArrayHeader(outputs, 1)
	outputs = msgp.AppendUint(outputs, 1)
	outputs = msgp.AppendNil(outputs)
	outputs = msgp.AppendFloat64(outputs, ts)
	send(outputs)
	// utility_output present: [0, [], nil, ts, "x"].
	utility := msgp.AppendArrayHeader(nil, 5)
	utility = msgp.AppendUint(utility, 0)
	utility = msgp.AppendArrayHeader(utility, 0)
	utility = msgp.AppendNil(utility)
	utility = msgp.AppendFloat64(utility, ts)
	utility = msgp.AppendString(utility, "x")
	send(utility)
	send(stats(0), stats(1))                           // two frames: envelope
	send(unhex(t, "94a1789092c0c0cb40c81cd6c8b43958")) // engine_index a str: decode
	send(dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: 1, HasWaveComplete: true, WaveComplete: -1}))
	if err := e.SendStats(ctx, 1, 4, 2, 0, 1); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {4, 2}}, nil)
	st := h.c.Stats()
	want := map[decodeguard.Reason]uint64{
		decodeguard.ReasonUnknownRank: 2,
		decodeguard.ReasonValidate:    4,
		decodeguard.ReasonEnvelope:    1,
		decodeguard.ReasonDecode:      1,
	}
	if !sameDrops(st.BackOutput.Drops, want) || st.BackOutput.StateDrops.Total() != 2 || st.BackOutput.Accepted != 1 {
		t.Fatalf("back output %+v drops %v", st.BackOutput, dropsOf(st.BackOutput.Drops))
	}
	if s := h.c.stateSnapshot(); s.Wave != 0 || s.Running {
		t.Fatalf("a refused notice moved the wave: %+v", s)
	}
}

func TestStartupDeadline(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	cfg := testConfig(3)
	cfg.StartupDeadline = 100 * time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Run(ctx)
	var se *StartupTimeoutError
	if !errors.As(err, &se) || !errors.Is(err, ErrStartupTimeout) || se.Expected != 3 || se.Subscribed != 0 ||
		!strings.Contains(err.Error(), "3 of 3 engines missing") {
		t.Fatalf("Run: %v", err)
	}

	// One of two engines subscribed: the error names what the state saw.
	cfg = testConfig(2)
	cfg.StartupDeadline = time.Second
	c2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	h := &harness{c: c2}
	e := dialEngine(t, h)
	err = c2.Run(ctx)
	if !errors.As(err, &se) || se.Expected != 2 || se.Subscribed != c2.stateSnapshot().Subscribed ||
		!strings.Contains(err.Error(), " of 2 engines missing") {
		t.Fatalf("Run: %v", err)
	}
	e.Close()
}

// recordHandler keeps the messages and attributes of the records it gets.
type recordHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordHandler) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordHandler) WithGroup(string) slog.Handler      { return r }

func (r *recordHandler) find(msg string, attrs map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		ok := 0
		rec.Attrs(func(a slog.Attr) bool {
			if v, found := attrs[a.Key]; found && a.Value.String() == v {
				ok++
			}
			return true
		})
		if ok == len(attrs) {
			return true
		}
	}
	return false
}

// TestStartupLogsMissing: while waiting, the coordinator logs how many
// engines are missing; drops during start-up are logged as warnings.
func TestStartupLogsMissing(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	rh := &recordHandler{}
	cfg := testConfig(2)
	cfg.Logger = slog.New(rh)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.startupEach = 10 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		c.Close()
	}()
	poll.WaitForCtx(t, ctx, "the missing-engines log line", func() bool {
		return rh.find("coordinator: still waiting for engines to subscribe", map[string]string{"missing": "2", "engines": "2"})
	})
	junk := junkXSub(t, ctx, c.BackPublishEndpoint())
	if err := junk.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the drop warning", func() bool {
		return rh.find("zmqguard: dropped a message (first from this peer)",
			map[string]string{"component": LoopBackPublish, "reason": "decode", "prefix_hex": "45"})
	})
}

func TestLifecycle(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)

	// Close before Run.
	c, err := New(testConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_ = c.Stats() // still readable

	// Close during Run (in start-up, then in the main loop); Run twice.
	for _, startEngines := range []bool{false, true} {
		c, err := New(testConfig(1))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		if startEngines {
			h := &harness{c: c, done: done}
			readyEngines(t, ctx, h, 1)
		}
		poll.WaitForCtx(t, ctx, "Run to start", func() bool {
			c.runMu.Lock()
			defer c.runMu.Unlock()
			return c.runDone != nil
		})
		if err := c.Run(ctx); !errors.Is(err, ErrRunCalled) {
			t.Fatalf("second Run: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Run after Close: %v", err)
		}
	}

	// Context cancellation: nil.
	c, err = New(testConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewErrors(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no front":          func(c *Config) { c.Front = "" },
		"no engines":        func(c *Config) { c.Engines = 0 },
		"too many engines":  func(c *Config) { c.Engines = defaultMaxEngines + 1 },
		"negative deadline": func(c *Config) { c.StartupDeadline = -1 },
		"bad endpoint":      func(c *Config) { c.BackOutput = "udp://127.0.0.1:0" },
		"bad socket opts":   func(c *Config) { c.Socket.HWM = -1 },
	} {
		cfg := testConfig(1)
		mod(&cfg)
		if c, err := New(cfg); err == nil {
			c.Close()
			t.Errorf("%s: New succeeded", name)
		}
	}
	// A port in use: the first sockets are closed again (goleak checks).
	c1, err := New(testConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	cfg := testConfig(1)
	cfg.BackPublish = c1.BackPublishEndpoint()
	if c, err := New(cfg); err == nil {
		c.Close()
		t.Fatal("New bound a port in use")
	}
}

// oldestConfig is testConfig under the oldest release profile, whose wake
// sets running and whose stats carry two values per engine.
func oldestConfig(engines int) Config {
	cfg := testConfig(engines)
	cfg.Release = vllm.Releases()[0]
	return cfg
}

// TestStartWaveAfterReadyRuntime: with the option ",pr54762" (vLLM PR
// #54762) every engine receives START_DP_WAVE(0, None) right after READY,
// over real sockets, and a front-end's wake still works after it.
func TestStartWaveAfterReadyRuntime(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	cfg := testConfig(2)
	cfg.Release = vllm.MustParse("latest,pr54762")
	h := startCoordinator(t, cfg)
	es := readyEngines(t, ctx, h, 2)
	for i, e := range es {
		expectStartWave(t, ctx, e, i, 0, nil)
	}
	if st := h.c.Stats(); st.StartWaveSent != 1 {
		t.Fatalf("StartWaveSent %d, want 1", st.StartWaveSent)
	}
}

// TestNewerFieldsRuntime: an engine message with a 9th EngineCoreOutputs
// element, the engine_notifications list vLLM PR #51433 (open; #54830 and
// #54833 build on it) appends, is applied and counted in
// Stats.NewerFields, over real sockets. The bytes are hand-built, not
// vLLM's: no merged vLLM writes the field; the list holds one tagged
// CustomNotification(key, payload) in msgspec's tagged-array form.
func TestNewerFieldsRuntime(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	h := startCoordinator(t, testConfig(1))
	e := readyEngines(t, ctx, h, 1)[0]
	f := dialFront(t, h)
	// [0, [], {"num_running_reqs": 3, "num_waiting_reqs": 2}, 1.5, nil, nil, nil, nil,
	//  [["CustomNotification", "lora", {"adapters": ["a"]}]]]
	b := msgp.AppendArrayHeader(nil, 9)
	b = msgp.AppendInt64(b, 0)
	b = msgp.AppendArrayHeader(b, 0)
	b = msgp.AppendMapHeader(b, 2)
	b = msgp.AppendString(b, "num_running_reqs")
	b = msgp.AppendInt64(b, 3)
	b = msgp.AppendString(b, "num_waiting_reqs")
	b = msgp.AppendInt64(b, 2)
	b = msgp.AppendFloat64(b, 1.5)
	for range 4 {
		b = msgp.AppendNil(b)
	}
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendArrayHeader(b, 3)
	b = msgp.AppendString(b, "CustomNotification")
	b = msgp.AppendString(b, "lora")
	b = msgp.AppendMapHeader(b, 1)
	b = msgp.AppendString(b, "adapters")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendString(b, "a")
	if err := e.SendRaw(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h, f, [][2]int{{2, 3}}, nil)
	if st := h.c.Stats(); st.NewerFields != 1 || st.Dropped != 0 {
		t.Fatalf("NewerFields %d, Dropped %d (drops %v)", st.NewerFields, st.Dropped, st.Drops)
	}
}
