package coordinator

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/socket"
)

func TestParseStartDPWave(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want StartDPWave
	}{
		{"920702", StartDPWave{Wave: 7, HasExclude: true, Exclude: 2}}, // docs/protocol.md's (7, 2)
		{"9207c0", StartDPWave{Wave: 7}},
		{"92cf0000010000000000c0", StartDPWave{Wave: 1 << 40}},
		{"9200cd0100", StartDPWave{HasExclude: true, Exclude: 256}},
	} {
		got, err := ParseStartDPWave(unhex(t, c.hex))
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v, want %+v", c.hex, got, err, c.want)
		}
	}
	for _, c := range []struct {
		hex    string
		reason decodeguard.Reason
	}{
		{"", decodeguard.ReasonDecode},
		{"45", decodeguard.ReasonDecode},
		{"910700", decodeguard.ReasonDecode},                   // trailing
		{"9107", decodeguard.ReasonDecode},                     // arity 1
		{"93070200", decodeguard.ReasonDecode},                 // arity 3
		{"92a17802", decodeguard.ReasonDecode},                 // wave a str
		{"9207c3", decodeguard.ReasonDecode},                   // exclude a bool
		{"92ff02", decodeguard.ReasonValidate},                 // negative wave
		{"9207ff", decodeguard.ReasonValidate},                 // negative exclude
		{"92cfffffffffffffffff02", decodeguard.ReasonValidate}, // wave beyond int64
		{"92cf7fffffffffffffffc0", decodeguard.ReasonValidate}, // wave MaxInt64 > enginecore.MaxWave
		{"a3e08080", decodeguard.ReasonDecode},
		{"9291919191910102", decodeguard.ReasonOversize},
	} {
		_, err := ParseStartDPWave(unhex(t, c.hex))
		if decodeguard.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v, want %v", c.hex, err, c.reason)
		}
		if err != nil {
			checkSafeText(t, err.Error())
		}
	}
	// What the coordinator sends parses back.
	for _, sw := range []StartDPWave{{Wave: 3}, {Wave: enginecore.MaxWave, HasExclude: true, Exclude: MaxEngines - 1}} {
		a := stateActions{StartWave: sw}
		if got, err := ParseStartDPWave(a.AppendStartDPWave(nil)); err != nil || got != sw {
			t.Errorf("round trip %+v: %+v %v", sw, got, err)
		}
	}
}

func TestParsePublication(t *testing.T) {
	var p Publication
	// docs/protocol.md's vectors.
	if err := ParsePublication(unhex(t, "939292050392000107c3"), &p); err != nil || !p.HasCounts || p.KV || p.Wave != 7 || !p.Running ||
		len(p.Loads) != 2 || p.Loads[0] != (EngineLoad{Waiting: 5, Running: 3}) || p.Loads[1] != (EngineLoad{Running: 1}) {
		t.Fatalf("stats vector: %+v %v", p, err)
	}
	if c := p.Counts(); len(c) != 2 || c[0] != [2]int{5, 3} || c[1] != [2]int{0, 1} {
		t.Fatalf("counts %v", c)
	}
	loads := p.Loads
	if err := ParsePublication(unhex(t, "93c007c2"), &p); err != nil || p.HasCounts || p.Wave != 7 || p.Running || len(p.Loads) != 0 || p.Counts() != nil {
		t.Fatalf("wave vector: %+v %v", p, err)
	}
	kv := enginecore.AppendStatsPublishKV(nil, []EngineLoad{{Waiting: 5, Running: 3, KVCacheUsage: 0.25}, {Waiting: 0, Running: 1, KVCacheUsage: 1}}, 9, false)
	if err := ParsePublication(kv, &p); err != nil || !p.KV || p.Loads[0].KVCacheUsage != 0.25 || p.Loads[1].KVCacheUsage != 1 || p.Wave != 9 {
		t.Fatalf("kv layout: %+v %v", p, err)
	}
	if &p.Loads[0] != &loads[0] {
		t.Error("Loads' capacity not reused")
	}
	for _, c := range []struct {
		hex    string
		reason decodeguard.Reason
	}{
		{"", decodeguard.ReasonDecode},
		{"45", decodeguard.ReasonDecode},
		{"92c007", decodeguard.ReasonDecode},                             // arity
		{"93a17807c3", decodeguard.ReasonDecode},                         // counts a str
		{"93919105 07c3", decodeguard.ReasonDecode},                      // entry of 1
		{"93929205039305030007c3", decodeguard.ReasonDecode},             // mixed layouts
		{"93919205a17807c3", decodeguard.ReasonDecode},                   // running a str
		{"939192ff0307c3", decodeguard.ReasonValidate},                   // negative waiting
		{"9391930503cb7ff800000000000007c3", decodeguard.ReasonValidate}, // NaN usage
		{"93c0ffc3", decodeguard.ReasonValidate},                         // negative wave
		{"93c00701", decodeguard.ReasonDecode},                           // running an int
		{"93c007c3c0", decodeguard.ReasonDecode},                         // trailing
		{"93c0cfffffffffffffffffc3", decodeguard.ReasonValidate},         // wave beyond int64
		{"93919191919101", decodeguard.ReasonOversize},                   // too deep
	} {
		h := string(bytes.ReplaceAll([]byte(c.hex), []byte(" "), nil))
		p.Loads = loads
		err := ParsePublication(unhex(t, h), &p)
		if decodeguard.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v, want %v", h, err, c.reason)
		}
		if err != nil {
			checkSafeText(t, err.Error())
			if p.HasCounts || p.Wave != 0 || len(p.Loads) != 0 {
				t.Errorf("%s: dst not reset: %+v", h, p)
			}
		}
	}
}

func TestParsePeerZeroAllocs(t *testing.T) {
	sw := unhex(t, "920702")
	pub := unhex(t, "939292050392000107c3")
	var p Publication
	if err := ParsePublication(pub, &p); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseStartDPWave(sw); err != nil {
			t.Fatal(err)
		}
		if err := ParsePublication(pub, &p); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per parse", n)
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
		{[]byte(ReadyFrame)},
		{[]byte(ReadyFrame)},                 // kept for the next WaitReady
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

// FuzzParseStartDPWave checks the engine-side parser: no panic, classified
// errors with safe text, and what it accepts re-encodes to the same bytes
// when the input used minimal encodings.
func FuzzParseStartDPWave(f *testing.F) {
	for _, s := range []string{"920702", "9207c0", "92cf0000010000000000c0", "", "45", "92ff02", "9207ff", "92d00702", "9291919101c0"} {
		b, _ := hex.DecodeString(s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sw, err := ParseStartDPWave(b)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error %v", err)
			}
			checkSafeText(t, err.Error())
			return
		}
		if sw.Wave < 0 || sw.Wave > enginecore.MaxWave || sw.Exclude < 0 || (!sw.HasExclude && sw.Exclude != 0) {
			t.Fatalf("accepted %+v", sw)
		}
		a := stateActions{StartWave: sw}
		again, err := ParseStartDPWave(a.AppendStartDPWave(nil))
		if err != nil || again != sw {
			t.Fatalf("round trip %+v: %+v %v", sw, again, err)
		}
	})
}

// FuzzParsePublication checks the front-end-side parser the same way, with
// a reused destination.
func FuzzParsePublication(f *testing.F) {
	for _, s := range []string{"939292050392000107c3", "93c007c2", "93919305 03cb3fd0000000000000 07c3", "", "45", "939192ff0307c3", "93929205039305030007c3", "93c0ffc3"} {
		b, _ := hex.DecodeString(string(bytes.ReplaceAll([]byte(s), []byte(" "), nil)))
		f.Add(b)
	}
	var p Publication
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ParsePublication(b, &p)
		if err != nil {
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("unclassified error %v", err)
			}
			checkSafeText(t, err.Error())
			if p.HasCounts || len(p.Loads) != 0 || p.Wave != 0 || p.Running || p.KV {
				t.Fatalf("dst not reset: %+v", p)
			}
			return
		}
		if p.Wave < 0 || (!p.HasCounts && (len(p.Loads) != 0 || p.KV)) {
			t.Fatalf("accepted %+v", p)
		}
		var re []byte
		switch {
		case !p.HasCounts:
			re = enginecore.AppendWavePublish(nil, int(p.Wave), p.Running)
		case p.KV:
			re = enginecore.AppendStatsPublishKV(nil, p.Loads, int(p.Wave), p.Running)
		default:
			counts := make([][2]int, len(p.Loads))
			for i, l := range p.Loads {
				counts[i] = [2]int{int(l.Waiting), int(l.Running)}
			}
			re = enginecore.AppendStatsPublish(nil, counts, int(p.Wave), p.Running)
		}
		var q Publication
		if err := ParsePublication(re, &q); err != nil || q.HasCounts != p.HasCounts || q.KV != p.KV || q.Wave != p.Wave ||
			q.Running != p.Running || len(q.Loads) != len(p.Loads) {
			t.Fatalf("round trip %+v: %+v %v", p, q, err)
		}
		for i := range q.Loads {
			if q.Loads[i] != p.Loads[i] {
				t.Fatalf("round trip load %d: %+v vs %+v", i, q.Loads[i], p.Loads[i])
			}
		}
	})
}
