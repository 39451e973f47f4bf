package coordinator

import (
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/vllm"
)

func statsMsg(engine, waiting, running, wave, step int64) *enginecore.Header {
	return &enginecore.Header{EngineIndex: engine, HasStats: true, Timestamp: ts, Stats: enginecore.SchedulerStats{
		NumWaitingReqs: waiting, NumRunningReqs: running, CurrentWave: wave, StepCounter: step}}
}

func waveCompleteMsg(engine, w int64) *enginecore.Header {
	return &enginecore.Header{EngineIndex: engine, Timestamp: ts, HasWaveComplete: true, WaveComplete: w}
}

func startWaveMsg(engine, w int64) *enginecore.Header {
	return &enginecore.Header{EngineIndex: engine, Timestamp: ts, HasStartWave: true, StartWave: w}
}

// newStarted returns a State for n engines after its start-up
// subscriptions, checking that READY comes with the last one only.
func newStarted(t *testing.T, n int, cfg stateConfig) *stateMachine {
	t.Helper()
	s, err := newStateMachine(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		a, err := s.OnBackMessage([]byte{0x01})
		if err != nil {
			t.Fatal(err)
		}
		if a.SendReady != (i == n-1) || s.Started() != (i == n-1) {
			t.Fatalf("subscription %d of %d: SendReady=%v Started=%v", i+1, n, a.SendReady, s.Started())
		}
	}
	return s
}

// setWave puts s in (wave, running) through engine notices.
func setWave(t *testing.T, s *stateMachine, wave int64, running bool) {
	t.Helper()
	// One wave at a time, as the engines report them (a jump of more than
	// maxWaveJump is refused).
	for w := s.Wave(); w < wave; w++ {
		if _, err := s.OnEngineOutput(waveCompleteMsg(0, w)); err != nil {
			t.Fatal(err)
		}
	}
	if running {
		if _, err := s.OnEngineOutput(startWaveMsg(0, wave)); err != nil {
			t.Fatal(err)
		}
	}
	if s.Wave() != wave || s.Running() != running {
		t.Fatalf("setWave: got (%d,%v), want (%d,%v)", s.Wave(), s.Running(), wave, running)
	}
}

func TestStartup(t *testing.T) {
	s, err := newStateMachine(3, stateConfig{})
	if err != nil {
		t.Fatal(err)
	}
	feed := func(b string) (stateActions, error) { return s.OnBackMessage([]byte(b)) }
	// Stray frames before and between the engines' subscriptions are
	// dropped with a classified error and do not count (vLLM returned).
	strays := []struct {
		in     string
		reason decodeguard.Reason
	}{
		{"", decodeguard.ReasonDecode},
		{"\x01probe", decodeguard.ReasonValidate},
		{"\x00probe", decodeguard.ReasonValidate},
		{"GET / HTTP/1.0\r\n", decodeguard.ReasonDecode},
		{"\x02", decodeguard.ReasonDecode},
	}
	for i := 0; i < 3; i++ {
		for _, st := range strays {
			a, err := feed(st.in)
			if decodeguard.ReasonOf(err) != st.reason || !a.None() {
				t.Fatalf("stray %q: %+v %v", st.in, a, err)
			}
		}
		// An unsubscription is ignored, not counted and not an error.
		if a, err := feed("\x00"); err != nil || !a.None() {
			t.Fatalf("unsubscribe: %+v %v", a, err)
		}
		a, err := feed("\x01")
		if err != nil || a.SendReady != (i == 2) {
			t.Fatalf("subscription %d: %+v %v", i, a, err)
		}
	}
	if !s.Started() || s.stateCounters().Readies != 1 {
		t.Fatalf("not started: %+v", s.stateCounters())
	}
	// Re-subscription after start-up: READY again, every time.
	for i := 0; i < 2; i++ {
		if a := s.OnBackSubscribe(); !a.SendReady {
			t.Fatal("no READY on re-subscription")
		}
	}
	if s.stateCounters().Readies != 3 {
		t.Fatalf("Readies = %d", s.stateCounters().Readies)
	}
	if snap := s.stateSnapshot(); !snap.Started || snap.Subscribed != 3 {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestWaveTransitions(t *testing.T) {
	tests := []struct {
		name        string
		cfg         stateConfig
		wave        int64
		running     bool
		engineMsg   *enginecore.Header
		front       *dpwire.FrontMsg
		wantStart   *dpwire.StartDPWave
		wantPublish bool
		wantWave    int64
		wantRunning bool
	}{
		{name: "wave_complete current", wave: 3, running: true, engineMsg: waveCompleteMsg(0, 3),
			wantPublish: true, wantWave: 4},
		{name: "wave_complete ahead", wave: 3, running: true, engineMsg: waveCompleteMsg(0, 6),
			wantPublish: true, wantWave: 7},
		{name: "wave_complete while paused", wave: 3, engineMsg: waveCompleteMsg(0, 3),
			wantPublish: true, wantWave: 4},
		{name: "wave_complete stale", wave: 3, running: true, engineMsg: waveCompleteMsg(0, 2),
			wantWave: 3, wantRunning: true},
		{name: "wave_complete hides start_wave", wave: 3, running: false,
			engineMsg:   &enginecore.Header{HasWaveComplete: true, WaveComplete: 1, HasStartWave: true, StartWave: 5},
			wantWave:    3,
			wantRunning: false},
		{name: "start_wave ahead while running", wave: 3, running: true, engineMsg: startWaveMsg(1, 5),
			wantStart: &dpwire.StartDPWave{Wave: 5, HasExclude: true, Exclude: 1}, wantPublish: true, wantWave: 5, wantRunning: true},
		{name: "start_wave ahead while paused", wave: 3, engineMsg: startWaveMsg(2, 4),
			wantStart: &dpwire.StartDPWave{Wave: 4, HasExclude: true, Exclude: 2}, wantPublish: true, wantWave: 4, wantRunning: true},
		{name: "start_wave current while paused", wave: 3, engineMsg: startWaveMsg(0, 3),
			wantStart: &dpwire.StartDPWave{Wave: 3, HasExclude: true, Exclude: 0}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "start_wave current while running", wave: 3, running: true, engineMsg: startWaveMsg(0, 3),
			wantWave: 3, wantRunning: true},
		{name: "start_wave stale", wave: 3, engineMsg: startWaveMsg(0, 2), wantWave: 3},
		{name: "stats only", wave: 3, engineMsg: statsMsg(1, 4, 2, 3, 10), wantWave: 3},
		{name: "wake current wave", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 3, HasExclude: true, Exclude: 2},
			wantStart: &dpwire.StartDPWave{Wave: 3, HasExclude: true, Exclude: 2}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "wake newer wave keeps current_wave", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 8, HasExclude: true, Exclude: 1},
			wantStart: &dpwire.StartDPWave{Wave: 3, HasExclude: true, Exclude: 1}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "wake stale wave drops exclusion", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 2, HasExclude: true, Exclude: 1},
			wantStart: &dpwire.StartDPWave{Wave: 3}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "wake without exclusion", wave: 0, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 0},
			wantStart: &dpwire.StartDPWave{Wave: 0}, wantPublish: true, wantWave: 0, wantRunning: true},
		{name: "wake identity", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 3, HasExclude: true, Exclude: 2, ExcludeIdentity: true},
			wantStart: &dpwire.StartDPWave{Wave: 3, HasExclude: true, Exclude: 2, ExcludeIdentity: true}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "wake exclusion beyond engines", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 3, HasExclude: true, Exclude: 4},
			wantStart: &dpwire.StartDPWave{Wave: 3}, wantPublish: true, wantWave: 3, wantRunning: true},
		{name: "wake while running", wave: 3, running: true, front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 3, HasExclude: true, Exclude: 1},
			wantWave: 3, wantRunning: true},
		{name: "subscribe", wave: 3, front: &dpwire.FrontMsg{Kind: dpwire.FrontSubscribe}, wantWave: 3},
		{name: "unsubscribe", wave: 3, running: true, front: &dpwire.FrontMsg{Kind: dpwire.FrontUnsubscribe, Topic: []byte("x")}, wantWave: 3, wantRunning: true},
		{name: "disabled: wake ignored", cfg: stateConfig{DisableWaveCoordination: true}, wave: 0,
			front: &dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 0}, wantWave: 0},
		{name: "disabled: wave_complete ignored", cfg: stateConfig{DisableWaveCoordination: true}, wave: 0,
			engineMsg: waveCompleteMsg(0, 0), wantWave: 0},
		{name: "disabled: start_wave ignored", cfg: stateConfig{DisableWaveCoordination: true}, wave: 0,
			engineMsg: startWaveMsg(0, 4), wantWave: 0},
	}
	for _, rel := range []vllm.Release{vllm.Releases()[0], vllm.Latest()} {
		for _, tt := range tests {
			tt.cfg.Release = rel
			if !rel.Rules().WakeSetsRunning && tt.front != nil && tt.front.Kind == dpwire.FrontWake && !tt.running &&
				!tt.cfg.DisableWaveCoordination {
				// vLLM PR #51481: the wake still broadcasts START_DP_WAVE
				// but neither sets running nor publishes.
				tt.wantPublish, tt.wantRunning = false, false
			}
			runWaveTransition(t, rel.String()+"/"+tt.name, tt.cfg, tt.wave, tt.running, tt.engineMsg, tt.front,
				tt.wantStart, tt.wantPublish, tt.wantWave, tt.wantRunning)
		}
	}
}

func runWaveTransition(t *testing.T, name string, cfg stateConfig, wave int64, running bool, engineMsg *enginecore.Header,
	front *dpwire.FrontMsg, wantStart *dpwire.StartDPWave, wantPublish bool, wantWave int64, wantRunning bool) {
	tt := struct {
		cfg         stateConfig
		wave        int64
		running     bool
		engineMsg   *enginecore.Header
		front       *dpwire.FrontMsg
		wantStart   *dpwire.StartDPWave
		wantPublish bool
		wantWave    int64
		wantRunning bool
	}{cfg, wave, running, engineMsg, front, wantStart, wantPublish, wantWave, wantRunning}
	{
		t.Run(name, func(t *testing.T) {
			s := newStarted(t, 4, tt.cfg)
			if tt.cfg.DisableWaveCoordination {
				if tt.wave != 0 || tt.running {
					t.Fatal("bad test: disabled coordination starts at (0, false)")
				}
			} else {
				setWave(t, s, tt.wave, tt.running)
			}
			before := s.stateCounters().StartWaves
			var a stateActions
			var err error
			if tt.engineMsg != nil {
				a, err = s.OnEngineOutput(tt.engineMsg)
			} else {
				a, err = s.OnFrontMessage(*tt.front)
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.SendReady || a.PublishStats {
				t.Fatalf("unexpected actions %+v", a)
			}
			if (tt.wantStart != nil) != a.SendStartWave {
				t.Fatalf("SendStartWave=%v, want %v (%+v)", a.SendStartWave, tt.wantStart != nil, a)
			}
			if tt.wantStart != nil {
				if a.StartWave != *tt.wantStart {
					t.Fatalf("StartWave %+v, want %+v", a.StartWave, *tt.wantStart)
				}
				if s.stateCounters().StartWaves != before+1 {
					t.Fatal("StartWaves not counted")
				}
			}
			if a.PublishWave != tt.wantPublish {
				t.Fatalf("PublishWave=%v, want %v", a.PublishWave, tt.wantPublish)
			}
			if s.Wave() != tt.wantWave || s.Running() != tt.wantRunning || a.Wave != tt.wantWave || a.Running != tt.wantRunning {
				t.Fatalf("state (%d,%v), actions (%d,%v); want (%d,%v)", s.Wave(), s.Running(), a.Wave, a.Running, tt.wantWave, tt.wantRunning)
			}
		})
	}
}

func TestActionEncoders(t *testing.T) {
	s := newStarted(t, 4, stateConfig{Release: vllm.Releases()[0]})
	setWave(t, s, 7, false)
	a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 7, HasExclude: true, Exclude: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(a.AppendStartDPWave(nil)); got != vecStartDPWave72 {
		t.Fatalf("START_DP_WAVE %s, want %s", got, vecStartDPWave72)
	}
	if got := hex.EncodeToString(a.AppendWavePublish(nil)); got != "93c007c3" {
		t.Fatalf("wave publish %s", got)
	}
	// wave_complete=6 while running in wave 7... is stale (6 < 7): nothing.
	if a, err := s.OnEngineOutput(waveCompleteMsg(0, 6)); err != nil || !a.None() {
		t.Fatalf("stale wave_complete: %+v %v", a, err)
	}
	// wave_complete=6 in wave 6 moves to (7, paused): (nil, 7, False).
	s2 := newStarted(t, 2, stateConfig{})
	setWave(t, s2, 6, true)
	a, err = s2.OnEngineOutput(waveCompleteMsg(0, 6))
	if err != nil || !a.PublishWave {
		t.Fatalf("%+v %v", a, err)
	}
	if got := hex.EncodeToString(a.AppendWavePublish(nil)); got != vecWavePublish {
		t.Fatalf("wave publish %s, want %s", got, vecWavePublish)
	}
}

func TestStatsPublishVector(t *testing.T) {
	s := newStarted(t, 2, stateConfig{Release: vllm.Releases()[0]})
	setWave(t, s, 7, true)
	for _, m := range []*enginecore.Header{statsMsg(0, 5, 3, 7, 1), statsMsg(1, 0, 1, 7, 1)} {
		if _, err := s.OnEngineOutput(m); err != nil {
			t.Fatal(err)
		}
	}
	a := s.Tick(time.Unix(1000, 0))
	if !a.PublishStats {
		t.Fatal("first tick after start-up does not publish")
	}
	if got := hex.EncodeToString(s.AppendStatsPublish(nil)); got != vecStatsPublish {
		t.Fatalf("publication %s, want %s", got, vecStatsPublish)
	}

	kv := newStarted(t, 2, stateConfig{Release: vllm.Latest()})
	m := statsMsg(0, 5, 3, 0, 1)
	m.Stats.KVCacheUsage = 0.25
	if _, err := kv.OnEngineOutput(m); err != nil {
		t.Fatal(err)
	}
	want := "9392" + "930503cb3fd0000000000000" + "930000cb0000000000000000" + "00c2"
	if got := hex.EncodeToString(kv.AppendStatsPublish(nil)); got != want {
		t.Fatalf("kv publication %s, want %s", got, want)
	}
}

func TestStatsOrdering(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	apply := func(m *enginecore.Header) {
		t.Helper()
		if _, err := s.OnEngineOutput(m); err != nil {
			t.Fatal(err)
		}
	}
	load := func(i int) EngineLoad { return s.stateSnapshot().Loads[i] }

	apply(statsMsg(0, 5, 3, 2, 10))
	if l := load(0); l.Waiting != 5 || l.Running != 3 {
		t.Fatalf("first stats not taken: %+v", l)
	}
	// Same (wave, step): taken (idempotent re-send, or engines without step tracking).
	apply(statsMsg(0, 6, 3, 2, 10))
	if load(0).Waiting != 6 {
		t.Fatal("equal pair not taken")
	}
	// Older step in the same wave: stale.
	apply(statsMsg(0, 1, 1, 2, 9))
	// Older wave with a larger step: stale (lexicographic).
	apply(statsMsg(0, 1, 1, 1, 500))
	if l := load(0); l.Waiting != 6 || l.Running != 3 {
		t.Fatalf("stale stats taken: %+v", l)
	}
	if c := s.stateCounters(); c.StaleStats != 2 || c.StatsApplied != 2 {
		t.Fatalf("counters %+v", c)
	}
	// Newer wave, step reset to 0 (as engines do when a wave ends): taken.
	apply(statsMsg(0, 0, 0, 3, 0))
	if l := load(0); l.Waiting != 0 || l.Running != 0 {
		t.Fatalf("newer wave not taken: %+v", l)
	}
	// Per engine: engine 1 far ahead does not make engine 0's stats stale
	// (vLLM's single global pair would flag them out of order).
	apply(statsMsg(1, 9, 9, 3, 40))
	apply(statsMsg(0, 2, 2, 3, 1))
	if load(0).Waiting != 2 || load(1).Waiting != 9 {
		t.Fatalf("engines not independent: %+v", s.stateSnapshot().Loads)
	}
	// A stale stats message's wave notice is still handled.
	m := statsMsg(0, 7, 7, 0, 0)
	m.HasStartWave, m.StartWave = true, 4
	a, err := s.OnEngineOutput(m)
	if err != nil || !a.SendStartWave || s.Wave() != 4 {
		t.Fatalf("wave notice in stale stats: %+v %v", a, err)
	}
	if load(0).Waiting != 2 {
		t.Fatal("stale counts taken along with the wave notice")
	}
	if c := s.stateCounters(); c.StaleStats != 3 {
		t.Fatalf("counters %+v", c)
	}
}

func TestEngineIndexAndShape(t *testing.T) {
	s := newStarted(t, 2, stateConfig{MaxEngines: 16})
	setWave(t, s, 3, false)
	snap := s.stateSnapshot()
	tests := []struct {
		name   string
		m      *enginecore.Header
		reason decodeguard.Reason
		target error
	}{
		{"negative index", statsMsg(-1, 1, 1, 3, 1), decodeguard.ReasonValidate, nil},
		{"stats beyond engines", statsMsg(2, 1, 1, 3, 1), decodeguard.ReasonUnknownRank, errUnknownEngine},
		{"stats far beyond", statsMsg(1<<40, 1, 1, 3, 1), decodeguard.ReasonUnknownRank, errUnknownIndex},
		{"notice beyond dpwire.MaxEngines", startWaveMsg(16, 9), decodeguard.ReasonUnknownRank, errUnknownIndex},
		{"request outputs", &enginecore.Header{OutputsLen: 1, HasStats: true}, decodeguard.ReasonValidate, errOutputs},
		{"utility output", &enginecore.Header{HasUtilityOutput: true}, decodeguard.ReasonValidate, errUtility},
		{"negative count", statsMsg(0, -1, 1, 3, 1), decodeguard.ReasonValidate, nil},
		{"negative wave", startWaveMsg(0, -1), decodeguard.ReasonValidate, nil},
	}
	for _, tt := range tests {
		a, err := s.OnEngineOutput(tt.m)
		if decodeguard.ReasonOf(err) != tt.reason {
			t.Fatalf("%s: %v, want %v", tt.name, err, tt.reason)
		}
		if tt.target != nil && !errors.Is(err, tt.target) {
			t.Fatalf("%s: %v is not %v", tt.name, err, tt.target)
		}
		if !a.None() {
			t.Fatalf("%s: actions %+v on a drop", tt.name, a)
		}
	}
	after := s.stateSnapshot()
	if after.Wave != snap.Wave || after.Running != snap.Running || after.Loads[0] != snap.Loads[0] || after.Loads[1] != snap.Loads[1] {
		t.Fatalf("a dropped message changed the state: %+v -> %+v", snap, after)
	}
	// A stats-less wave notice from an engine beyond the count (a new
	// elastic-EP engine whose scale notice has not arrived) is handled.
	a, err := s.OnEngineOutput(startWaveMsg(5, 4))
	if err != nil || !a.SendStartWave || a.StartWave != (dpwire.StartDPWave{Wave: 4, HasExclude: true, Exclude: 5}) {
		t.Fatalf("notice from engine 5: %+v %v", a, err)
	}
}

func TestElasticResize(t *testing.T) {
	s := newStarted(t, 3, stateConfig{MaxEngines: 8, Release: vllm.Releases()[0]})
	for i := int64(0); i < 3; i++ {
		if _, err := s.OnEngineOutput(statsMsg(i, 10+i, 20+i, 1, 5)); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1000, 0)
	s.Tick(now) // publish, so the changed flag is clear

	// Grow: counts kept, new engines zero, published within StatsInterval.
	a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 5})
	if err != nil || a.SendReady || a.SendStartWave || a.PublishWave {
		t.Fatalf("grow: %+v %v", a, err)
	}
	loads := s.stateSnapshot().Loads
	if len(loads) != 5 || loads[2] != (EngineLoad{Waiting: 12, Running: 22}) || loads[4] != (EngineLoad{}) {
		t.Fatalf("after grow %+v", loads)
	}
	if !s.NextTick().Equal(now.Add(defaultStatsInterval)) {
		t.Fatalf("resize not published promptly: next tick %v", s.NextTick())
	}
	// New engines take stats.
	if _, err := s.OnEngineOutput(statsMsg(4, 1, 2, 0, 0)); err != nil {
		t.Fatal(err)
	}
	// Shrink: tail dropped; its stats are now unknown-rank drops.
	if _, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 2}); err != nil {
		t.Fatal(err)
	}
	if loads := s.stateSnapshot().Loads; len(loads) != 2 || loads[1] != (EngineLoad{Waiting: 11, Running: 21}) {
		t.Fatalf("after shrink %+v", loads)
	}
	if _, err := s.OnEngineOutput(statsMsg(2, 1, 1, 9, 9)); decodeguard.ReasonOf(err) != decodeguard.ReasonUnknownRank {
		t.Fatalf("stats from a removed engine: %v", err)
	}
	// Grow again: re-created engines start from zero, with no memory of the
	// old engine's (wave, step), so a restarted engine at (0, 0) is taken.
	if _, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 3}); err != nil {
		t.Fatal(err)
	}
	if l := s.stateSnapshot().Loads[2]; l != (EngineLoad{}) {
		t.Fatalf("re-created engine inherited %+v", l)
	}
	if _, err := s.OnEngineOutput(statsMsg(2, 4, 4, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if l := s.stateSnapshot().Loads[2]; l.Waiting != 4 {
		t.Fatalf("restarted engine's stats not taken: %+v", l)
	}
	// Survivors keep their ordering state.
	if _, err := s.OnEngineOutput(statsMsg(0, 99, 99, 1, 4)); err != nil {
		t.Fatal(err)
	}
	if l := s.stateSnapshot().Loads[0]; l.Waiting != 10 {
		t.Fatalf("survivor lost its ordering state: %+v", l)
	}
	// Out-of-range counts are drops that change nothing.
	for _, n := range []int{0, -1, 9, dpwire.MaxEngines} {
		if _, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: n}); decodeguard.ReasonOf(err) != decodeguard.ReasonValidate {
			t.Fatalf("scale to %d: %v", n, err)
		}
	}
	if s.Engines() != 3 || s.stateCounters().Resizes != 3 {
		t.Fatalf("engines %d, counters %+v", s.Engines(), s.stateCounters())
	}
	// The publication follows the new length.
	if got := hex.EncodeToString(s.AppendStatsPublish(nil)); got != "9393"+"920a14"+"920b15"+"920404"+"00c2" {
		t.Fatalf("publication %s", got)
	}
}

func TestScaleDuringStartup(t *testing.T) {
	s, _ := newStateMachine(3, stateConfig{})
	s.OnBackSubscribe()
	s.OnBackSubscribe()
	a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 2})
	if err != nil || !a.SendReady || !s.Started() {
		t.Fatalf("shrinking to the subscribed count during start-up: %+v %v", a, err)
	}
}

func TestFrontMessageErrors(t *testing.T) {
	s := newStarted(t, 2, stateConfig{})
	for _, m := range []dpwire.FrontMsg{
		{},
		{Kind: 99},
		{Kind: dpwire.FrontWake, Wave: -1},
		{Kind: dpwire.FrontWake, Wave: 1, HasExclude: true, Exclude: -2},
	} {
		a, err := s.OnFrontMessage(m)
		if err == nil || !decodeguard.IsBadInput(err) || !a.None() {
			t.Fatalf("%+v: %+v %v", m, a, err)
		}
	}
	if s.Running() {
		t.Fatal("a rejected wake started the engines")
	}
}

func TestTick(t *testing.T) {
	s, _ := newStateMachine(1, stateConfig{StatsInterval: 100 * time.Millisecond, IdleInterval: 5 * time.Second})
	t0 := time.Unix(5000, 0)
	if a := s.Tick(t0); a.PublishStats {
		t.Fatal("published before start-up")
	}
	s.OnBackSubscribe()
	if !s.NextTick().IsZero() {
		t.Fatal("first publication not due at once")
	}
	if a := s.Tick(t0); !a.PublishStats {
		t.Fatal("first tick after start-up does not publish")
	}
	if a := s.Tick(t0.Add(4 * time.Second)); a.PublishStats {
		t.Fatal("idle publication before IdleInterval")
	}
	if !s.NextTick().Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("next tick %v", s.NextTick())
	}
	t1 := t0.Add(5 * time.Second)
	if a := s.Tick(t1); !a.PublishStats {
		t.Fatal("no idle publication after IdleInterval")
	}
	// Stats change: due StatsInterval after the last publication.
	if _, err := s.OnEngineOutput(statsMsg(0, 1, 1, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if !s.NextTick().Equal(t1.Add(100 * time.Millisecond)) {
		t.Fatalf("next tick %v", s.NextTick())
	}
	if a := s.Tick(t1.Add(99 * time.Millisecond)); a.PublishStats {
		t.Fatal("published before StatsInterval")
	}
	if a := s.Tick(t1.Add(100 * time.Millisecond)); !a.PublishStats {
		t.Fatal("no publication after StatsInterval with changed stats")
	}
	// Published: idle again.
	t2 := t1.Add(100 * time.Millisecond)
	if a := s.Tick(t2.Add(200 * time.Millisecond)); a.PublishStats {
		t.Fatal("published again without changes")
	}
	// A stale stats message is not a change.
	s.OnEngineOutput(statsMsg(0, 9, 9, 0, 0))
	if a := s.Tick(t2.Add(300 * time.Millisecond)); a.PublishStats {
		t.Fatal("stale stats counted as a change")
	}
	// Wave changes publish through PublishWave, not by shortening the period.
	s.OnEngineOutput(waveCompleteMsg(0, 0))
	if a := s.Tick(t2.Add(400 * time.Millisecond)); a.PublishStats {
		t.Fatal("wave change shortened the stats period")
	}
	// A clock going backwards publishes nothing.
	if a := s.Tick(t0); a.PublishStats {
		t.Fatal("published on a clock going backwards")
	}
}

func TestNewStateErrors(t *testing.T) {
	for _, tc := range []struct {
		n   int
		cfg stateConfig
	}{
		{0, stateConfig{}},
		{-1, stateConfig{}},
		{defaultMaxEngines + 1, stateConfig{}},
		{5, stateConfig{MaxEngines: 4}},
		{1, stateConfig{MaxEngines: dpwire.MaxEngines + 1}},
		{1, stateConfig{MaxEngines: -3}},
	} {
		if s, err := newStateMachine(tc.n, tc.cfg); err == nil || decodeguard.IsBadInput(err) {
			t.Fatalf("NewState(%d, %+v) = %v, %v", tc.n, tc.cfg, s, err)
		}
	}
	if s, err := newStateMachine(dpwire.MaxEngines, stateConfig{MaxEngines: dpwire.MaxEngines}); err != nil || s.Engines() != dpwire.MaxEngines {
		t.Fatalf("NewState(dpwire.MaxEngines): %v", err)
	}
}

// TestStateProperties drives a State with random inputs and checks the
// invariants: no panic; every error classified and leaving nothing to do;
// the wave never decreases; an engine's taken (wave, step) never decreases
// while it exists; the engine count stays in range; READY at most once
// during start-up.
func TestStateProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "engines")
		cfg := stateConfig{MaxEngines: 8, DisableWaveCoordination: rapid.Bool().Draw(rt, "disabled")}
		s, err := newStateMachine(n, cfg)
		if err != nil {
			rt.Fatal(err)
		}
		type pair struct{ wave, step int64 }
		taken := map[int]pair{}
		now := time.Unix(0, 0)
		lastWave := int64(0)
		for i := 0; i < 200; i++ {
			var a stateActions
			var err error
			switch rapid.IntRange(0, 6).Draw(rt, "input") {
			case 0, 1:
				m := &enginecore.Header{
					EngineIndex: rapid.Int64Range(-1, 9).Draw(rt, "engine"),
					HasStats:    rapid.Bool().Draw(rt, "hasStats"),
				}
				m.Stats = enginecore.SchedulerStats{
					NumWaitingReqs: rapid.Int64Range(0, 5).Draw(rt, "waiting"),
					NumRunningReqs: rapid.Int64Range(0, 5).Draw(rt, "running"),
					CurrentWave:    rapid.Int64Range(0, 4).Draw(rt, "statsWave"),
					StepCounter:    rapid.Int64Range(0, 4).Draw(rt, "step"),
				}
				switch rapid.IntRange(0, 2).Draw(rt, "notice") {
				case 1:
					m.HasWaveComplete, m.WaveComplete = true, rapid.Int64Range(0, 6).Draw(rt, "wc")
				case 2:
					m.HasStartWave, m.StartWave = true, rapid.Int64Range(0, 6).Draw(rt, "sw")
				}
				before := s.Engines()
				a, err = s.OnEngineOutput(m)
				idx := int(m.EngineIndex)
				if err == nil && m.HasStats && idx < before {
					p := pair{m.Stats.CurrentWave, m.Stats.StepCounter}
					if old, ok := taken[idx]; !ok || p.wave > old.wave || (p.wave == old.wave && p.step >= old.step) {
						taken[idx] = p
						if s.stateSnapshot().Loads[idx].Waiting != m.Stats.NumWaitingReqs {
							rt.Fatalf("newer stats for engine %d not taken", idx)
						}
					}
				}
			case 2:
				msg := dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: rapid.Int64Range(0, 6).Draw(rt, "wakeWave")}
				if rapid.Bool().Draw(rt, "exclude") {
					msg.HasExclude, msg.Exclude = true, rapid.Int64Range(0, 9).Draw(rt, "ex")
				}
				a, err = s.OnFrontMessage(msg)
				if err == nil && a.SendStartWave && a.StartWave.HasExclude && a.StartWave.Exclude >= int64(s.Engines()) {
					rt.Fatalf("exclusion %d beyond %d engines", a.StartWave.Exclude, s.Engines())
				}
			case 3:
				k := rapid.IntRange(-1, 10).Draw(rt, "scale")
				a, err = s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: k})
				if err == nil {
					for idx := range taken {
						if idx >= k {
							delete(taken, idx)
						}
					}
				}
			case 4:
				a, err = s.OnBackMessage(rapid.SampledFrom([][]byte{{1}, {0}, {1, 'x'}, {2}, nil}).Draw(rt, "back"))
			case 5:
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(6*time.Second)).Draw(rt, "dt")))
				a = s.Tick(now)
			case 6:
				a, err = s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontSubscribe})
			}
			if err != nil {
				if !decodeguard.IsBadInput(err) {
					rt.Fatalf("unclassified error %v", err)
				}
				if !a.None() {
					rt.Fatalf("actions %+v with error %v", a, err)
				}
			}
			if s.Wave() < lastWave {
				rt.Fatalf("wave went back from %d to %d", lastWave, s.Wave())
			}
			lastWave = s.Wave()
			if a.Wave != s.Wave() && (err == nil) {
				rt.Fatalf("actions report wave %d, state %d", a.Wave, s.Wave())
			}
			if s.Engines() < 1 || s.Engines() > 8 || len(s.stateSnapshot().Loads) != s.Engines() {
				rt.Fatalf("engine count %d", s.Engines())
			}
			if cfg.DisableWaveCoordination && (s.Wave() != 0 || s.Running() || a.SendStartWave || a.PublishWave) {
				rt.Fatalf("wave coordination disabled but state moved: %+v", a)
			}
		}
	})
}

// TestScaleUpWhileRunning: under the oldest profile, growing the engine
// list while the engines run pauses them (vLLM set engines_running = False:
// the new engines start at wave 0) and publishes the wave state; shrinking
// does not. Under latest neither does (TestScaleUpLatest).
func TestScaleUpWhileRunning(t *testing.T) {
	s := newStarted(t, 2, stateConfig{Release: vllm.Releases()[0]})
	setWave(t, s, 3, true)
	a, err := s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 1})
	if err != nil || a.PublishWave || !s.Running() {
		t.Fatalf("shrink: %+v %v", a, err)
	}
	a, err = s.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 4})
	if err != nil || !a.PublishWave || a.Running || s.Running() || s.Wave() != 3 {
		t.Fatalf("grow: %+v %v", a, err)
	}
	if got := hex.EncodeToString(a.AppendWavePublish(nil)); got != "93c003c2" {
		t.Fatalf("publication %s", got)
	}
	// Disabled wave coordination: never running, nothing published.
	d := newStarted(t, 1, stateConfig{DisableWaveCoordination: true})
	if a, err := d.OnFrontMessage(dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 2}); err != nil || a.PublishWave {
		t.Fatalf("disabled: %+v %v", a, err)
	}
}

// TestStartWaveAfterReady: under the option ",pr54762" (vLLM PR #54762)
// the start-up READY comes with START_DP_WAVE for wave 0, no engine
// excluded, running unchanged; not on a later READY, not without the
// option, not with wave coordination off.
func TestStartWaveAfterReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  stateConfig
		want bool
	}{
		{"latest,pr54762", stateConfig{Release: vllm.MustParse("latest,pr54762")}, true},
		{"0.25,pr54762", stateConfig{Release: vllm.MustParse("0.25,pr54762")}, true},
		{"latest", stateConfig{}, false},
		{"disabled", stateConfig{Release: vllm.MustParse("latest,pr54762"), DisableWaveCoordination: true}, false},
	} {
		s, err := newStateMachine(3, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			a, err := s.OnBackMessage([]byte{0x01})
			if err != nil {
				t.Fatal(err)
			}
			last := i == 2
			if a.SendReady != last || a.SendStartWave != (last && tc.want) {
				t.Fatalf("%s: subscription %d: SendReady %v SendStartWave %v", tc.name, i, a.SendReady, a.SendStartWave)
			}
			if a.SendStartWave && (a.StartWave != dpwire.StartDPWave{Wave: 0} || a.Running || a.PublishWave) {
				t.Fatalf("%s: start wave %+v running %v publish %v", tc.name, a.StartWave, a.Running, a.PublishWave)
			}
		}
		// A re-subscription after start-up: READY only.
		if a := s.OnBackSubscribe(); !a.SendReady || a.SendStartWave {
			t.Fatalf("%s: re-subscription: %+v", tc.name, a)
		}
		// Rank 0's wave_complete ends wave 0 as usual.
		a, err := s.OnEngineOutput(waveCompleteMsg(0, 0))
		if err != nil || (!tc.cfg.DisableWaveCoordination && (a.Wave != 1 || a.Running || !a.PublishWave)) {
			t.Fatalf("%s: wave_complete 0: %+v %v", tc.name, a, err)
		}
	}
}
