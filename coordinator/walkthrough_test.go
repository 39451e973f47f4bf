package coordinator

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// TestStateWalkthrough walks a two-engine state machine through start-up, a
// stats report, a scanner's junk frame, a front-end wake-up and a stats
// publication, with the bytes of every message it calls for.
func TestStateWalkthrough(t *testing.T) {
	var out strings.Builder
	s, err := newStateMachine(2, stateConfig{})
	if err != nil {
		t.Fatal(err)
	}

	// Start-up: each engine subscribes on the back publish socket; READY goes
	// out after the last one. A stray subscription to a topic is dropped.
	for _, frame := range []string{"\x01", "\x01probe", "\x01"} {
		a, err := s.OnBackMessage([]byte(frame))
		fmt.Fprintf(&out, "back %q: ready=%v drop=%v\n", frame, a.SendReady, decodeguard.ReasonOf(err))
	}

	// Engine 1 reports its queues (the frame as vLLM's engine sends it).
	frame := dpwire.AppendHeader(nil, &enginecore.Header{
		EngineIndex: 1, HasStats: true, Timestamp: 12345.678,
		Stats: enginecore.SchedulerStats{NumWaitingReqs: 5, NumRunningReqs: 3, StepCounter: 42},
	})
	var m enginecore.Header
	if err := enginecore.DecodeHeader(frame, nil, &m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OnEngineOutput(&m); err != nil {
		t.Fatal(err)
	}

	// A port scanner's probe on the same socket is a classified drop.
	err = enginecore.DecodeHeader([]byte{0x45}, nil, &m)
	fmt.Fprintln(&out, "junk frame:", decodeguard.ReasonOf(err))

	// A front-end sends a request to engine 0 while the engines are paused,
	// and asks the coordinator to wake the others.
	msg, err := dpwire.ParseFrontMessage(dpwire.AppendWakeIdentity(nil, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.OnFrontMessage(msg)
	// The identity is forwarded as it came (bin 0000), as vLLM's
	// coordinator does (golden vector co-start-dp-wave-bytes).
	fmt.Fprintf(&out, "START_DP_WAVE %x | %x\n", dpwire.StartDPWaveFrame, a.AppendStartDPWave(nil))
	// Current vLLM (PR #51481): the wake proves nothing, as a paused engine
	// discards START_DP_WAVE; running waits for DP rank 0's start_wave.
	fmt.Fprintln(&out, "running after the wake:", a.Running, "publish:", a.PublishWave)
	a, _ = s.OnEngineOutput(&enginecore.Header{EngineIndex: 0, HasStartWave: true, StartWave: 0})
	fmt.Fprintf(&out, "rank 0 start_wave: START_DP_WAVE %x, to front-ends: %x\n", a.AppendStartDPWave(nil), a.AppendWavePublish(nil))

	// The periodic publication, in the latest layout:
	// ([[0, 0, 0.0], [5, 3, 0.0]], 0, True).
	if s.Tick(time.Now()).PublishStats {
		fmt.Fprintln(&out, "stats:", hex.EncodeToString(s.AppendStatsPublish(nil)))
	}
	want := `back "\x01": ready=false drop=none
back "\x01probe": ready=false drop=validate
back "\x01": ready=true drop=none
junk frame: decode
START_DP_WAVE 02 | 9200c4020000
running after the wake: false publish: false
rank 0 start_wave: START_DP_WAVE 920000, to front-ends: 93c000c3
stats: 9392930000cb0000000000000000930503cb000000000000000000c3
`
	if got := out.String(); got != want {
		t.Errorf("walkthrough:\n%s\nwant:\n%s", got, want)
	}
}
