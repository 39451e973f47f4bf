package coordinator

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/vllm"
)

// goldenValues is the part of a coordinator vector's values these tests
// read. Decoded stays raw: its shape depends on the message.
type goldenValues struct {
	Message string          `json:"message"`
	Decoded json.RawMessage `json:"decoded"`
}

type hexBytes struct {
	Hex string `json:"hex"`
}

// TestGoldenCoordinator parses every coordinator vector (bytes captured on
// the sockets of vLLM's own DPCoordinatorProc and front-end at the vectors'
// commit) with this package's parsers, compares with values, and encodes
// the values with the encoders the coordinator and its peer helpers use,
// byte for byte.
func TestGoldenCoordinator(t *testing.T) {
	vs := golden.Load(t, "coordinator")
	kinds := map[string]int{}
	for _, v := range vs {
		t.Run(v.ID, func(t *testing.T) {
			frames, err := v.Frames()
			if err != nil {
				t.Fatal(err)
			}
			var vals goldenValues
			if err := json.Unmarshal(v.Values, &vals); err != nil {
				t.Fatal(err)
			}
			kinds[vals.Message]++
			if !v.ByteExact {
				t.Fatalf("vector not byte_exact")
			}
			switch vals.Message {
			case "xpub_subscribe":
				if len(frames) != 1 || !bytes.Equal(frames[0], []byte{0x01}) {
					t.Fatalf("frames %x", frames)
				}
				if m, err := dpwire.ParseFrontMessage(frames[0]); err != nil || m.Kind != dpwire.FrontSubscribe || len(m.Topic) != 0 {
					t.Fatalf("ParseFrontMessage: %+v, %v", m, err)
				}
				if err := dpwire.CheckBackMessage(frames[0]); err != nil {
					t.Fatalf("CheckBackMessage: %v", err)
				}
			case "ready":
				if len(frames) != 1 || string(frames[0]) != dpwire.ReadyFrame {
					t.Fatalf("frames %x, dpwire.ReadyFrame %x", frames, dpwire.ReadyFrame)
				}
			case "stats_publication":
				goldenPublication(t, frames, vals.Decoded)
			case "front_wake":
				goldenWake(t, frames, vals.Decoded)
			case "scale_elastic_ep":
				var d [2]any
				mustJSON(t, vals.Decoded, &d)
				m, err := dpwire.ParseFrontMessage(frames[0])
				if err != nil || m.Kind != dpwire.FrontScale || float64(m.Engines) != d[1].(float64) {
					t.Fatalf("ParseFrontMessage: %+v, %v; want %v", m, err, d)
				}
				if got := dpwire.AppendScaleElasticEP(nil, m.Engines); !bytes.Equal(got, frames[0]) {
					t.Fatalf("AppendScaleElasticEP %x, vLLM %x", got, frames[0])
				}
			case "first_req":
				// The front-end's own inproc message, never sent to a
				// coordinator: a coordinator receiving it drops it.
				if _, err := dpwire.ParseFrontMessage(frames[0]); err == nil {
					t.Fatalf("FIRST_REQ accepted as a coordinator message")
				}
			case "start_dp_wave":
				goldenStartWave(t, frames, vals.Decoded)
			case "engine_core_outputs":
				goldenEngineOutputs(t, frames, vals.Decoded)
			default:
				t.Fatalf("message kind %q has no test", vals.Message)
			}
		})
	}
	want := map[string]int{"xpub_subscribe": 2, "ready": 1, "stats_publication": 6, "engine_core_outputs": 5,
		"front_wake": 2, "scale_elastic_ep": 1, "first_req": 1, "start_dp_wave": 3}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s vectors, want %d", kinds[k], k, n)
		}
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func goldenPublication(t *testing.T, frames [][]byte, decoded json.RawMessage) {
	t.Helper()
	var d struct {
		Counts  [][3]float64
		Wave    int64
		Running bool
	}
	var raw [3]json.RawMessage
	mustJSON(t, decoded, &raw)
	mustJSON(t, raw[0], &d.Counts)
	mustJSON(t, raw[1], &d.Wave)
	mustJSON(t, raw[2], &d.Running)
	var p dpwire.Publication
	if err := dpwire.ParsePublication(frames[0], &p); err != nil {
		t.Fatal(err)
	}
	if p.Wave != d.Wave || p.Running != d.Running || p.HasCounts != (d.Counts != nil) || len(p.Loads) != len(d.Counts) {
		t.Fatalf("parsed %+v, want %+v", p, d)
	}
	var enc []byte
	if p.HasCounts {
		if !p.KV {
			t.Fatalf("entries parsed without kv_cache_usage")
		}
		loads := make([]dpwire.Load, len(d.Counts))
		for i, c := range d.Counts {
			loads[i] = dpwire.Load{Waiting: int64(c[0]), Running: int64(c[1]), KVCacheUsage: c[2]}
			if p.Loads[i] != loads[i] {
				t.Fatalf("engine %d: %+v, want %+v", i, p.Loads[i], loads[i])
			}
		}
		enc = dpwire.AppendStatsPublishKV(nil, loads, int(d.Wave), d.Running)
	} else {
		enc = dpwire.AppendWavePublish(nil, d.Wave, d.Running)
	}
	if !bytes.Equal(enc, frames[0]) {
		t.Fatalf("encoded %x, vLLM %x", enc, frames[0])
	}
}

func goldenWake(t *testing.T, frames [][]byte, decoded json.RawMessage) {
	t.Helper()
	var raw [2]json.RawMessage
	mustJSON(t, decoded, &raw)
	var id hexBytes
	var wave int
	mustJSON(t, raw[0], &id)
	mustJSON(t, raw[1], &wave)
	m, err := dpwire.ParseFrontMessage(frames[0])
	if err != nil || m.Kind != dpwire.FrontWake || !m.HasExclude || !m.ExcludeIdentity || m.Wave != int64(wave) || id.Hex != "0000" || m.Exclude != 0 {
		t.Fatalf("ParseFrontMessage: %+v, %v; want identity %s wave %d", m, err, id.Hex, wave)
	}
	if got := dpwire.AppendWakeIdentity(nil, uint16(m.Exclude), wave); !bytes.Equal(got, frames[0]) {
		t.Fatalf("AppendWakeIdentity %x, vLLM %x", got, frames[0])
	}
}

func goldenStartWave(t *testing.T, frames [][]byte, decoded json.RawMessage) {
	t.Helper()
	if len(frames) != 2 || string(frames[0]) != dpwire.StartDPWaveFrame {
		t.Fatalf("frames %x", frames)
	}
	var raw [2]json.RawMessage
	mustJSON(t, decoded, &raw)
	var wave int
	mustJSON(t, raw[0], &wave)
	sw, err := dpwire.ParseStartDPWave(frames[1])
	if err != nil {
		t.Fatalf("ParseStartDPWave: %v", err)
	}
	want := dpwire.StartDPWave{Wave: int64(wave)}
	switch {
	case bytes.Equal(raw[1], []byte("null")):
	case raw[1][0] == '{':
		var id hexBytes
		mustJSON(t, raw[1], &id)
		if id.Hex != "0000" {
			t.Fatalf("identity %s", id.Hex)
		}
		want.HasExclude, want.ExcludeIdentity = true, true
	default:
		mustJSON(t, raw[1], &want.Exclude)
		want.HasExclude = true
	}
	if sw != want {
		t.Fatalf("parsed %+v, want %+v", sw, want)
	}
	// The coordinator's own encoder (stateActions) and enginecore's.
	a := stateActions{StartWave: want}
	if got := a.AppendStartDPWave(nil); !bytes.Equal(got, frames[1]) {
		t.Fatalf("coordinator writes %x, vLLM %x", got, frames[1])
	}
	var got []byte
	switch {
	case want.ExcludeIdentity:
		got = dpwire.AppendStartDPWaveIdentity(nil, int64(wave), uint16(want.Exclude))
	case want.HasExclude:
		x := int(want.Exclude)
		got = dpwire.AppendStartDPWave(nil, wave, &x)
	default:
		got = dpwire.AppendStartDPWave(nil, wave, nil)
	}
	if !bytes.Equal(got, frames[1]) {
		t.Fatalf("enginecore writes %x, vLLM %x", got, frames[1])
	}
}

func goldenEngineOutputs(t *testing.T, frames [][]byte, decoded json.RawMessage) {
	t.Helper()
	var d struct {
		EngineIndex    int64 `json:"engine_index"`
		SchedulerStats *struct {
			Running  int64   `json:"num_running_reqs"`
			Waiting  int64   `json:"num_waiting_reqs"`
			Skipped  int64   `json:"num_skipped_waiting_reqs"`
			Step     int64   `json:"step_counter"`
			Wave     int64   `json:"current_wave"`
			KVCache  float64 `json:"kv_cache_usage"`
			Iter     any     `json:"iteration_details"`
			Eviction []any   `json:"kv_cache_eviction_events"`
		} `json:"scheduler_stats"`
		Timestamp    float64 `json:"timestamp"`
		WaveComplete *int64  `json:"wave_complete"`
		StartWave    *int64  `json:"start_wave"`
		Outputs      []any   `json:"outputs"`
	}
	mustJSON(t, decoded, &d)
	var h enginecore.Header
	if err := enginecore.DecodeHeader(frames[0], nil, &h); err != nil {
		t.Fatal(err)
	}
	want := enginecore.Header{Fields: 8, EngineIndex: d.EngineIndex, Timestamp: d.Timestamp}
	if s := d.SchedulerStats; s != nil {
		want.HasStats = true
		want.Stats = enginecore.SchedulerStats{NumRunningReqs: s.Running, NumWaitingReqs: s.Waiting,
			NumSkippedWaitingReqs: s.Skipped, StepCounter: s.Step, CurrentWave: s.Wave, KVCacheUsage: s.KVCache}
	}
	if d.WaveComplete != nil {
		want.HasWaveComplete, want.WaveComplete = true, *d.WaveComplete
	}
	if d.StartWave != nil {
		want.HasStartWave, want.StartWave = true, *d.StartWave
	}
	if h != want || len(d.Outputs) != 0 || math.IsNaN(h.Timestamp) {
		t.Fatalf("decoded %+v\nwant %+v", h, want)
	}
	// The peer helpers' encoder writes the same bytes (default stats
	// fields, as these engines sent them).
	if got := dpwire.AppendHeader(nil, &h); !bytes.Equal(got, frames[0]) {
		t.Fatalf("AppendHeader %x\nvLLM %x", got, frames[0])
	}
}

// TestGoldenSession replays, under the main-pre-50620 profile (the
// vectors' commit), the session the coordinator vectors were captured in,
// through the coordinator's state machine: every START_DP_WAVE and
// publication it produces is byte for byte what vLLM's coordinator sent.
func TestGoldenSession(t *testing.T) {
	byID := map[string][][]byte{}
	for _, v := range golden.Load(t, "coordinator") {
		f, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		byID[v.ID] = f
	}
	frame := func(id string, i int) []byte {
		t.Helper()
		f, ok := byID[id]
		if !ok || len(f) <= i {
			t.Fatalf("vector %s frame %d missing", id, i)
		}
		return f[i]
	}
	engine := func(id string) *enginecore.Header {
		t.Helper()
		var h enginecore.Header
		if err := enginecore.DecodeHeader(frame(id, 0), nil, &h); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return &h
	}
	front := func(id string) dpwire.FrontMsg {
		t.Helper()
		m, err := dpwire.ParseFrontMessage(frame(id, 0))
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return m
	}
	same := func(what string, got []byte, id string, i int) {
		t.Helper()
		if want := frame(id, i); !bytes.Equal(got, want) {
			t.Fatalf("%s: coordinator writes %x, vLLM wrote %x (%s)", what, got, want, id)
		}
	}
	s := newStarted(t, 2, stateConfig{Release: vllm.MustParse("main-pre-50620")})
	same("first publication", s.AppendStatsPublish(nil), "co-pub-initial", 0)

	for _, id := range []string{"co-engine-stats-lockstep", "co-engine-stats-engine1"} {
		if _, err := s.OnEngineOutput(engine(id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	same("stats publication", s.AppendStatsPublish(nil), "co-pub-stats", 0)

	a, err := s.OnFrontMessage(front("co-front-wake"))
	if err != nil || !a.SendStartWave || !a.PublishWave {
		t.Fatalf("wake: %+v %v", a, err)
	}
	same("START_DP_WAVE after the wake", a.AppendStartDPWave(nil), "co-start-dp-wave-bytes", 1)
	same("publication after the wake", a.AppendWavePublish(nil), "co-pub-wave-running", 0)

	a, err = s.OnEngineOutput(engine("co-engine-wave-complete"))
	if err != nil || !a.PublishWave || a.SendStartWave {
		t.Fatalf("wave_complete: %+v %v", a, err)
	}
	same("publication after wave_complete", a.AppendWavePublish(nil), "co-pub-wave-complete", 0)

	a, err = s.OnEngineOutput(engine("co-engine-start-wave"))
	if err != nil || !a.SendStartWave || !a.PublishWave {
		t.Fatalf("start_wave: %+v %v", a, err)
	}
	same("START_DP_WAVE after start_wave", a.AppendStartDPWave(nil), "co-start-dp-wave-int", 1)
	same("publication after start_wave", a.AppendWavePublish(nil), "co-pub-start-wave", 0)

	// Wave 1 completes; a front-end still at wave 1 wakes the engines: the
	// exclusion is dropped for a stale wave.
	if _, err := s.OnEngineOutput(waveCompleteMsg(0, 1)); err != nil {
		t.Fatal(err)
	}
	a, err = s.OnFrontMessage(front("co-front-wake-stale"))
	if err != nil || !a.SendStartWave {
		t.Fatalf("stale wake: %+v %v", a, err)
	}
	same("START_DP_WAVE after a stale wake", a.AppendStartDPWave(nil), "co-start-dp-wave-none", 1)
}
