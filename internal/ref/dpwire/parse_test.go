package dpwire_test

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// The parsers' vectors (docs/protocol.md §2); package coordinator's tests
// run the same messages through the running coordinator.

// docs/protocol.md §2 front-end and publication vectors.
const (
	vecScale4        = "92b05343414c455f454c41535449435f455004"
	vecWakeNil7      = "92c007"
	vecWake2_7       = "920207"
	vecWakeIdentity  = "92c402020007"
	vecStatsPublish  = "939292050392000107c3"
	vecWavePublish   = "93c007c2"
	vecStartDPWave72 = "920702"
)

func TestParseFrontVectors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want dpwire.FrontMsg
	}{
		{"scale 4", unhex(t, vecScale4), dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 4}},
		{"wake nil 7", unhex(t, vecWakeNil7), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 7}},
		{"wake 2 7", unhex(t, vecWake2_7), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 7, HasExclude: true, Exclude: 2}},
		{"wake identity 2 7", unhex(t, vecWakeIdentity), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 7, HasExclude: true, Exclude: 2, ExcludeIdentity: true}},
		{"wake identity 0x0105", unhex(t, "92c40205010a"), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 10, HasExclude: true, Exclude: 0x105, ExcludeIdentity: true}},
		{"wake wide ints", unhex(t, "92cd0100cf0000000100000000"), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: 1 << 32, HasExclude: true, Exclude: 256}},
		{"wake max wave", unhex(t, "92c0cf7ffffffffffffffe"), dpwire.FrontMsg{Kind: dpwire.FrontWake, Wave: dpwire.MaxWave}},
		{"scale max", unhex(t, "92b05343414c455f454c41535449435f4550ce00010000"), dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: dpwire.MaxEngines}},
		{"scale str8 header", append(append([]byte{0x92, 0xd9, 16}, dpwire.ScaleElasticEP...), 0x03), dpwire.FrontMsg{Kind: dpwire.FrontScale, Engines: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := dpwire.ParseFrontMessage(tt.in)
			if err != nil {
				t.Fatalf("parse %x: %v", tt.in, err)
			}
			if got.Kind != tt.want.Kind || got.Engines != tt.want.Engines || got.Wave != tt.want.Wave ||
				got.HasExclude != tt.want.HasExclude || got.Exclude != tt.want.Exclude ||
				got.ExcludeIdentity != tt.want.ExcludeIdentity || len(got.Topic) != 0 {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseSubscriptions(t *testing.T) {
	tests := []struct {
		in    string
		kind  dpwire.FrontKind
		topic string
	}{
		{"\x01", dpwire.FrontSubscribe, ""},
		{"\x00", dpwire.FrontUnsubscribe, ""},
		{"\x01stats", dpwire.FrontSubscribe, "stats"},
		{"\x00\x1b[31m", dpwire.FrontUnsubscribe, "\x1b[31m"},
	}
	for _, tt := range tests {
		m, err := dpwire.ParseFrontMessage([]byte(tt.in))
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if m.Kind != tt.kind || string(m.Topic) != tt.topic {
			t.Fatalf("%q: got %+v", tt.in, m)
		}
	}
	if dpwire.FrontSubscribe.String() != "subscribe" || dpwire.FrontWake.String() != "wake" || dpwire.FrontKind(0).String() != "invalid" || dpwire.FrontKind(99).String() != "invalid" {
		t.Fatal("dpwire.FrontKind.String")
	}
}

func TestParseFrontRejects(t *testing.T) {
	pack := func(f func([]byte) []byte) []byte { return f(nil) }
	tests := []struct {
		name   string
		in     []byte
		reason decodeguard.Reason
	}{
		{"empty", nil, decodeguard.ReasonDecode},
		{"invalid utf-8 str", unhex(t, "a3e08080"), decodeguard.ReasonDecode},
		{"map keyed by a map", unhex(t, "818001"), decodeguard.ReasonDecode},
		{"20000-deep nesting", append(bytes.Repeat([]byte{0x91}, 20000), 0x01), decodeguard.ReasonOversize},
		{"10000-deep maps", append(bytes.Repeat([]byte{0x81, 0x01}, 10000), 0x01), decodeguard.ReasonOversize},
		{"over 1 KiB", append([]byte{0x92, 0xc0, 0xc5, 0x04, 0x00}, make([]byte, 1024)...), decodeguard.ReasonOversize},
		{"scanner int", []byte{0x45}, decodeguard.ReasonDecode},
		{"invalid byte", []byte{0xc1}, decodeguard.ReasonDecode},
		{"truncated", unhex(t, "92c0"), decodeguard.ReasonDecode},
		{"trailing", unhex(t, "92c00700"), decodeguard.ReasonDecode},
		{"a map", unhex(t, "81a17801"), decodeguard.ReasonDecode},
		{"a str", unhex(t, "a3616263"), decodeguard.ReasonDecode},
		{"arity 0", unhex(t, "90"), decodeguard.ReasonDecode},
		{"arity 1", unhex(t, "91c0"), decodeguard.ReasonDecode},
		{"arity 3", unhex(t, "93c00700"), decodeguard.ReasonDecode},
		{"exclude bool", unhex(t, "92c307"), decodeguard.ReasonDecode},
		{"exclude float", unhex(t, "92cb3ff000000000000007"), decodeguard.ReasonDecode},
		{"exclude array", unhex(t, "929007"), decodeguard.ReasonDecode},
		{"exclude map", unhex(t, "928007"), decodeguard.ReasonDecode},
		{"exclude ext", unhex(t, "92d4010007"), decodeguard.ReasonDecode},
		{"exclude identity 1 byte", unhex(t, "92c4010207"), decodeguard.ReasonDecode},
		{"exclude identity 3 bytes", unhex(t, "92c40302000007"), decodeguard.ReasonDecode},
		{"exclude negative", unhex(t, "92ff07"), decodeguard.ReasonValidate},
		{"exclude overflow", unhex(t, "92cfffffffffffffffff07"), decodeguard.ReasonValidate},
		{"other command", pack(func(b []byte) []byte {
			return msgp.AppendInt64(msgp.AppendString(msgp.AppendArrayHeader(b, 2), "FIRST_REQ"), 1)
		}), decodeguard.ReasonDecode},
		{"command as bin", pack(func(b []byte) []byte {
			return msgp.AppendInt64(msgp.AppendBytes(msgp.AppendArrayHeader(b, 2), []byte(dpwire.ScaleElasticEP)), 1)
		}), decodeguard.ReasonDecode},
		{"scale lower case", pack(func(b []byte) []byte {
			return msgp.AppendInt64(msgp.AppendString(msgp.AppendArrayHeader(b, 2), "scale_elastic_ep"), 1)
		}), decodeguard.ReasonDecode},
		{"scale count str", pack(func(b []byte) []byte {
			return msgp.AppendString(msgp.AppendString(msgp.AppendArrayHeader(b, 2), dpwire.ScaleElasticEP), "4")
		}), decodeguard.ReasonDecode},
		{"scale count nil", pack(func(b []byte) []byte {
			return msgp.AppendNil(msgp.AppendString(msgp.AppendArrayHeader(b, 2), dpwire.ScaleElasticEP))
		}), decodeguard.ReasonDecode},
		{"scale count float", pack(func(b []byte) []byte {
			return msgp.AppendFloat64(msgp.AppendString(msgp.AppendArrayHeader(b, 2), dpwire.ScaleElasticEP), 4)
		}), decodeguard.ReasonDecode},
		{"scale 0", unhex(t, "92b05343414c455f454c41535449435f455000"), decodeguard.ReasonValidate},
		{"scale -1", unhex(t, "92b05343414c455f454c41535449435f4550ff"), decodeguard.ReasonValidate},
		{"scale 65537", unhex(t, "92b05343414c455f454c41535449435f4550ce00010001"), decodeguard.ReasonValidate},
		{"scale overflow", unhex(t, "92b05343414c455f454c41535449435f4550cfffffffffffffffff"), decodeguard.ReasonValidate},
		{"wave nil", unhex(t, "92c0c0"), decodeguard.ReasonDecode},
		{"wave str", unhex(t, "92c0a131"), decodeguard.ReasonDecode},
		{"wave float", unhex(t, "92c0cb401c000000000000"), decodeguard.ReasonDecode},
		{"wave bool", unhex(t, "9202c3"), decodeguard.ReasonDecode},
		{"wave negative", unhex(t, "92c0ff"), decodeguard.ReasonValidate},
		{"wave max int64", unhex(t, "92c0cf7fffffffffffffff"), decodeguard.ReasonValidate},
		{"wave overflow", unhex(t, "92c0cf8000000000000000"), decodeguard.ReasonValidate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := dpwire.ParseFrontMessage(tt.in)
			if err == nil {
				t.Fatalf("accepted %x as %+v", tt.in, m)
			}
			if got := decodeguard.ReasonOf(err); got != tt.reason {
				t.Fatalf("reason %v, want %v (%v)", got, tt.reason, err)
			}
			checkSafeText(t, err.Error())
		})
	}
}

func TestFrontEncoders(t *testing.T) {
	two, five := 2, 5
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"stats publish", dpwire.AppendStatsPublish(nil, [][2]int{{5, 3}, {0, 1}}, 7, true), vecStatsPublish},
		{"stats publish empty", dpwire.AppendStatsPublish(nil, nil, 0, false), "939000c2"},
		{"stats publish wide", dpwire.AppendStatsPublish(nil, [][2]int{{300, 70000}}, 1<<33, false), "9391" + "92cd012cce00011170" + "cf0000000200000000" + "c2"},
		{"stats publish kv", dpwire.AppendStatsPublishKV(nil, []dpwire.Load{{Waiting: 5, Running: 3, KVCacheUsage: 0.25}, {Running: 1}}, 7, true),
			"9392" + "930503cb3fd0000000000000" + "930001cb0000000000000000" + "07c3"},
		{"wave publish", dpwire.AppendWavePublish(nil, 7, false), vecWavePublish},
		{"start dp wave", dpwire.AppendStartDPWave(nil, 7, &two), vecStartDPWave72},
		{"start dp wave nil", dpwire.AppendStartDPWave(nil, 7, nil), "9207c0"},
		{"scale", dpwire.AppendScaleElasticEP(nil, 4), vecScale4},
		{"wake nil", dpwire.AppendWake(nil, nil, 7), vecWakeNil7},
		{"wake int", dpwire.AppendWake(nil, &two, 7), vecWake2_7},
		{"wake identity", dpwire.AppendWakeIdentity(nil, 2, 7), vecWakeIdentity},
		{"wake int 5 wave 0", dpwire.AppendWake(nil, &five, 0), "920500"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(tt.got); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got, tt.want)
		}
	}
	if dpwire.ReadyFrame != "READY" || hex.EncodeToString([]byte(dpwire.ReadyFrame)) != "5245414459" || dpwire.StartDPWaveFrame != "\x02" {
		t.Fatal("frame constants")
	}
}

func TestFrontRoundTrip(t *testing.T) {
	for n := 1; n <= dpwire.MaxEngines; n = n*3 + 1 {
		m, err := dpwire.ParseFrontMessage(dpwire.AppendScaleElasticEP(nil, n))
		if err != nil || m.Kind != dpwire.FrontScale || m.Engines != n {
			t.Fatalf("scale %d: %+v %v", n, m, err)
		}
	}
	for _, wave := range []int{0, 1, 127, 128, 255, 256, 65535, 65536, 1 << 40} {
		for _, ex := range []int{0, 3, 200, 65535} {
			m, err := dpwire.ParseFrontMessage(dpwire.AppendWake(nil, &ex, wave))
			if err != nil || m.Kind != dpwire.FrontWake || m.Wave != int64(wave) || !m.HasExclude || m.Exclude != int64(ex) || m.ExcludeIdentity {
				t.Fatalf("wake (%d,%d): %+v %v", ex, wave, m, err)
			}
			m, err = dpwire.ParseFrontMessage(dpwire.AppendWakeIdentity(nil, uint16(ex), wave))
			if err != nil || m.Wave != int64(wave) || m.Exclude != int64(ex) || !m.ExcludeIdentity {
				t.Fatalf("wake identity (%d,%d): %+v %v", ex, wave, m, err)
			}
		}
	}
}

func TestParseFrontZeroAllocs(t *testing.T) {
	frames := [][]byte{
		unhex(t, vecScale4), unhex(t, vecWakeNil7), unhex(t, vecWake2_7), unhex(t, vecWakeIdentity),
		[]byte("\x01"), []byte("\x00topic"),
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, f := range frames {
			if _, err := dpwire.ParseFrontMessage(f); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per parse of valid messages, want 0", allocs)
	}
}

func TestParsePublication(t *testing.T) {
	var p dpwire.Publication
	// docs/protocol.md's vectors.
	if err := dpwire.ParsePublication(unhex(t, "939292050392000107c3"), &p); err != nil || !p.HasCounts || p.KV || p.Wave != 7 || !p.Running ||
		len(p.Loads) != 2 || p.Loads[0] != (dpwire.Load{Waiting: 5, Running: 3}) || p.Loads[1] != (dpwire.Load{Running: 1}) {
		t.Fatalf("stats vector: %+v %v", p, err)
	}
	if c := p.Counts(); len(c) != 2 || c[0] != [2]int{5, 3} || c[1] != [2]int{0, 1} {
		t.Fatalf("counts %v", c)
	}
	loads := p.Loads
	if err := dpwire.ParsePublication(unhex(t, "93c007c2"), &p); err != nil || p.HasCounts || p.Wave != 7 || p.Running || len(p.Loads) != 0 || p.Counts() != nil {
		t.Fatalf("wave vector: %+v %v", p, err)
	}
	kv := dpwire.AppendStatsPublishKV(nil, []dpwire.Load{{Waiting: 5, Running: 3, KVCacheUsage: 0.25}, {Waiting: 0, Running: 1, KVCacheUsage: 1}}, 9, false)
	if err := dpwire.ParsePublication(kv, &p); err != nil || !p.KV || p.Loads[0].KVCacheUsage != 0.25 || p.Loads[1].KVCacheUsage != 1 || p.Wave != 9 {
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
		err := dpwire.ParsePublication(unhex(t, h), &p)
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
	var p dpwire.Publication
	if err := dpwire.ParsePublication(pub, &p); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := dpwire.ParseStartDPWave(sw); err != nil {
			t.Fatal(err)
		}
		if err := dpwire.ParsePublication(pub, &p); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per parse", n)
	}
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSafeText fails when an error text carries a byte that is not
// printable ASCII (peer bytes must never reach a log raw).
func checkSafeText(t testing.TB, s string) {
	t.Helper()
	for _, r := range strings.ReplaceAll(s, "…", "") {
		if r < 0x20 || r > 0x7e {
			t.Fatalf("error text carries a non-printable byte %q: %q", r, s)
		}
	}
}

// FuzzParsePublication checks the front-end-side parser the same way, with
// a reused destination.
func FuzzParsePublication(f *testing.F) {
	for _, s := range []string{"939292050392000107c3", "93c007c2", "93919305 03cb3fd0000000000000 07c3", "", "45", "939192ff0307c3", "93929205039305030007c3", "93c0ffc3"} {
		b, _ := hex.DecodeString(string(bytes.ReplaceAll([]byte(s), []byte(" "), nil)))
		f.Add(b)
	}
	var p dpwire.Publication
	f.Fuzz(func(t *testing.T, b []byte) {
		err := dpwire.ParsePublication(b, &p)
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
			re = dpwire.AppendWavePublish(nil, p.Wave, p.Running)
		case p.KV:
			re = dpwire.AppendStatsPublishKV(nil, p.Loads, int(p.Wave), p.Running)
		default:
			counts := make([][2]int, len(p.Loads))
			for i, l := range p.Loads {
				counts[i] = [2]int{int(l.Waiting), int(l.Running)}
			}
			re = dpwire.AppendStatsPublish(nil, counts, int(p.Wave), p.Running)
		}
		var q dpwire.Publication
		if err := dpwire.ParsePublication(re, &q); err != nil || q.HasCounts != p.HasCounts || q.KV != p.KV || q.Wave != p.Wave ||
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
