package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// BenchmarkDecodeStats decodes the 101-byte stats frame (docs/protocol.md's
// minimal stats vector plus kv_cache_usage) into a reused struct, pre-scan
// and validation included.
func BenchmarkDecodeStats(b *testing.B) {
	frame := unhex(b, vecStatsKV)
	var m enginecore.Header
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := enginecore.DecodeHeader(frame, nil, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeReject measures the drop path for a scanner's junk frame.
func BenchmarkDecodeReject(b *testing.B) {
	frame := []byte{0x45}
	var m enginecore.Header
	b.ReportAllocs()
	for b.Loop() {
		if err := enginecore.DecodeHeader(frame, nil, &m); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkParseFrontWake(b *testing.B) {
	frame := unhex(b, vecWakeIdentity)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := dpwire.ParseFrontMessage(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStateStats is one decoded stats message through the state
// machine plus a tick.
func BenchmarkStateStats(b *testing.B) {
	s, _ := newStateMachine(8, stateConfig{})
	for i := 0; i < 8; i++ {
		s.OnBackSubscribe()
	}
	m := statsMsg(3, 5, 3, 7, 0)
	now := time.Unix(0, 0)
	b.ReportAllocs()
	for b.Loop() {
		m.Stats.StepCounter++
		if _, err := s.OnEngineOutput(m); err != nil {
			b.Fatal(err)
		}
		now = now.Add(time.Millisecond)
		s.Tick(now)
	}
}

// BenchmarkAppendStatsPublish encodes the publication for 64 engines into a
// reused buffer.
func BenchmarkAppendStatsPublish(b *testing.B) {
	s, _ := newStateMachine(64, stateConfig{})
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = s.AppendStatsPublish(buf[:0])
	}
}

// BenchmarkCoordinatorStats measures the whole path of one stats message
// over loopback TCP: an Engine encodes and pushes it, the coordinator's
// PULL socket and SafeLoop receive and decode it, and the state machine
// applies it. ns/op is per message at saturation (the engine does not
// wait for each one).
func BenchmarkCoordinatorStats(b *testing.B) {
	cfg := testConfig(1)
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
		c.Close()
	}()
	e, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: c.BackPublishEndpoint(), BackOutput: c.BackOutputEndpoint(), Socket: testSocketOptions()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := e.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}
	m := &enginecore.Header{HasStats: true, Timestamp: ts, Stats: enginecore.SchedulerStats{NumWaitingReqs: 5, NumRunningReqs: 3}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m.Stats.StepCounter = int64(i + 1)
		if err := e.SendOutputs(wctx, m); err != nil {
			b.Fatal(err)
		}
	}
	for c.Stats().StatsApplied < uint64(b.N) {
		if wctx.Err() != nil {
			b.Fatalf("applied %d of %d", c.Stats().StatsApplied, b.N)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func BenchmarkParsePublication(b *testing.B) {
	s, _ := newStateMachine(64, stateConfig{})
	frame := s.AppendStatsPublish(nil)
	var p dpwire.Publication
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := dpwire.ParsePublication(frame, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStartDPWave(b *testing.B) {
	frame := unhex(b, "920702")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dpwire.ParseStartDPWave(frame); err != nil {
			b.Fatal(err)
		}
	}
}
