package coordinator

import (
	"errors"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/vllm"
)

// Defaults of [Config] (and of the state machine it configures).
const (
	// defaultStatsInterval is how often stats are published while they keep
	// changing (vLLM's min_stats_update_interval_ms, 100 ms).
	defaultStatsInterval = 100 * time.Millisecond
	// defaultIdleInterval is how often stats are published when nothing
	// changed (vLLM: 5 s).
	defaultIdleInterval = 5 * time.Second
	// defaultMaxEngines is the largest engine count accepted when
	// Config.MaxEngines is zero, at start and from SCALE_ELASTIC_EP.
	defaultMaxEngines = 4096
	// defaultScaleFactor: when Config.MaxEngines is zero, a
	// SCALE_ELASTIC_EP notice may grow the engine list to at most
	// defaultScaleFactor times the starting engine count (at least
	// defaultMinMaxEngines, at most defaultMaxEngines), so that one notice
	// from any front-end cannot make every later publication huge.
	defaultScaleFactor = 4
	// defaultMinMaxEngines is the smallest default bound (see
	// defaultScaleFactor).
	defaultMinMaxEngines = 8
	// statsResync is how many consecutive stale stats messages from one
	// engine make the coordinator take the newest of them anyway and start
	// its ordering again from there: one message with an
	// implausible (current_wave, step_counter) can hide at most
	// statsResync-1 real ones.
	statsResync = 3
	// maxWaveJump bounds how far past the current wave a wave_complete or
	// start_wave notice may move it. DP rank 0 reports the
	// wave it is in, which is the coordinator's current wave or, after a
	// lost notice, one or two past it.
	maxWaveJump = 4
	// waveResync is how many consecutive wave notices beyond maxWaveJump
	// make the coordinator follow the engines anyway (the newest of them):
	// a coordinator that really fell behind catches up, one forged notice
	// cannot move the wave.
	waveResync = 3
)

// stateConfig configures a [stateMachine]. The zero value means the defaults.
type stateConfig struct {
	// StatsInterval is the publication period while stats change; zero or
	// negative means defaultStatsInterval.
	StatsInterval time.Duration
	// IdleInterval is the publication period when they do not; zero or
	// negative means defaultIdleInterval.
	IdleInterval time.Duration
	// MaxEngines is the largest engine count accepted, at start or from
	// SCALE_ELASTIC_EP. Zero means defaultScaleFactor times the starting
	// engine count, at least defaultMinMaxEngines and at most
	// defaultMaxEngines (the starting count itself may not exceed
	// defaultMaxEngines then); it may not exceed dpwire.MaxEngines. A publication
	// carries one entry per engine, so this also bounds its size (about 13
	// bytes per engine).
	MaxEngines int
	// Release is the vLLM release the coordinator talks to (the zero value
	// is vllm.Latest). Its rules select the stats publication layout
	// (StatsKVCacheUsage: [waiting, running, kv_cache_usage] per engine
	// since vLLM PR #49204, else [waiting, running]; a front-end fails to
	// unpack the other layout), what a front-end wake does
	// (WakeSetsRunning, before vLLM PR #51481) and whether an elastic-EP
	// scale-up marks the engines paused (ScaleUpPauses). See [stateMachine].
	Release vllm.Release
	// DisableWaveCoordination mirrors vLLM's enable_wave_coordination=False
	// (used when the engines do not run in lockstep): front-end wake-ups and
	// the engines' wave_complete/start_wave notices are ignored; only stats
	// are collected and published.
	DisableWaveCoordination bool
}

func (c stateConfig) withDefaults(engines int) stateConfig {
	if c.StatsInterval <= 0 {
		c.StatsInterval = defaultStatsInterval
	}
	if c.IdleInterval <= 0 {
		c.IdleInterval = defaultIdleInterval
	}
	if c.MaxEngines == 0 {
		c.MaxEngines = defaultMaxEngines
		if engines <= defaultMaxEngines/defaultScaleFactor {
			c.MaxEngines = max(defaultScaleFactor*engines, defaultMinMaxEngines)
		}
		if engines > defaultMaxEngines {
			c.MaxEngines = defaultMaxEngines // refused below
		}
	}
	return c
}

// stateActions is what the runtime must do after one input to [stateMachine]. Several
// may be set at once; their order does not matter, as they go to different
// sockets. The zero value means nothing to do.
type stateActions struct {
	// SendReady: send [dpwire.ReadyFrame] on the back publish socket.
	SendReady bool
	// SendStartWave: send START_DP_WAVE(StartWave) on the back publish
	// socket, as the two frames [dpwire.StartDPWaveFrame] and
	// [stateActions.AppendStartDPWave].
	SendStartWave bool
	StartWave     dpwire.StartDPWave
	// PublishWave: publish (nil, Wave, Running) to the front-ends at once
	// ([stateActions.AppendWavePublish]).
	PublishWave bool
	// PublishStats: publish (counts, Wave, Running) to the front-ends
	// (stateMachine.AppendStatsPublish, called before the next input).
	PublishStats bool
	// Wave and Running are the coordinator's wave and running state after
	// the input.
	Wave    int64
	Running bool
}

// None reports whether a requires nothing.
func (a stateActions) None() bool {
	return !a.SendReady && !a.SendStartWave && !a.PublishWave && !a.PublishStats
}

// AppendStartDPWave appends the second frame of a's START_DP_WAVE,
// (wave, exclude_engine_index).
func (a *stateActions) AppendStartDPWave(dst []byte) []byte {
	if a.StartWave.HasExclude && a.StartWave.ExcludeIdentity {
		return dpwire.AppendStartDPWaveIdentity(dst, a.StartWave.Wave, uint16(a.StartWave.Exclude))
	}
	return dpwire.AppendStartDPWaveIndex(dst, a.StartWave.Wave, a.StartWave.Exclude, a.StartWave.HasExclude)
}

// AppendWavePublish appends (nil, Wave, Running).
func (a *stateActions) AppendWavePublish(dst []byte) []byte {
	return dpwire.AppendWavePublish(dst, a.Wave, a.Running)
}

// stateCounters are a [stateMachine]'s event counts since it was made.
type stateCounters struct {
	// StatsApplied counts stats messages whose counts were taken.
	StatsApplied uint64
	// StaleStats counts stats messages ignored because their
	// (current_wave, step_counter) was older than the newest already taken
	// from the same engine (see [stateMachine]).
	StaleStats uint64
	// StartWaves counts START_DP_WAVE broadcasts.
	StartWaves uint64
	// Readies counts READY sends.
	Readies uint64
	// Resizes counts SCALE_ELASTIC_EP notices applied.
	Resizes uint64
	// StatsResyncs counts engines whose stats ordering was restarted after
	// statsResync consecutive stale messages.
	StatsResyncs uint64
	// WaveJumps counts wave notices refused for moving the wave more than
	// maxWaveJump (or to the last representable wave); WaveResyncs the
	// times waveResync such notices in a row were followed anyway.
	WaveJumps   uint64
	WaveResyncs uint64
	// NewerFields counts engine messages whose EngineCoreOutputs array had
	// more elements than the knownOutputsFields this package knows.
	NewerFields uint64
}

// knownOutputsFields is the number of EngineCoreOutputs fields of vLLM main
// of 2026-08-07 (engine_index .. start_wave). A newer vLLM appends fields
// (vLLM PR #51433, open, proposes engine_notifications as the 9th): they
// are read past, as msgspec does, and counted in NewerFields, never a
// reason to drop the message.
const knownOutputsFields = 8

// stateSnapshot is a copy of a [stateMachine]'s published view.
type stateSnapshot struct {
	// Loads holds each engine's [waiting, running, kv_cache_usage], by
	// engine index.
	Loads []EngineLoad
	// Wave is the current wave; Running whether the engines are running.
	Wave    int64
	Running bool
	// Started reports whether READY has been sent after the start-up
	// subscriptions; Subscribed counts those subscriptions.
	Started    bool
	Subscribed int
}

type engineState struct {
	load EngineLoad
	// seen reports whether stats were taken from this engine; lastWave and
	// lastStep are the newest (current_wave, step_counter) taken; stale
	// counts the stale messages since the last one taken.
	seen     bool
	lastWave int64
	lastStep int64
	stale    int
}

// stateMachine is the DP coordinator's state machine: single-threaded, pure (no
// I/O, no clock of its own), one method per input, each returning the
// [stateActions] to take. It follows vLLM's DPCoordinatorProc:
//
//   - Start-up: one "\x01" subscription per engine on the back publish socket
//     (stateMachine.OnBackMessage), then READY. A runtime should not feed engine
//     outputs or front-end messages before stateMachine.Started, as vLLM does not
//     poll those sockets until then.
//   - Stats (stateMachine.OnEngineOutput): engines[engine_index] =
//     [num_waiting_reqs, num_running_reqs, kv_cache_usage], published with
//     or without kv_cache_usage as the release's StatsKVCacheUsage says.
//   - wave_complete = w, when current_wave <= w: current_wave = w+1,
//     running = false, publish (nil, current_wave, running). Otherwise, if
//     there is no wave_complete field, start_wave = w, when w > current_wave
//     or (w == current_wave and not running): current_wave = w, running =
//     true, START_DP_WAVE(w, exclude = engine_index), publish.
//   - Front-end wake (exclude, wave) (stateMachine.OnFrontMessage), when not
//     running: START_DP_WAVE(current_wave, exclude), with the exclusion
//     dropped when wave < current_wave. current_wave is not taken from the
//     wake. Under releases whose rules have WakeSetsRunning (before vLLM PR
//     #51481) the wake also sets running = true and publishes; under later
//     ones (vllm.Latest) it does neither, since a paused engine discards
//     START_DP_WAVE: running becomes true only when DP rank 0 reports
//     start_wave, so a wake during a pause never latches "running".
//   - SCALE_ELASTIC_EP n: the engine list is cut to n or grown with zeroed
//     engines. Under releases whose rules have ScaleUpPauses, growing it
//     while the engines run sets running = false (the new engines start at
//     wave 0, so front-ends must send wake-ups again) and publishes the
//     wave state; the newest vLLM coordinator (vllm.Latest) leaves running
//     alone.
//   - A back-publish "\x01" after start-up (an engine re-subscribing, as new
//     elastic-EP engines do): READY again.
//   - Under the option ",pr54762" (vLLM PR #54762, rules StartWaveAfterReady)
//     the start-up READY is followed by START_DP_WAVE(current_wave = 0,
//     no exclusion) when wave coordination is on; running is unchanged.
//   - stateMachine.Tick: stats are published every StatsInterval while they
//     change and every IdleInterval otherwise.
//
// Where it departs from vLLM, on purpose:
//
//   - Stats ordering. Each engine's newest (current_wave, step_counter)
//     taken is kept. A stats message whose pair is lexicographically smaller
//     is stale: its counts are ignored and StaleStats counts it (the
//     message's wave notices, if any, are still handled). An equal pair is
//     taken (the same step's counts again, idempotent), so engines that do
//     not track steps (pair always (0,0)) are never stale. An engine's
//     (wave, step) only grows within one engine process (step_counter is
//     reset only when its wave advances), so nothing is stale in normal
//     operation. vLLM instead compares every message with the newest pair
//     seen from any engine, logs an "out-of-order" warning (which engines
//     reporting a step apart can trigger in normal operation) and applies
//     the counts anyway; it also publishes a copy of the counts taken at the last step
//     boundary, which is not reproduced here. A restarted engine process
//     starts again at (0, 0): see the resynchronisation rule below.
//   - Stats ordering resynchronises. statsResync consecutive stale messages
//     from one engine restart its ordering from the newest of them (counted
//     in StatsResyncs): one message with an implausible pair (a forged
//     (2^63-1, 2^63-1), or an engine process that restarted at (0, 0)) can
//     hide at most statsResync-1 real messages, never all later ones. vLLM
//     applies every message, in or out of order.
//   - Wave jumps. A wave_complete = w or start_wave = w that would move the
//     wave more than maxWaveJump past the current wave (w+1 resp. w, minus
//     the current wave) is a ReasonValidate drop, counted in WaveJumps, and
//     changes nothing (its stats included); waveResync such notices in a
//     row are followed anyway (a coordinator that fell behind catches up).
//     The wave never exceeds dpwire.MaxWave: a wave_complete at dpwire.MaxWave pauses the
//     engines and keeps the wave, so every later notice and wake at the
//     current wave stays in range. One forged notice can therefore neither
//     move the wave out of the engines' reach nor stop wakes; after a jump
//     the engines follow the coordinator's START_DP_WAVE, which names its
//     wave. vLLM takes any wave.
//   - Engine indexes. A negative engine_index is a ReasonValidate drop
//     (Python's engines[-1] silently updated the last engine). An index
//     >= the engine count is a ReasonUnknownRank drop when the message has
//     stats (vLLM skips such a message too, for elastic EP); a stats-less
//     wave notice from such an engine is handled, as in vLLM, because an
//     engine started by a scale-up may report start_wave before the scale
//     notice arrives. An index >= stateConfig.MaxEngines is always
//     ReasonUnknownRank.
//   - vLLM's asserts: a message with request outputs or a utility output is
//     a ReasonValidate drop instead of a dead coordinator.
//   - Wake exclusions. A 2-byte identity is turned into the engine index it
//     names, and START_DP_WAVE carries that int. vLLM forwards the bytes,
//     which engines compare with their int index, so in vLLM the named
//     engine is never actually left out (harmless: it gets the request
//     anyway). An exclusion that names no current engine is dropped, so
//     every engine is woken.
//   - SCALE_ELASTIC_EP takes n in [1, stateConfig.MaxEngines] only (by
//     default defaultScaleFactor times the starting engine count), and
//     marks the stats as changed so front-ends see the new length within
//     StatsInterval (vLLM waits for the next periodic publication). vLLM
//     takes any count from any front-end; Config.ScaleFrom can restrict
//     who may send it.
//   - Back publish: "\x00" (an unsubscription) is ignored, even during
//     start-up, where vLLM returned; a subscription with a topic is a
//     ReasonValidate drop and anything else a ReasonDecode drop (vLLM logged
//     those after start-up and returned during it).
//   - Publication timing is driven by Tick alone. vLLM publishes only when
//     its poll times out, so a steady stream of input can hold its
//     publication back indefinitely.
type stateMachine struct {
	cfg        stateConfig
	rules      vllm.Rules
	jumps      int // consecutive wave notices beyond maxWaveJump
	engines    []engineState
	wave       int64
	running    bool
	changed    bool
	started    bool
	subscribed int
	published  bool
	lastPub    time.Time
	counters   stateCounters
}

// newStateMachine returns the state of a coordinator for engines engines, waiting
// for their start-up subscriptions. It fails (with an unclassified error:
// this is configuration, not peer input) when engines is not in
// [1, cfg.MaxEngines] or cfg.MaxEngines is out of [1, dpwire.MaxEngines].
func newStateMachine(engines int, cfg stateConfig) (*stateMachine, error) {
	cfg = cfg.withDefaults(engines)
	if cfg.MaxEngines < 1 || cfg.MaxEngines > dpwire.MaxEngines {
		return nil, errors.New("coordinator: stateConfig.MaxEngines out of range")
	}
	if engines < 1 || engines > cfg.MaxEngines {
		return nil, errors.New("coordinator: engine count out of range")
	}
	return &stateMachine{cfg: cfg, rules: cfg.Release.Rules(), engines: make([]engineState, engines, max(engines, 8))}, nil
}

func (s *stateMachine) actions() stateActions { return stateActions{Wave: s.wave, Running: s.running} }

func (s *stateMachine) startWave(a *stateActions, wave, exclude int64, hasExclude, identity bool) {
	a.SendStartWave = true
	a.StartWave = dpwire.StartDPWave{Wave: wave, Exclude: exclude, HasExclude: hasExclude, ExcludeIdentity: hasExclude && identity}
	if !hasExclude {
		a.StartWave.Exclude = 0
	}
	s.counters.StartWaves++
}

var (
	errOutputs       = decodeguard.NewError(decodeguard.ReasonValidate, "engine output carries request outputs: not a coordinator message")
	errUtility       = decodeguard.NewError(decodeguard.ReasonValidate, "engine output carries a utility output: not a coordinator message")
	errUnknownEngine = decodeguard.NewError(decodeguard.ReasonUnknownRank, "stats from an engine index beyond the engine count")
	errUnknownIndex  = decodeguard.NewError(decodeguard.ReasonUnknownRank, "engine index beyond stateConfig.MaxEngines")
	errScaleRange    = decodeguard.NewError(decodeguard.ReasonValidate, "SCALE_ELASTIC_EP engine count out of range")
	errWaveRange     = decodeguard.NewError(decodeguard.ReasonValidate, "wake: wave or exclusion out of range")
	errWaveJump      = decodeguard.NewError(decodeguard.ReasonValidate, "wave notice moves the wave more than maxWaveJump past the current wave")
	errFrontKind     = decodeguard.NewError(decodeguard.ReasonDecode, "unknown front-end message kind")
)

// OnEngineOutput applies one decoded back-output message (see
// [DecodeEngineCoreOutputs]) and returns the actions it calls for, or a
// classified error when the message must be dropped (and then nothing was
// changed, except the wave-jump rule's count of refusals in a row):
// ReasonValidate for request outputs, a utility output, a value out of
// range ([enginecore.Header.Validate]) or a wave notice beyond maxWaveJump,
// ReasonUnknownRank for an engine index the coordinator does not have (see
// [stateMachine] for the exact rules). The returned errors are shared values: compare them with errors.Is
// or [decodeguard.ReasonOf], do not modify them.
func (s *stateMachine) OnEngineOutput(m *enginecore.Header) (stateActions, error) {
	switch {
	case m.OutputsLen != 0:
		return stateActions{}, errOutputs
	case m.HasUtilityOutput:
		return stateActions{}, errUtility
	}
	if err := m.Validate(); err != nil {
		return stateActions{}, err
	}
	if m.Fields > knownOutputsFields {
		s.counters.NewerFields++
	}
	idx := m.EngineIndex
	switch {
	case idx >= int64(s.cfg.MaxEngines):
		return stateActions{}, errUnknownIndex
	case m.HasStats && idx >= int64(len(s.engines)):
		return stateActions{}, errUnknownEngine
	}
	if !s.cfg.DisableWaveCoordination && !s.waveNoticeOK(m) {
		s.counters.WaveJumps++
		return stateActions{}, errWaveJump
	}
	if m.HasStats {
		s.applyStats(&s.engines[idx], &m.Stats)
	}
	a := s.actions()
	if s.cfg.DisableWaveCoordination {
		return a, nil
	}
	if m.HasWaveComplete {
		if w := m.WaveComplete; s.wave <= w {
			s.wave, s.running = nextWave(w), false
			a.PublishWave = true
		}
	} else if m.HasStartWave {
		if w := m.StartWave; w > s.wave || (w == s.wave && !s.running) {
			s.wave, s.running = w, true
			s.startWave(&a, w, idx, true, false)
			a.PublishWave = true
		}
	}
	a.Wave, a.Running = s.wave, s.running
	return a, nil
}

// nextWave is the wave after wave_complete = w: w+1, but at most dpwire.MaxWave,
// so that the wave never leaves the range every notice and wake is checked
// against (a wave_complete at dpwire.MaxWave pauses the engines and keeps the wave).
func nextWave(w int64) int64 {
	if w >= dpwire.MaxWave {
		return dpwire.MaxWave
	}
	return w + 1
}

// waveNoticeOK applies the wave-jump rule (see State) to m's wave notice,
// if any: true when m may be applied.
func (s *stateMachine) waveNoticeOK(m *enginecore.Header) bool {
	var w int64
	switch {
	case m.HasWaveComplete:
		w = nextWave(m.WaveComplete)
	case m.HasStartWave:
		w = m.StartWave
	default:
		return true
	}
	if w <= s.wave || w-s.wave <= maxWaveJump {
		s.jumps = 0
		return true
	}
	s.jumps++
	if s.jumps >= waveResync {
		s.jumps = 0
		s.counters.WaveResyncs++
		return true
	}
	return false
}

// applyStats takes st for engine e unless it is stale (see State).
func (s *stateMachine) applyStats(e *engineState, st *enginecore.SchedulerStats) {
	w, step := st.CurrentWave, st.StepCounter
	if e.seen && (w < e.lastWave || (w == e.lastWave && step < e.lastStep)) {
		s.counters.StaleStats++
		if e.stale++; e.stale < statsResync {
			return
		}
		// statsResync stale messages in a row: the pair taken before was
		// implausible (forged, or an engine process that restarted).
		// Start again from this one.
		s.counters.StatsResyncs++
	}
	e.seen, e.lastWave, e.lastStep, e.stale = true, w, step, 0
	e.load = EngineLoad{Waiting: st.NumWaitingReqs, Running: st.NumRunningReqs, KVCacheUsage: st.KVCacheUsage}
	s.changed = true
	s.counters.StatsApplied++
}

// OnFrontMessage applies one parsed front-end message (see
// [dpwire.ParseFrontMessage]). Subscriptions and unsubscriptions change nothing.
// A scale notice resizes the engine list; a wake-up starts a wave when the
// engines are paused (see [stateMachine]). It returns a ReasonValidate error, and
// changes nothing, for an engine count outside [1, stateConfig.MaxEngines] or a
// wave or exclusion out of range, and ReasonDecode for an unknown Kind.
func (s *stateMachine) OnFrontMessage(msg dpwire.FrontMsg) (stateActions, error) {
	switch msg.Kind {
	case dpwire.FrontSubscribe, dpwire.FrontUnsubscribe:
		return s.actions(), nil
	case dpwire.FrontScale:
		if msg.Engines < 1 || msg.Engines > s.cfg.MaxEngines {
			return stateActions{}, errScaleRange
		}
		grow := msg.Engines > len(s.engines)
		s.resize(msg.Engines)
		s.changed = true
		s.counters.Resizes++
		a := s.actions()
		if grow && s.running && s.rules.ScaleUpPauses && !s.cfg.DisableWaveCoordination {
			// As vLLM before the rule changed: the new engines start at
			// wave 0, so the front-ends must wake the others when they
			// send them a request.
			s.running = false
			a.Running, a.PublishWave = false, true
		}
		s.checkStartup(&a)
		return a, nil
	case dpwire.FrontWake:
		if msg.Wave < 0 || msg.Wave > dpwire.MaxWave || (msg.HasExclude && msg.Exclude < 0) {
			return stateActions{}, errWaveRange
		}
		a := s.actions()
		if s.cfg.DisableWaveCoordination || s.running {
			return a, nil
		}
		exclude := msg.HasExclude && msg.Wave >= s.wave && msg.Exclude < int64(len(s.engines))
		s.startWave(&a, s.wave, msg.Exclude, exclude, msg.ExcludeIdentity)
		if s.rules.WakeSetsRunning {
			s.running = true
			a.PublishWave, a.Running = true, true
		}
		return a, nil
	}
	return stateActions{}, errFrontKind
}

// resize cuts the engine list to n or grows it with zeroed engines; the
// survivors keep their counts and their stats ordering.
func (s *stateMachine) resize(n int) {
	if n <= len(s.engines) {
		clear(s.engines[n:])
		s.engines = s.engines[:n]
		return
	}
	for len(s.engines) < n {
		s.engines = append(s.engines, engineState{})
	}
}

// OnBackMessage applies one frame received on the back publish (XPUB)
// socket: "\x01" is an engine's subscription (stateMachine.OnBackSubscribe),
// "\x00" an unsubscription (ignored). A subscription with a topic is a
// ReasonValidate error (engines subscribe to everything; this is some other
// peer) and any other frame a ReasonDecode error; neither changes anything,
// during start-up or after.
func (s *stateMachine) OnBackMessage(b []byte) (stateActions, error) {
	if err := dpwire.CheckBackMessage(b); err != nil {
		return stateActions{}, err
	}
	if b[0] == 0x01 {
		return s.OnBackSubscribe(), nil
	}
	return s.actions(), nil
}

// OnBackSubscribe applies an engine's subscription on the back publish
// socket. During start-up it counts it and, with one per engine, sends
// READY; after start-up (an engine re-subscribing, or a new elastic-EP
// engine) it sends READY again.
func (s *stateMachine) OnBackSubscribe() stateActions {
	a := s.actions()
	if s.started {
		a.SendReady = true
		s.counters.Readies++
		return a
	}
	s.subscribed++
	s.checkStartup(&a)
	return a
}

func (s *stateMachine) checkStartup(a *stateActions) {
	if !s.started && s.subscribed >= len(s.engines) {
		s.started = true
		a.SendReady = true
		s.counters.Readies++
		if s.rules.StartWaveAfterReady && !s.cfg.DisableWaveCoordination && !s.running {
			// vLLM PR #54762 (option ",pr54762"): START_DP_WAVE for the
			// current wave (0 at start-up), no engine excluded, right after
			// READY, so headless engine ranks step before the first
			// request. Like vLLM's _send_start_wave it leaves running
			// alone: rank 0's wave_complete ends the wave as usual.
			s.startWave(a, s.wave, 0, false, false)
		}
	}
}

// Tick tells the state the time is now and returns PublishStats when a stats
// publication is due: at the first Tick after start-up, then StatsInterval
// after the last publication if stats changed since, else IdleInterval
// after it. Nothing is published before stateMachine.Started. now should come
// from a monotonic clock (time.Now() has one); a now earlier than the last
// publication publishes nothing.
func (s *stateMachine) Tick(now time.Time) stateActions {
	a := s.actions()
	if !s.started {
		return a
	}
	if s.published && now.Before(s.nextTick()) {
		return a
	}
	s.published, s.lastPub, s.changed = true, now, false
	a.PublishStats = true
	return a
}

// NextTick returns when the next stats publication is due (the zero Time
// when it is due at once), assuming no new stats arrive: the runtime's
// timer should fire then, and again after any input that changed stats.
func (s *stateMachine) NextTick() time.Time {
	if !s.published {
		return time.Time{}
	}
	return s.nextTick()
}

func (s *stateMachine) nextTick() time.Time {
	if s.changed {
		return s.lastPub.Add(s.cfg.StatsInterval)
	}
	return s.lastPub.Add(s.cfg.IdleInterval)
}

// AppendStatsPublish appends the stats publication (counts, current_wave,
// engines_running) in the layout stateConfig.Release selects, with
// the current counts, wave and running state.
func (s *stateMachine) AppendStatsPublish(dst []byte) []byte {
	return appendStatsState(dst, s.engines, s.rules.StatsKVCacheUsage, s.wave, s.running)
}

func appendStatsState(dst []byte, engines []engineState, kv bool, wave int64, running bool) []byte {
	dst = dpwire.AppendStatsHeader(dst, len(engines))
	for i := range engines {
		l := &engines[i].load
		dst = dpwire.AppendLoad(dst, l.Waiting, l.Running, l.KVCacheUsage, kv)
	}
	return dpwire.AppendStatsTrailer(dst, wave, running)
}

// Wave returns the current wave.
func (s *stateMachine) Wave() int64 { return s.wave }

// Running reports whether the engines are running.
func (s *stateMachine) Running() bool { return s.running }

// Started reports whether READY has been sent after start-up.
func (s *stateMachine) Started() bool { return s.started }

// Engines returns the current engine count.
func (s *stateMachine) Engines() int { return len(s.engines) }

// MaxEngines returns the largest engine count accepted (stateConfig.MaxEngines
// after defaults).
func (s *stateMachine) MaxEngines() int { return s.cfg.MaxEngines }

// stateCounters returns the event counts.
func (s *stateMachine) stateCounters() stateCounters { return s.counters }

// stateSnapshot returns a copy of the published view.
func (s *stateMachine) stateSnapshot() stateSnapshot {
	loads := make([]EngineLoad, len(s.engines))
	for i := range s.engines {
		loads[i] = s.engines[i].load
	}
	return stateSnapshot{Loads: loads, Wave: s.wave, Running: s.running, Started: s.started, Subscribed: s.subscribed}
}
