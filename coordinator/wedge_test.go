package coordinator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// TestStatsFreezeRecovers is issue 23's "stats freeze": one enginecore.Header
// for engine 1 with current_wave = step_counter = 2^63-1 (and 424242
// waiting) used to make every later real stats message from engine 1 stale,
// so front-ends saw 424242 for ever. Now the real engine's counts are taken
// again by its statsResync-th message.
func TestStatsFreezeRecovers(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	if _, err := s.OnEngineOutput(statsMsg(1, 3, 1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OnEngineOutput(statsMsg(1, 424242, 0, math.MaxInt64, math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= statsResync; i++ {
		if _, err := s.OnEngineOutput(statsMsg(1, int64(i), 2, 0, int64(10+i))); err != nil {
			t.Fatal(err)
		}
		got := s.stateSnapshot().Loads[1].Waiting
		if i < statsResync && got != 424242 {
			t.Fatalf("message %d taken before the resync: %d", i, got)
		}
		if i == statsResync && got != int64(i) {
			t.Fatalf("after %d real messages the forged counts still show: %d", i, got)
		}
	}
	// From then on every real message is taken at once.
	if _, err := s.OnEngineOutput(statsMsg(1, 77, 2, 0, 20)); err != nil || s.stateSnapshot().Loads[1].Waiting != 77 {
		t.Fatalf("next real message not taken: %v %+v", err, s.stateSnapshot().Loads[1])
	}
	if c := s.stateCounters(); c.StatsResyncs != 1 || c.StaleStats != statsResync {
		t.Fatalf("counters %+v", c)
	}
}

// TestWaveStuckRefused is issue 23's "wave stuck": wave_complete = 2^63-2
// used to move the wave to 2^63-1, after which wakes and every notice at
// that wave were out of range and the coordinator stayed running. Now the
// jump is refused, and the real rank 0 and front-ends go on.
func TestWaveStuckRefused(t *testing.T) {
	for _, rel := range []vllm.Release{vllm.Releases()[0], vllm.Latest()} {
		s := newStarted(t, 2, stateConfig{Release: rel})
		setWave(t, s, 3, true)
		// Fewer than waveResync in a row: each is refused.
		for _, m := range []*enginecore.Header{waveCompleteMsg(0, dpwire.MaxWave-1), startWaveMsg(1, 4+maxWaveJump)} {
			if a, err := s.OnEngineOutput(m); decodeguard.ReasonOf(err) != decodeguard.ReasonValidate || !a.None() {
				t.Fatalf("%s: jump %+v: %+v %v", rel, m, a, err)
			}
		}
		if s.Wave() != 3 || !s.Running() || s.stateCounters().WaveJumps != 2 {
			t.Fatalf("%s: state (%d, %v) counters %+v", rel, s.Wave(), s.Running(), s.stateCounters())
		}
		// Rank 0 ends the wave; a wake starts the next.
		if a, err := s.OnEngineOutput(waveCompleteMsg(0, 3)); err != nil || s.Running() || s.Wave() != 4 || !a.PublishWave {
			t.Fatalf("%s: real wave_complete: %+v %v", rel, a, err)
		}
		if a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 4}); err != nil || !a.SendStartWave || a.StartWave.Wave != 4 {
			t.Fatalf("%s: wake: %+v %v", rel, a, err)
		}
	}
}

// TestWaveResyncAndCeiling: waveResync jumps in a row are followed, and the
// wave then stays in range: at dpwire.MaxWave a wave_complete pauses without
// overflowing and every wake is accepted.
func TestWaveResyncAndCeiling(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	for i := 1; i <= waveResync; i++ {
		_, err := s.OnEngineOutput(startWaveMsg(0, dpwire.MaxWave))
		if i < waveResync && err == nil {
			t.Fatalf("jump %d followed", i)
		}
		if i == waveResync && (err != nil || s.Wave() != dpwire.MaxWave || !s.Running()) {
			t.Fatalf("resync: %v (%d, %v)", err, s.Wave(), s.Running())
		}
	}
	if a, err := s.OnEngineOutput(waveCompleteMsg(0, dpwire.MaxWave)); err != nil || s.Running() || s.Wave() != dpwire.MaxWave || !a.PublishWave {
		t.Fatalf("wave_complete at dpwire.MaxWave: %+v %v (%d, %v)", a, err, s.Wave(), s.Running())
	}
	if a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: dpwire.MaxWave}); err != nil || !a.SendStartWave {
		t.Fatalf("wake at dpwire.MaxWave: %+v %v", a, err)
	}
	if a, err := s.OnEngineOutput(startWaveMsg(0, dpwire.MaxWave)); err != nil || !s.Running() || !a.SendStartWave {
		t.Fatalf("start_wave at dpwire.MaxWave: %+v %v", a, err)
	}
	if c := s.stateCounters(); c.WaveResyncs != 1 || c.WaveJumps != waveResync-1 {
		t.Fatalf("counters %+v", c)
	}
}

// TestStateNeverLatches: after any sequence of messages (hostile values
// over the whole int64 range included), the coordinator serves the real
// engines again within a bounded number of valid messages: each engine's
// counts are those of its statsResync-th real stats message at the latest,
// and the wave round trip works at the coordinator's current wave (a wake
// while paused broadcasts START_DP_WAVE, rank 0's start_wave runs, its
// wave_complete pauses), with no message refused as out of range.
func TestStateNeverLatches(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(rt, "engines")
		rel := rapid.SampledFrom(vllm.Releases()).Draw(rt, "release")
		s, err := newStateMachine(n, stateConfig{MaxEngines: 8, Release: rel})
		if err != nil {
			rt.Fatal(err)
		}
		for range n {
			s.OnBackSubscribe()
		}
		anyInt := rapid.OneOf(rapid.Int64Range(0, 10), rapid.Int64Range(0, math.MaxInt64),
			rapid.SampledFrom([]int64{dpwire.MaxWave - 1, dpwire.MaxWave, math.MaxInt64, math.MaxInt64 - 2}))
		for range rapid.IntRange(0, 60).Draw(rt, "hostile") {
			switch rapid.IntRange(0, 3).Draw(rt, "kind") {
			case 0:
				m := statsMsg(rapid.Int64Range(0, int64(n)-1).Draw(rt, "e"), anyInt.Draw(rt, "w"), anyInt.Draw(rt, "r"),
					anyInt.Draw(rt, "sw"), anyInt.Draw(rt, "st"))
				_, _ = s.OnEngineOutput(m)
			case 1:
				_, _ = s.OnEngineOutput(waveCompleteMsg(rapid.Int64Range(0, int64(n)-1).Draw(rt, "e"), anyInt.Draw(rt, "wc")))
			case 2:
				_, _ = s.OnEngineOutput(startWaveMsg(rapid.Int64Range(0, int64(n)-1).Draw(rt, "e"), anyInt.Draw(rt, "sw")))
			case 3:
				_, _ = s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: anyInt.Draw(rt, "wake")})
			}
			if s.Wave() < 0 || s.Wave() > dpwire.MaxWave {
				rt.Fatalf("wave %d out of range", s.Wave())
			}
		}
		// The real engines: each reports at (its own wave 0, steps 1, 2, 3).
		for e := range n {
			for k := int64(1); k <= statsResync; k++ {
				if _, err := s.OnEngineOutput(statsMsg(int64(e), 100+k, k, 0, k)); err != nil {
					rt.Fatalf("real stats refused: %v", err)
				}
			}
			if l := s.stateSnapshot().Loads[e]; l.Waiting != 100+statsResync || l.Running != statsResync {
				rt.Fatalf("engine %d shows %+v after %d real messages", e, l, statsResync)
			}
		}
		// The wave round trip at the coordinator's current wave.
		w := s.Wave()
		if s.Running() {
			if _, err := s.OnEngineOutput(waveCompleteMsg(0, w)); err != nil || s.Running() {
				rt.Fatalf("rank 0 wave_complete(%d) while running: %v", w, err)
			}
		}
		w = s.Wave()
		a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: w})
		if err != nil || !a.SendStartWave || a.StartWave.Wave != w {
			rt.Fatalf("wake at %d: %+v %v", w, a, err)
		}
		if !s.Running() {
			if a, err := s.OnEngineOutput(startWaveMsg(0, w)); err != nil || !s.Running() || !a.PublishWave {
				rt.Fatalf("rank 0 start_wave(%d): %+v %v", w, a, err)
			}
		}
		if _, err := s.OnEngineOutput(waveCompleteMsg(0, w)); err != nil || s.Running() {
			rt.Fatalf("rank 0 wave_complete(%d): %v", w, err)
		}
	})
}

// TestScaleBoundedLive is issue 23's "resize from anyone": one
// ("SCALE_ELASTIC_EP", 4096) from any front-end peer used to make every
// publication 12 KiB. By default the engine list grows to at most
// defaultScaleFactor times its starting size, so the publication stays
// small; with Config.ScaleFrom only the named hosts may resize at all.
func TestScaleBoundedLive(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	h := startCoordinator(t, testConfig(2))
	f := dialFront(t, h)
	readyEngines(t, ctx, h, 2)
	waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}}, nil)
	if err := f.Scale(ctx, 4096); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the oversized SCALE_ELASTIC_EP to be refused", func() bool {
		return h.c.Stats().Front.StateDrops[decodeguard.ReasonValidate] == 1
	})
	if err := f.Scale(ctx, 8); err != nil { // 4 x 2: the default bound
		t.Fatal(err)
	}
	p := waitCounts(t, ctx, h, f, [][2]int{{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}}, nil)
	if b := dpwire.AppendStatsPublishKV(nil, p.Loads, int(p.Wave), p.Running); len(b) > 128 {
		t.Fatalf("publication of %d bytes for 8 engines", len(b))
	}
	if st := h.c.Stats(); st.Engines != 8 || st.Resizes != 1 {
		t.Fatalf("stats %+v", st)
	}

	// Restricted to a host that is not this one: refused as policy.
	cfg := testConfig(2)
	cfg.ScaleFrom = []string{"192.0.2.1"}
	h2 := startCoordinator(t, cfg)
	f2 := dialFront(t, h2)
	readyEngines(t, ctx, h2, 2)
	waitCounts(t, ctx, h2, f2, [][2]int{{0, 0}, {0, 0}}, nil)
	if err := f2.Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "SCALE_ELASTIC_EP from a host not in ScaleFrom to be refused", func() bool {
		return h2.c.Stats().Front.StateDrops[decodeguard.ReasonPolicy] == 1
	})
	if st := h2.c.Stats(); st.Engines != 2 || st.Resizes != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Restricted to loopback: taken.
	cfg = testConfig(2)
	cfg.ScaleFrom = []string{"127.0.0.1", "::1"}
	h3 := startCoordinator(t, cfg)
	f3 := dialFront(t, h3)
	readyEngines(t, ctx, h3, 2)
	waitCounts(t, ctx, h3, f3, [][2]int{{0, 0}, {0, 0}}, nil)
	if err := f3.Scale(ctx, 3); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, ctx, h3, f3, [][2]int{{0, 0}, {0, 0}, {0, 0}}, nil)

	bad := testConfig(1)
	bad.ScaleFrom = []string{"frontend-1"}
	if c, err := New(bad); err == nil {
		c.Close()
		t.Fatal("a ScaleFrom entry that is not an IP address was accepted")
	}
}

// TestReadyFloodKeepsStartWave is issue 23's "lost START_DP_WAVE": a flood
// of re-subscriptions on the back publish socket used to make one READY
// broadcast each, which filled a slow engine's queue, so that the next
// START_DP_WAVE was dropped for it under the same HWM policy. READY is now
// coalesced (at most one per ReadyInterval), so the slow engine's queue
// holds few of them and START_DP_WAVE reaches it; a control message the
// socket does drop is counted in ControlDropped and logged, never silent.
// (With Config.ReadyInterval = -1, vLLM's one READY per subscription, the
// same run lost START_DP_WAVE in one of two runs on the development
// machine, with 160,000-260,000 READY copies dropped: RELIABILITY.md.)
func TestReadyFloodKeepsStartWave(t *testing.T) {
	requirePyzmq(t)
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{{"default interval", 0}, {"50ms", 50 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			cfg := oldestConfig(1)
			cfg.ReadyInterval = tc.interval
			cfg.Socket.HWM = 64
			h := startCoordinator(t, cfg)
			f := dialFront(t, h)
			arg, _ := json.Marshal(map[string]any{"back_publish": h.c.BackPublishEndpoint(), "seconds": 3})
			cmd := exec.CommandContext(ctx, python, "testdata/slow_engine.py", string(arg))
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			out := bufio.NewScanner(stdout)
			if !out.Scan() || out.Text() != "flooding" {
				t.Fatalf("slow_engine.py: %q %v\n%s", out.Text(), out.Err(), stderr.String())
			}
			// Wake in the middle of the flood, once it has reached the
			// coordinator.
			poll.WaitForCtx(t, ctx, "the flood to arrive", func() bool {
				st := h.c.Stats()
				return st.ReadySent+st.ReadyCoalesced >= 1000
			})
			if err := f.Wake(ctx, nil, 0); err != nil {
				t.Fatal(err)
			}
			poll.WaitForCtx(t, ctx, "START_DP_WAVE to be sent", func() bool { return h.c.Stats().StartWaveSent == 1 })
			if !out.Scan() || out.Text() != "flooded" {
				t.Fatalf("slow_engine.py: %q %v\n%s", out.Text(), out.Err(), stderr.String())
			}
			stdin.Write([]byte("go\n"))
			if !out.Scan() {
				t.Fatalf("slow_engine.py: %v\n%s", out.Err(), stderr.String())
			}
			var got struct {
				Readies int   `json:"readies"`
				Start   []any `json:"start"`
			}
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			st := h.c.Stats()
			t.Logf("READY sent %d, coalesced %d; control dropped %d; the slow engine read %d READY, START_DP_WAVE %v",
				st.ReadySent, st.ReadyCoalesced, st.ControlDropped, got.Readies, got.Start)
			// 3 s of flood: at most one READY per interval (plus start-up's).
			if got.Start == nil || st.ControlDropped != 0 || st.ReadySent > 200 || st.ReadyCoalesced == 0 {
				t.Fatalf("START_DP_WAVE lost under the READY flood: %+v, stats %+v", got, st)
			}
		})
	}
}

// TestWakeFloodCoalesced: under the latest rules a wake while paused does
// not set running, so every wake asks for START_DP_WAVE; identical ones
// within ReadyInterval are sent once, so a wake flood cannot fill the
// engines' queues either.
func TestWakeFloodCoalesced(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	cfg := testConfig(2)
	cfg.ReadyInterval = time.Hour // every repeat within the test is coalesced
	h := startCoordinator(t, cfg)
	f := dialFront(t, h)
	es := readyEngines(t, ctx, h, 2)
	for range 500 {
		if err := f.Wake(ctx, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitForCtx(t, ctx, "the wakes to be taken", func() bool {
		st := h.c.Stats()
		return st.StartWaveSent+st.StartWaveCoalesced == 500
	})
	if st := h.c.Stats(); st.StartWaveSent != 1 || st.Running {
		t.Fatalf("stats %+v", st)
	}
	// A different broadcast (rank 0 reports the wave start) is not held back.
	if err := es[0].SendStartWave(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "rank 0's START_DP_WAVE", func() bool { return h.c.Stats().StartWaveSent == 2 })
	for i, e := range es {
		for k, wantExclude := range []int{-1, 0} {
			w, ex, err := e.NextStartWave(ctx)
			if err != nil {
				t.Fatalf("engine %d: %v", i, err)
			}
			got := -1
			if ex != nil {
				got = *ex
			}
			if w != 0 || got != wantExclude {
				t.Fatalf("engine %d, broadcast %d: START_DP_WAVE(%d, %d), want (0, %d)", i, k, w, got, wantExclude)
			}
		}
	}
}
