package dppeer

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/socket"
)

// The live use of the peers (against a running coordinator) is tested by
// package coordinator; these tests cover the rest.

var quiet = slog.New(slog.DiscardHandler)

func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func testSocketOptions() socket.Options {
	o := socket.Options{Logger: quiet}
	o.ReconnectMin = 10 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	return o
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func intp(i int) *int { return &i }

func ptrText(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func expectStartWave(t *testing.T, ctx context.Context, e *Engine, i, wave int, exclude *int) {
	t.Helper()
	w, x, err := e.NextStartWave(ctx)
	if err != nil {
		t.Fatalf("engine %d: START_DP_WAVE: %v", i, err)
	}
	if w != wave || (x == nil) != (exclude == nil) || (x != nil && *x != *exclude) {
		t.Fatalf("engine %d: START_DP_WAVE(%d, %v), want (%d, %v)", i, w, ptrText(x), wave, ptrText(exclude))
	}
}

// TestPeerHelpers covers what the live tests do not: a front-end that is
// not connected, an engine skipping unknown messages and keeping READY and
// START_DP_WAVE for the other method, a malformed START_DP_WAVE.
func TestPeerHelpers(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	f, err := DialFrontEnd(FrontEndConfig{Front: "tcp://127.0.0.1:1", Socket: testSocketOptions()})
	if err != nil {
		t.Fatal(err)
	}
	if f.Connected() {
		t.Fatal("connected to nothing")
	}
	for _, err := range []error{f.Wake(ctx, nil, 0), f.WakeIdentity(ctx, 1, 0), f.Scale(ctx, 2)} {
		if !errors.Is(err, ErrNotConnected) {
			t.Fatalf("send while unconnected: %v", err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, _, _, err := f.NextStats(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NextStats: %v", err)
	}
	cancel()
	f.Close()
	if _, err := DialFrontEnd(FrontEndConfig{Front: "bogus"}); err == nil {
		t.Fatal("DialFrontEnd accepted a bad endpoint")
	}
	if _, err := DialEngine(EngineConfig{BackPublish: "bogus", BackOutput: "tcp://127.0.0.1:1"}); err == nil {
		t.Fatal("DialEngine accepted a bad endpoint")
	}
	if _, err := DialEngine(EngineConfig{BackPublish: "tcp://127.0.0.1:1", BackOutput: "bogus"}); err == nil {
		t.Fatal("DialEngine accepted a bad endpoint")
	}

	// A fake coordinator: an XPUB the engine subscribes to.
	pub := junkPubFor(t)
	e, err := DialEngine(EngineConfig{BackPublish: pub.Endpoint(), BackOutput: "tcp://127.0.0.1:1", Socket: testSocketOptions()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	sub, err := pub.Recv(ctx) // the engine's "\x01"
	if err != nil || len(sub.Frames) != 1 || string(sub.Frames[0]) != "\x01" {
		t.Fatalf("engine subscription %v %v", sub.Frames, err)
	}
	for _, frames := range [][][]byte{
		{[]byte("RECOVERY")},                 // unknown: skipped
		{[]byte("\x02"), unhex(t, "920501")}, // START_DP_WAVE(5, 1) before READY
		{[]byte(dpwire.ReadyFrame)},
		{[]byte(dpwire.ReadyFrame)},          // kept for the next WaitReady
		{[]byte("\x02"), unhex(t, "9206c0")}, // START_DP_WAVE(6, nil)
		{[]byte("\x02"), unhex(t, "45")},     // malformed
	} {
		if err := pub.Send(ctx, frames...); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	expectStartWave(t, ctx, e, 0, 5, intp(1)) // kept by WaitReady
	expectStartWave(t, ctx, e, 0, 6, nil)     // READY in between kept
	if err := e.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.NextStartWave(ctx); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Fatalf("malformed START_DP_WAVE: %v", err)
	}
	if e.Skipped() != 1 {
		t.Fatalf("skipped %d", e.Skipped())
	}
}

// junkPubFor returns a bound XPUB standing in for a coordinator.
func junkPubFor(t *testing.T) *socket.Socket {
	t.Helper()
	s, err := socket.New("XPUB", testSocketOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s
}
