package coordinator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/vllm"
)

const python = "/usr/bin/python3"

// requirePythonMsgpack skips the test, loudly, when Debian's python3 with
// python3-msgpack is not there (the README's documented interop case).
func requirePythonMsgpack(t *testing.T) {
	t.Helper()
	pypeer.Require(t, "msgpack")
}

func runLayout(t *testing.T, mode string, stdin []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/vllm_layout.py", mode)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vllm_layout.py %s: %v\n%s", mode, err, stderr.String())
	}
	return out
}

type layoutCase struct {
	Kind   string          `json:"kind"`
	Name   string          `json:"name"`
	Hex    string          `json:"hex"`
	Want   json.RawMessage `json:"want"`
	Reason string          `json:"reason"`
}

// TestPythonBuiltMessages decodes messages that Python's msgpack builds in
// vLLM's exact layouts (every current SchedulerStats field, nested
// prefix_cache_stats, None-valued optional stats, older and forked field
// sets, wide integers) and front-end messages, plus the hazards of the seed
// reports.
func TestPythonBuiltMessages(t *testing.T) {
	requirePythonMsgpack(t)
	out := runLayout(t, "gen", nil)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var c layoutCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		n++
		raw, err := hex.DecodeString(c.Hex)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(c.Kind+"/"+c.Name, func(t *testing.T) {
			var gotErr error
			switch c.Kind {
			case "eco":
				var got enginecore.Header
				gotErr = enginecore.DecodeHeader(raw, nil, &got)
				if c.Reason == "" {
					if gotErr != nil {
						t.Fatalf("decode: %v", gotErr)
					}
					var want enginecore.Header
					if err := json.Unmarshal(c.Want, &want); err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("decoded\n got %+v\nwant %+v", got, want)
					}
					// The state machine takes it, or drops a front-end
					// message (or a wave notice that jumps more than
					// maxWaveJump past wave 0) with a classified error.
					s := newStarted(t, 256, stateConfig{})
					_, err := s.OnEngineOutput(&got)
					jump := (got.HasWaveComplete && got.WaveComplete+1 > maxWaveJump) ||
						(!got.HasWaveComplete && got.HasStartWave && got.StartWave > maxWaveJump)
					if frontEnd := got.OutputsLen > 0 || got.HasUtilityOutput; (frontEnd || jump) != (err != nil) {
						t.Fatalf("OnEngineOutput: %v", err)
					}
				}
			case "front":
				got, err := dpwire.ParseFrontMessage(raw)
				gotErr = err
				if c.Reason == "" {
					if err != nil {
						t.Fatalf("parse: %v", err)
					}
					var want dpwire.FrontMsg
					if err := json.Unmarshal(c.Want, &want); err != nil {
						t.Fatal(err)
					}
					if got.Kind != want.Kind || got.Engines != want.Engines || got.Wave != want.Wave ||
						got.HasExclude != want.HasExclude || got.Exclude != want.Exclude || got.ExcludeIdentity != want.ExcludeIdentity {
						t.Fatalf("parsed\n got %+v\nwant %+v", got, want)
					}
				}
			default:
				t.Fatalf("unknown kind %q", c.Kind)
			}
			if c.Reason != "" {
				var r decodeguard.Reason
				if r.UnmarshalText([]byte(c.Reason)) != nil {
					t.Fatalf("bad reason %q", c.Reason)
				}
				if decodeguard.ReasonOf(gotErr) != r {
					t.Fatalf("error %v, want reason %v", gotErr, r)
				}
				checkSafeText(t, gotErr.Error())
			}
		})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 30 {
		t.Fatalf("only %d cases from vllm_layout.py", n)
	}
}

// TestPythonReadsGoEncodings has Python's msgpack decode what the Go
// encoders produce, checks the value, and checks that Python re-encodes it
// to the identical bytes (so the Go encoders pick Python's encodings).
// defaultStatsRepr is Python's repr of the SchedulerStats fields zmqguard
// writes at their defaults (vLLM main of 2026-08-07).
const defaultStatsRepr = "'iteration_details': None, 'prefix_cache_stats': {'reset': False, 'requests': 0, 'queries': 0, " +
	"'hits': 0, 'preempted_requests': 0, 'preempted_queries': 0, 'preempted_hits': 0}, 'connector_prefix_cache_stats': None, " +
	"'kv_cache_eviction_events': [], 'spec_decoding_stats': None, 'kv_connector_stats': None, 'waiting_lora_adapters': {}, " +
	"'running_lora_adapters': {}, 'cudagraph_stats': None, 'perf_stats': None"

func TestPythonReadsGoEncodings(t *testing.T) {
	requirePythonMsgpack(t)
	two, big := 2, 300
	state := newStarted(t, 2, stateConfig{Release: vllm.Latest()})
	m := statsMsg(1, 4, 9, 0, 3)
	m.Stats.KVCacheUsage = 0.5
	if _, err := state.OnEngineOutput(m); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		b    []byte
		repr string
	}{
		{"stats publish", dpwire.AppendStatsPublish(nil, [][2]int{{5, 3}, {0, 1}}, 7, true), "[[[5, 3], [0, 1]], 7, True]"},
		{"stats publish kv", dpwire.AppendStatsPublishKV(nil, []dpwire.Load{{Waiting: 5, Running: 3, KVCacheUsage: 0.25}, {Waiting: 0, Running: 1, KVCacheUsage: 0}}, 7, true), "[[[5, 3, 0.25], [0, 1, 0.0]], 7, True]"},
		{"state publish kv", state.AppendStatsPublish(nil), "[[[0, 0, 0.0], [4, 9, 0.5]], 0, False]"},
		{"wave publish", dpwire.AppendWavePublish(nil, 7, false), "[None, 7, False]"},
		{"start dp wave", dpwire.AppendStartDPWave(nil, 7, &two), "[7, 2]"},
		{"start dp wave nil", dpwire.AppendStartDPWave(nil, 1<<40, nil), "[1099511627776, None]"},
		{"scale", dpwire.AppendScaleElasticEP(nil, 4), "['SCALE_ELASTIC_EP', 4]"},
		{"wake identity", dpwire.AppendWakeIdentity(nil, 2, 7), `[b'\x02\x00', 7]`},
		{"wake int", dpwire.AppendWake(nil, &big, 1<<33), "[300, 8589934592]"},
		{"eco minimal stats", dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: 1, HasStats: true, Timestamp: ts,
			Stats: enginecore.SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7}}),
			"[1, [], {'num_running_reqs': 3, 'num_waiting_reqs': 5, 'num_skipped_waiting_reqs': 0, 'step_counter': 42, " +
				"'current_wave': 7, 'kv_cache_usage': 0.0, " + defaultStatsRepr + "}, 12345.678, None, None, None, None]"},
		{"eco wave complete", dpwire.AppendHeader(nil, &enginecore.Header{Timestamp: ts, HasWaveComplete: true, WaveComplete: 7}),
			"[0, [], None, 12345.678, None, None, 7, None]"},
		{"eco wide", dpwire.AppendHeader(nil, &enginecore.Header{EngineIndex: 200, HasStats: true, Timestamp: 5e9,
			Stats: enginecore.SchedulerStats{NumRunningReqs: 70000, NumWaitingReqs: 300, NumSkippedWaitingReqs: 2, StepCounter: 1 << 40,
				CurrentWave: 65536, KVCacheUsage: 1, EncoderCacheUsage: 0.5}}),
			"[200, [], {'num_running_reqs': 70000, 'num_waiting_reqs': 300, 'num_skipped_waiting_reqs': 2, " +
				"'step_counter': 1099511627776, 'current_wave': 65536, 'kv_cache_usage': 1.0, " + defaultStatsRepr +
				", 'encoder_cache_usage': 0.5}, 5000000000.0, None, None, None, None]"},
	}
	var in bytes.Buffer
	want := map[string]string{}
	for _, c := range cases {
		line, _ := json.Marshal(map[string]string{"name": c.name, "hex": hex.EncodeToString(c.b)})
		in.Write(append(line, '\n'))
		want[c.name] = c.repr
	}
	out := runLayout(t, "check", in.Bytes())
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Name string `json:"name"`
			Repr string `json:"repr"`
			Same bool   `json:"same"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		seen++
		if r.Repr != want[r.Name] {
			t.Errorf("%s: Python reads %s, want %s", r.Name, r.Repr, want[r.Name])
		}
		if !r.Same {
			t.Errorf("%s: Python re-encodes it to different bytes", r.Name)
		}
	}
	if seen != len(cases) {
		t.Fatalf("Python answered %d of %d cases", seen, len(cases))
	}
}

// TestLayoutScriptPresent keeps the interop script from being dropped
// silently: the skip above is only for a missing Python package.
func TestLayoutScriptPresent(t *testing.T) {
	if _, err := os.Stat("testdata/vllm_layout.py"); err != nil {
		t.Fatal(err)
	}
}

// requirePyzmq skips the test, loudly, when Debian's python3 cannot import
// zmq and msgpack (the documented interop case).
func requirePyzmq(t *testing.T) {
	t.Helper()
	pypeer.Require(t, "zmq", "msgpack")
}

// TestPythonPeersInterop runs libzmq engines and a libzmq front-end
// (testdata/dp_peers.py) against the Go coordinator, under the oldest and
// the latest release profile: READY at every engine, stats in vLLM's full
// SchedulerStats layout published with the right counts and unpacked by
// the release's front-end (two or three values per engine), and the wave
// round trip (wake-up by engine identity, wave_complete, start_wave) with
// START_DP_WAVE at every engine. Under latest (vLLM PR #51481) no
// publication claims running after a wake until rank 0's start_wave, and
// none during the pause after a wave.
func TestPythonPeersInterop(t *testing.T) {
	requirePyzmq(t)
	for _, tc := range []struct {
		name    string
		release vllm.Release
	}{{"old", vllm.Releases()[0]}, {"latest", vllm.Latest()}} {
		t.Run(tc.name, func(t *testing.T) { runPythonPeers(t, tc.name, tc.release) })
	}
}

func runPythonPeers(t *testing.T, mode string, release vllm.Release) {
	cfg := testConfig(2)
	cfg.Release = release
	h := startCoordinator(t, cfg)
	arg, _ := json.Marshal(map[string]any{
		"front": h.c.FrontEndpoint(), "back_output": h.c.BackOutputEndpoint(),
		"back_publish": h.c.BackPublishEndpoint(), "engines": 2, "release": mode,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/dp_peers.py", string(arg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		h.failIfEnded(t)
		t.Fatalf("dp_peers.py: %v\n%s\ncoordinator stats %+v", err, stderr.String(), h.c.Stats())
	}
	var got struct {
		Ready          [][]string `json:"ready"`
		Stats          []any      `json:"stats"`
		WakeStart      [][]any    `json:"wake_start"`
		AfterWakePubs  int        `json:"after_wake_pubs"`
		Rank0Start     [][]any    `json:"rank0_start"`
		WakePub        []any      `json:"wake_pub"`
		CompletePub    []any      `json:"complete_pub"`
		PausePubs      int        `json:"pause_pubs"`
		EngineStart    [][]any    `json:"engine_start"`
		EngineStartPub []any      `json:"engine_start_pub"`
		Unpacked       int        `json:"unpacked"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	text := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	stats := `[[[5,1],[6,3]],0,false]`
	if mode == "latest" {
		stats = `[[[5,1,0.125],[6,3,0.25]],0,false]`
	}
	checks := []struct{ name, got, want string }{
		{"ready", text(got.Ready), `[["READY"],["READY"]]`},
		{"stats", text(got.Stats), stats},
		{"wake START_DP_WAVE", text(got.WakeStart), `[[0,{"hex":"0100"}],[0,{"hex":"0100"}]]`},
		{"wake publication", text(got.WakePub), `[null,0,true]`},
		{"wave_complete publication", text(got.CompletePub), `[null,1,false]`},
		{"start_wave START_DP_WAVE", text(got.EngineStart), `[[2,1],[2,1]]`},
		{"start_wave publication", text(got.EngineStartPub), `[null,2,true]`},
	}
	if mode == "latest" {
		checks = append(checks, struct{ name, got, want string }{"rank 0 start_wave START_DP_WAVE", text(got.Rank0Start), `[[0,0],[0,0]]`})
		if got.AfterWakePubs == 0 || got.PausePubs == 0 {
			t.Errorf("no publications observed after the wake (%d) or during the pause (%d)", got.AfterWakePubs, got.PausePubs)
		}
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: Python peers saw %s, want %s", c.name, c.got, c.want)
		}
	}
	if got.Unpacked == 0 {
		t.Error("the front-end unpacked no stats publication")
	}
	st := h.c.Stats()
	wantStarts := uint64(2)
	if mode == "latest" {
		wantStarts = 3
	}
	if st.Dropped != 0 || st.StatsApplied != 2 || st.StartWaveSent != wantStarts || st.ReadySent != 1 {
		t.Fatalf("coordinator stats %+v drops %v", st, dropsOf(st.Drops))
	}
	if s := h.c.stateSnapshot(); s.Wave != 2 || !s.Running || s.Loads[1] != (EngineLoad{Waiting: 6, Running: 3, KVCacheUsage: 0.25}) {
		t.Fatalf("snapshot %+v", s)
	}
}

// TestPeersScriptPresent keeps the interop script from being dropped
// silently: the skip above is only for a missing Python package.
func TestPeersScriptPresent(t *testing.T) {
	if _, err := os.Stat("testdata/dp_peers.py"); err != nil {
		t.Fatal(err)
	}
}
