package coordinator

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
)

// docs/protocol.md §2 vectors.
const (
	// minimal stats: engine 1, running 3, waiting 5, step 42, wave 7, ts 12345.678.
	vecMinimalStats = "94019084b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507cb40c81cd6c8b43958"
	// wave_complete=7 from engine 0.
	vecWaveComplete = "970090c0cb40c81cd6c8b43958c0c007"
	// start_wave=8 from engine 1.
	vecStartWave = "980190c0cb40c81cd6c8b43958c0c0c008"
	// the minimal stats vector with kv_cache_usage 0.25 added (101 bytes).
	vecStatsKV = "94019085b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507ae6b765f63616368655f7573616765cb3fd0000000000000cb40c81cd6c8b43958"
)

const ts = 12345.678

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

func TestVectorsDecode(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want enginecore.Header
	}{
		{"minimal stats", vecMinimalStats, enginecore.Header{
			Fields: 4, EngineIndex: 1, HasStats: true, Timestamp: ts,
			Stats: enginecore.SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7},
		}},
		{"stats with kv", vecStatsKV, enginecore.Header{
			Fields: 4, EngineIndex: 1, HasStats: true, Timestamp: ts,
			Stats: enginecore.SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7, KVCacheUsage: 0.25},
		}},
		{"wave complete", vecWaveComplete, enginecore.Header{
			Fields: 7, Timestamp: ts, HasWaveComplete: true, WaveComplete: 7,
		}},
		{"start wave", vecStartWave, enginecore.Header{
			Fields: 8, EngineIndex: 1, Timestamp: ts, HasStartWave: true, StartWave: 8,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unhex(t, tt.hex)
			var got enginecore.Header
			if err := enginecore.DecodeHeader(b, nil, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got != tt.want {
				t.Fatalf("decoded\n got %+v\nwant %+v", got, tt.want)
			}
			// Re-encoding gives the full-length form vLLM writes (msgspec
			// keeps every field of an array_like struct), which decodes to
			// the same values.
			enc := dpwire.AppendHeader(nil, &got)
			var again enginecore.Header
			if err := enginecore.DecodeHeader(enc, nil, &again); err != nil || enc[0] != 0x98 {
				t.Fatalf("re-encoded %x: %v", enc, err)
			}
			again.Fields = got.Fields
			if again != got {
				t.Fatalf("re-encoded form decodes to %+v", again)
			}
		})
	}
	if n := len(unhex(t, vecStatsKV)); n != 101 {
		t.Fatalf("vecStatsKV is %d bytes, want 101", n)
	}
}

func TestEncodeVectors(t *testing.T) {
	tests := []struct {
		name string
		m    enginecore.Header
		want string
	}{
		// All 8 fields, as msgspec writes an array_like struct (the stats
		// forms are checked on vLLM's own bytes by TestGoldenCoordinator).
		{"wave complete", enginecore.Header{Timestamp: ts, HasWaveComplete: true, WaveComplete: 7}, "98" + vecWaveComplete[2:] + "c0"},
		{"start wave", enginecore.Header{EngineIndex: 1, Timestamp: ts, HasStartWave: true, StartWave: 8}, vecStartWave},
		{"all defaults", enginecore.Header{}, "98" + "00" + "90c0" + "cb0000000000000000" + "c0c0c0c0"},
		{"engine only", enginecore.Header{EngineIndex: 3}, "98" + "03" + "90c0" + "cb0000000000000000" + "c0c0c0c0"},
		{"python widths", enginecore.Header{EngineIndex: 200, Timestamp: 1, HasWaveComplete: true, WaveComplete: 70000},
			"98" + "ccc8" + "90c0" + "cb3ff0000000000000" + "c0c0" + "ce00011170" + "c0"},
		{"outputs and utility are not kept", enginecore.Header{EngineIndex: 1, OutputsLen: 3, HasUtilityOutput: true,
			HasFinishedRequests: true, FinishedRequests: 2, Fields: 8}, "98" + "01" + "90c0" + "cb0000000000000000" + "c0c0c0c0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hex.EncodeToString(dpwire.AppendHeader(nil, &tt.m)); got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestArrayLengths checks every array length from 0 to 8 and beyond: missing
// trailing fields are defaults, extra ones are skipped (as msgspec does).
func TestArrayLengths(t *testing.T) {
	full := []func([]byte) []byte{
		func(b []byte) []byte { return msgp.AppendInt64(b, 2) },
		func(b []byte) []byte { return msgp.AppendArrayHeader(b, 0) },
		func(b []byte) []byte {
			return dpwire.AppendSchedulerStats(b, &enginecore.SchedulerStats{NumRunningReqs: 1, NumWaitingReqs: 2, StepCounter: 3, CurrentWave: 4})
		},
		func(b []byte) []byte { return msgp.AppendFloat64(b, 1.5) },
		msgp.AppendNil,
		msgp.AppendNil,
		func(b []byte) []byte { return msgp.AppendInt64(b, 9) },
		func(b []byte) []byte { return msgp.AppendInt64(b, 10) },
		// Extra fields a newer vLLM might append.
		func(b []byte) []byte { return msgp.AppendString(b, "future") },
		func(b []byte) []byte { return msgp.AppendMapHeader(msgp.AppendArrayHeader(b, 1), 0) },
	}
	for n := 0; n <= len(full); n++ {
		b := msgp.AppendArrayHeader(nil, uint32(n))
		for _, f := range full[:n] {
			b = f(b)
		}
		var m enginecore.Header
		// Pre-fill to check that decoding resets.
		m.EngineIndex, m.HasStartWave, m.StartWave, m.Timestamp = 77, true, 77, 77
		if err := enginecore.DecodeHeader(b, nil, &m); err != nil {
			t.Fatalf("length %d: %v", n, err)
		}
		want := enginecore.Header{Fields: n}
		if n > 0 {
			want.EngineIndex = 2
		}
		if n > 2 {
			want.HasStats = true
			want.Stats = enginecore.SchedulerStats{NumRunningReqs: 1, NumWaitingReqs: 2, StepCounter: 3, CurrentWave: 4}
		}
		if n > 3 {
			want.Timestamp = 1.5
		}
		if n > 6 {
			want.HasWaveComplete, want.WaveComplete = true, 9
		}
		if n > 7 {
			want.HasStartWave, want.StartWave = true, 10
		}
		if m != want {
			t.Fatalf("length %d:\n got %+v\nwant %+v", n, m, want)
		}
	}
}

func TestDecodeReusesAndResets(t *testing.T) {
	var m enginecore.Header
	if err := enginecore.DecodeHeader(unhex(t, vecStartWave), nil, &m); err != nil {
		t.Fatal(err)
	}
	if err := enginecore.DecodeHeader(unhex(t, vecMinimalStats), nil, &m); err != nil {
		t.Fatal(err)
	}
	if m.HasStartWave || m.HasWaveComplete || m.Fields != 4 {
		t.Fatalf("fields of the previous message survived: %+v", m)
	}
	// A failed decode does not leave the previous message looking valid.
	if err := enginecore.DecodeHeader([]byte{0x45}, nil, &m); err == nil {
		t.Fatal("accepted a bare int")
	}
	if m.HasStats {
		t.Fatalf("stats survived a failed decode: %+v", m)
	}
}

func TestDecodeAcceptedVariants(t *testing.T) {
	tests := []struct {
		name  string
		build func() []byte
		check func(*enginecore.Header) bool
	}{
		{"float32 timestamp", func() []byte {
			return msgp.AppendFloat32(msgp.AppendNil(msgp.AppendArrayHeader(msgp.AppendInt64(msgp.AppendArrayHeader(nil, 4), 0), 0)), 2.5)
		}, func(m *enginecore.Header) bool { return m.Timestamp == 2.5 }},
		{"int timestamp", func() []byte {
			return msgp.AppendInt64(msgp.AppendNil(msgp.AppendArrayHeader(msgp.AppendInt64(msgp.AppendArrayHeader(nil, 4), 0), 0)), 12)
		}, func(m *enginecore.Header) bool { return m.Timestamp == 12 }},
		{"uint64 timestamp", func() []byte {
			return msgp.AppendUint64(msgp.AppendNil(msgp.AppendArrayHeader(msgp.AppendInt64(msgp.AppendArrayHeader(nil, 4), 0), 0)), 1<<63)
		}, func(m *enginecore.Header) bool { return m.Timestamp == 1<<63 }},
		{"signed widths", func() []byte {
			b := msgp.AppendArrayHeader(nil, 8)
			b = append(b, 0xd3, 0, 0, 0, 0, 0, 0, 0, 5) // int64 5
			b = msgp.AppendArrayHeader(b, 0)
			b = msgp.AppendNil(b)
			b = msgp.AppendFloat64(b, 1)
			b = msgp.AppendNil(b)
			b = msgp.AppendNil(b)
			b = msgp.AppendNil(b)
			return append(b, 0xcd, 0x01, 0x00) // uint16 256
		}, func(m *enginecore.Header) bool { return m.EngineIndex == 5 && m.HasStartWave && m.StartWave == 256 }},
		{"outputs, utility, finished counted", func() []byte {
			b := msgp.AppendArrayHeader(nil, 6)
			b = msgp.AppendInt64(b, 0)
			b = msgp.AppendArrayHeader(b, 2)
			for _, id := range []string{"req-1", "req-2"} {
				b = msgp.AppendArrayHeader(b, 2)
				b = msgp.AppendString(b, id)
				b = msgp.AppendArrayHeader(b, 1)
				b = msgp.AppendInt64(b, 42)
			}
			b = msgp.AppendNil(b)
			b = msgp.AppendFloat64(b, 1)
			b = msgp.AppendArrayHeader(b, 2)
			b = msgp.AppendInt64(b, 3)
			b = msgp.AppendNil(b)
			b = msgp.AppendArrayHeader(b, 3)
			for _, id := range []string{"a", "b", "c"} {
				b = msgp.AppendString(b, id)
			}
			return b
		}, func(m *enginecore.Header) bool {
			return m.OutputsLen == 2 && m.HasUtilityOutput && m.HasFinishedRequests && m.FinishedRequests == 3
		}},
		{"empty finished requests", func() []byte {
			b := msgp.AppendArrayHeader(nil, 6)
			b = msgp.AppendInt64(b, 0)
			b = msgp.AppendArrayHeader(b, 0)
			b = msgp.AppendNil(b)
			b = msgp.AppendFloat64(b, 1)
			b = msgp.AppendNil(b)
			return msgp.AppendArrayHeader(b, 0)
		}, func(m *enginecore.Header) bool { return m.HasFinishedRequests && m.FinishedRequests == 0 }},
		{"stats: unknown keys skipped, repeated key last wins, int usage", func() []byte {
			b := msgp.AppendArrayHeader(nil, 3)
			b = msgp.AppendInt64(b, 1)
			b = msgp.AppendArrayHeader(b, 0)
			b = msgp.AppendMapHeader(b, 5)
			b = msgp.AppendString(b, "prefix_cache_stats")
			b = msgp.AppendMapHeader(b, 1)
			b = msgp.AppendString(b, "hits")
			b = msgp.AppendInt64(b, 3)
			b = msgp.AppendString(b, "num_running_reqs")
			b = msgp.AppendInt64(b, 1)
			b = msgp.AppendString(b, "num_running_reqs")
			b = msgp.AppendInt64(b, 2)
			b = msgp.AppendString(b, "kv_cache_usage")
			b = msgp.AppendInt64(b, 1)
			b = msgp.AppendString(b, "some_future_key")
			b = msgp.AppendArrayHeader(b, 2)
			b = msgp.AppendNil(b)
			return msgp.AppendBool(b, true)
		}, func(m *enginecore.Header) bool {
			return m.HasStats && m.Stats == enginecore.SchedulerStats{NumRunningReqs: 2, KVCacheUsage: 1}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m enginecore.Header
			if err := enginecore.DecodeHeader(tt.build(), nil, &m); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !tt.check(&m) {
				t.Fatalf("unexpected result %+v", m)
			}
		})
	}
}

// buildECO builds an enginecore.Header array with raw field encodings.
func buildECO(fields ...string) []byte {
	b := msgp.AppendArrayHeader(nil, uint32(len(fields)))
	for _, f := range fields {
		raw, err := hex.DecodeString(f)
		if err != nil {
			panic(err)
		}
		b = append(b, raw...)
	}
	return b
}

func TestDecodeRejects(t *testing.T) {
	statsKey := func(key, val string) string {
		return "81" + hex.EncodeToString(msgp.AppendString(nil, key)) + val
	}
	tests := []struct {
		name   string
		b      []byte
		reason decodeguard.Reason
	}{
		{"empty", nil, decodeguard.ReasonDecode},
		{"scanner int 0x45", []byte{0x45}, decodeguard.ReasonDecode},
		{"a map", []byte{0x80}, decodeguard.ReasonDecode},
		{"a str", []byte{0xa1, 'x'}, decodeguard.ReasonDecode},
		{"truncated", unhex(t, vecMinimalStats)[:40], decodeguard.ReasonDecode},
		{"trailing byte", append(unhex(t, vecWaveComplete), 0x00), decodeguard.ReasonDecode},
		{"two messages", append(unhex(t, vecWaveComplete), unhex(t, vecWaveComplete)...), decodeguard.ReasonDecode},
		{"invalid byte c1", []byte{0x91, 0xc1}, decodeguard.ReasonDecode},
		{"array claims 2^32-1", []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, decodeguard.ReasonDecode},
		{"deep nesting", append(bytes.Repeat([]byte{0x91}, 20000), 0x01), decodeguard.ReasonOversize},
		{"over 1 MiB", append([]byte{0x92, 0x00, 0xc6, 0x00, 0x10, 0x00, 0x00}, make([]byte, 1<<20)...), decodeguard.ReasonOversize},
		{"ext type", buildECO("00", "90", "c0", "d6ff00000000"), decodeguard.ReasonDecode},
		{"engine_index str", buildECO("a131"), decodeguard.ReasonDecode},
		{"engine_index float", buildECO("cb3ff0000000000000"), decodeguard.ReasonDecode},
		{"engine_index bool", buildECO("c3"), decodeguard.ReasonDecode},
		{"engine_index nil", buildECO("c0"), decodeguard.ReasonDecode},
		{"engine_index uint64 overflow", buildECO("cfffffffffffffffff"), decodeguard.ReasonValidate},
		{"engine_index negative", buildECO("ff"), decodeguard.ReasonValidate},
		{"outputs nil", buildECO("00", "c0"), decodeguard.ReasonDecode},
		{"outputs map", buildECO("00", "80"), decodeguard.ReasonDecode},
		{"stats array", buildECO("00", "90", "90"), decodeguard.ReasonDecode},
		{"stats int", buildECO("00", "90", "05"), decodeguard.ReasonDecode},
		{"stats int key", buildECO("00", "90", "810102"), decodeguard.ReasonDecode},
		{"stats bin key", buildECO("00", "90", "81c4016101"), decodeguard.ReasonDecode},
		{"stats map key", buildECO("00", "90", "81800102"), decodeguard.ReasonDecode},
		{"stats count float", buildECO("00", "90", statsKey("num_running_reqs", "cb3ff0000000000000")), decodeguard.ReasonDecode},
		{"stats count str", buildECO("00", "90", statsKey("num_waiting_reqs", "a131")), decodeguard.ReasonDecode},
		{"stats count nil", buildECO("00", "90", statsKey("step_counter", "c0")), decodeguard.ReasonDecode},
		{"stats count negative", buildECO("00", "90", statsKey("num_waiting_reqs", "ff")), decodeguard.ReasonValidate},
		{"stats skipped negative", buildECO("00", "90", statsKey("num_skipped_waiting_reqs", "d0ff")), decodeguard.ReasonValidate},
		{"stats step negative", buildECO("00", "90", statsKey("step_counter", "ff")), decodeguard.ReasonValidate},
		{"stats wave negative", buildECO("00", "90", statsKey("current_wave", "ff")), decodeguard.ReasonValidate},
		{"stats wave overflow", buildECO("00", "90", statsKey("current_wave", "cf8000000000000000")), decodeguard.ReasonValidate},
		{"stats kv str", buildECO("00", "90", statsKey("kv_cache_usage", "a131")), decodeguard.ReasonDecode},
		{"stats kv NaN", buildECO("00", "90", statsKey("kv_cache_usage", "cb7ff8000000000001")), decodeguard.ReasonValidate},
		{"stats kv +Inf", buildECO("00", "90", statsKey("kv_cache_usage", "cb7ff0000000000000")), decodeguard.ReasonValidate},
		{"stats kv negative", buildECO("00", "90", statsKey("kv_cache_usage", "cbbff0000000000000")), decodeguard.ReasonValidate},
		{"stats encoder usage NaN", buildECO("00", "90", statsKey("encoder_cache_usage", "ca7fc00000")), decodeguard.ReasonValidate},
		{"stats unknown value truncated", buildECO("00", "90", "81a178"), decodeguard.ReasonDecode},
		{"timestamp str", buildECO("00", "90", "c0", "a131"), decodeguard.ReasonDecode},
		{"timestamp nil", buildECO("00", "90", "c0", "c0"), decodeguard.ReasonDecode},
		{"timestamp bool", buildECO("00", "90", "c0", "c2"), decodeguard.ReasonDecode},
		{"finished map", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "80"), decodeguard.ReasonDecode},
		{"finished int element", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "9101"), decodeguard.ReasonDecode},
		{"finished bin element", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "91c40161"), decodeguard.ReasonDecode},
		{"finished invalid utf-8", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "91a3e08080"), decodeguard.ReasonDecode},
		{"wave_complete str", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "a131"), decodeguard.ReasonDecode},
		{"wave_complete float", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "ca3f800000"), decodeguard.ReasonDecode},
		{"wave_complete negative", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "ff"), decodeguard.ReasonValidate},
		{"wave_complete max int64", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "cf7fffffffffffffff"), decodeguard.ReasonValidate},
		{"wave_complete overflow", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "cf8000000000000000"), decodeguard.ReasonValidate},
		{"start_wave bool", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "c0", "c3"), decodeguard.ReasonDecode},
		{"start_wave negative", buildECO("00", "90", "c0", "cb3ff0000000000000", "c0", "c0", "c0", "d1ff00"), decodeguard.ReasonValidate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m enginecore.Header
			err := enginecore.DecodeHeader(tt.b, nil, &m)
			if err == nil {
				t.Fatalf("accepted %x: %+v", tt.b, m)
			}
			if got := decodeguard.ReasonOf(err); got != tt.reason {
				t.Fatalf("reason %v, want %v (err %v)", got, tt.reason, err)
			}
			if !decodeguard.IsBadInput(err) {
				t.Fatalf("error is not classified: %v", err)
			}
			checkSafeText(t, err.Error())
		})
	}
}

// checkSafeText fails when s holds anything but printable ASCII (and the "…"
// that decodeguard uses to mark a cut).
func checkSafeText(t testing.TB, s string) {
	t.Helper()
	for _, r := range strings.ReplaceAll(s, "…", "") {
		if r < 0x20 || r > 0x7e {
			t.Fatalf("error text carries a non-printable byte %q: %q", r, s)
		}
	}
}

func TestErrorOffsets(t *testing.T) {
	// The stats value of step_counter is a str; its offset must be reported
	// relative to the whole frame.
	b := buildECO("00", "90", "81"+hex.EncodeToString(msgp.AppendString(nil, "step_counter"))+"a131")
	var m enginecore.Header
	err := enginecore.DecodeHeader(b, nil, &m)
	var e *decodeguard.Error
	if !errors.As(err, &e) {
		t.Fatalf("not a decodeguard.Error: %v", err)
	}
	want := bytes.Index(b, []byte{0xa1, '1'})
	if e.Offset != want {
		t.Fatalf("offset %d, want %d (%v)", e.Offset, want, err)
	}
}

func TestDecodeNilDestination(t *testing.T) {
	err := enginecore.DecodeHeader(unhex(t, vecWaveComplete), nil, nil)
	if err == nil || decodeguard.IsBadInput(err) {
		t.Fatalf("nil destination: %v (must be an unclassified error)", err)
	}
}

func TestDecodeLimits(t *testing.T) {
	lim := decodeguard.Limits{MaxBytes: 50}
	var m enginecore.Header
	err := enginecore.DecodeHeader(unhex(t, vecMinimalStats), &lim, &m)
	if decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Fatalf("77-byte frame under MaxBytes 50: %v", err)
	}
	if err := enginecore.DecodeHeader(unhex(t, vecWaveComplete), &lim, &m); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeZeroAllocs(t *testing.T) {
	frames := [][]byte{unhex(t, vecMinimalStats), unhex(t, vecStatsKV), unhex(t, vecWaveComplete), unhex(t, vecStartWave)}
	var m enginecore.Header
	allocs := testing.AllocsPerRun(100, func() {
		for _, f := range frames {
			if err := enginecore.DecodeHeader(f, nil, &m); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per decode of valid frames, want 0", allocs)
	}
}

func TestValidateDirect(t *testing.T) {
	ok := enginecore.Header{EngineIndex: 0, HasWaveComplete: true, WaveComplete: dpwire.MaxWave}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []enginecore.Header{
		{EngineIndex: -1},
		{HasWaveComplete: true, WaveComplete: math.MaxInt64},
		{HasStartWave: true, StartWave: -3},
		{HasStats: true, Stats: enginecore.SchedulerStats{NumRunningReqs: -1}},
		{HasStats: true, Stats: enginecore.SchedulerStats{KVCacheUsage: math.Inf(1)}},
	}
	for i, m := range bad {
		if decodeguard.ReasonOf(m.Validate()) != decodeguard.ReasonValidate {
			t.Fatalf("case %d: %+v validated", i, m)
		}
	}
}
