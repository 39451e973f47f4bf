package coordinator

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/dpwire"
)

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
