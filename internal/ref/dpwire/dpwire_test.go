package dpwire_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The byte vectors are those the enginecore and coordinator tests check
// against vLLM's own encoding (msgspec/msgpack).
func TestVectors(t *testing.T) {
	stats := dpwire.AppendStatsHeader(nil, 2)
	stats = dpwire.AppendLoad(stats, 5, 3, 0, false)
	stats = dpwire.AppendLoad(stats, 0, 1, 0, false)
	stats = dpwire.AppendStatsTrailer(stats, 7, true)
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"stats ([[5,3],[0,1]], 7, True)", stats, "939292050392000107c3"},
		{"wave (nil, 7, False)", dpwire.AppendWavePublish(nil, 7, false), "93c007c2"},
		{"START_DP_WAVE (7, 2)", dpwire.AppendStartDPWaveIndex(nil, 7, 2, true), "920702"},
		{"START_DP_WAVE (7, None)", dpwire.AppendStartDPWaveIndex(nil, 7, 0, false), "9207c0"},
		{"int -1", dpwire.AppendInt(nil, -1), "ff"},
		{"int 300", dpwire.AppendInt(nil, 300), "cd012c"},
	} {
		if h := hex.EncodeToString(c.got); h != c.want {
			t.Errorf("%s: %s, want %s", c.name, h, c.want)
		}
	}
}

func ExampleAppendWavePublish() {
	fmt.Printf("%x\n", dpwire.AppendWavePublish(nil, 7, false))
	// Output: 93c007c2
}

// TestMaxWaveAgrees: the parsers' wave bound is the one enginecore's
// Header.Validate applies to an engine's wave notices.
func TestMaxWaveAgrees(t *testing.T) {
	ok := enginecore.Header{HasWaveComplete: true, WaveComplete: dpwire.MaxWave}
	if err := ok.Validate(); err != nil {
		t.Fatalf("wave_complete MaxWave: %v", err)
	}
	bad := enginecore.Header{HasWaveComplete: true, WaveComplete: dpwire.MaxWave + 1}
	if bad.Validate() == nil {
		t.Fatal("wave_complete MaxWave+1 validated")
	}
	if _, err := dpwire.ParseStartDPWave(dpwire.AppendStartDPWaveIndex(nil, dpwire.MaxWave, 0, false)); err != nil {
		t.Fatalf("START_DP_WAVE at MaxWave: %v", err)
	}
	if _, err := dpwire.ParseStartDPWave(dpwire.AppendStartDPWaveIndex(nil, dpwire.MaxWave+1, 0, false)); err == nil {
		t.Fatal("START_DP_WAVE at MaxWave+1 parsed")
	}
}

// TestAppendHeaderSchedulerStats: AppendSchedulerStats is the
// scheduler_stats element of AppendHeader's message, and both decode back.
func TestAppendHeaderSchedulerStats(t *testing.T) {
	st := enginecore.SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7, KVCacheUsage: 0.25}
	h := enginecore.Header{EngineIndex: 1, HasStats: true, Stats: st, Timestamp: 12345.678}
	b := dpwire.AppendHeader(nil, &h)
	s := dpwire.AppendSchedulerStats(nil, &st)
	if !bytes.Contains(b, s) {
		t.Fatalf("header %x does not hold the stats %x", b, s)
	}
	var got enginecore.Header
	if err := enginecore.DecodeHeader(b, nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.EngineIndex != 1 || !got.HasStats || got.Stats != st || got.Timestamp != h.Timestamp {
		t.Fatalf("round trip: %+v", got)
	}
}
