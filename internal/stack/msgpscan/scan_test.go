package msgpscan

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// checkScan asserts that Scan and ScanOffset agree and return want (nil for
// acceptance) at offset off.
func checkScan(t *testing.T, name string, b []byte, lim *decodeguard.Limits, want *decodeguard.Error, off int) {
	t.Helper()
	err := Scan(b, lim)
	gotOff, shared := ScanOffset(b, lim)
	if want == nil {
		if err != nil || shared != nil {
			t.Errorf("%s: Scan(%s) = %v / %v, want nil", name, ratelog.Render(b), err, shared)
		}
		return
	}
	var e *decodeguard.Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: Scan(%s) = %v, want *decodeguard.Error %q", name, ratelog.Render(b), err, want.Detail)
	}
	if e.Reason != want.Reason || e.Detail != want.Detail || e.Offset != off {
		t.Errorf("%s: Scan(%s) = {%v %q %d}, want {%v %q %d}", name, ratelog.Render(b),
			e.Reason, e.Detail, e.Offset, want.Reason, want.Detail, off)
	}
	if !decodeguard.IsBadInput(err) {
		t.Errorf("%s: decodeguard.IsBadInput(%v) = false", name, err)
	}
	if shared != want || gotOff != off {
		t.Errorf("%s: ScanOffset = (%d, %v), want (%d, %v)", name, gotOff, shared, off, want)
	}
}

func TestScanProtocolVectors(t *testing.T) {
	for name, b := range protocolVectors {
		checkScan(t, name, b, nil, nil, 0)
	}
	// READY is a raw frame, not msgpack: 'R' (0x52) is a fixint, the rest
	// is trailing garbage.
	checkScan(t, "READY", []byte("READY"), nil, errTrailing, 1)
}

// The seed hazards from the vLLM coordinator and engine client.
func TestSeedInvalidUTF8Str(t *testing.T) {
	b := hx("a3e08080")
	checkScan(t, "overlong str", b, nil, errBadUTF8, 0)
	if _, err := DecodeUntyped(b, nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("DecodeUntyped = %v, want decodeguard.ReasonDecode", err)
	}
	// Nested, with a valid str before it.
	checkScan(t, "nested", hx("92a161a3e08080"), nil, errBadUTF8, 3)
}

func TestSeedMapKeyedByMap(t *testing.T) {
	b := hx("818001")
	checkScan(t, "default", b, nil, errCompositeKey, 1)
	checkScan(t, "explicit defaults", b, &decodeguard.Limits{}, errCompositeKey, 1)
	allow := &decodeguard.Limits{CompositeKeys: true}
	checkScan(t, "composite allowed", b, allow, nil, 0)
	// Scan lets it through on request, but msgp's untyped decoder cannot
	// key on a map: still a classified decode error, not a panic.
	if _, err := DecodeUntyped(b, allow); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("DecodeUntyped = %v, want decodeguard.ReasonDecode", err)
	}
	checkScan(t, "array key", hx("81910101"), nil, errCompositeKey, 1)
	checkScan(t, "second key", hx("82 01 02 80 03"), nil, errCompositeKey, 3)
	checkScan(t, "map value is fine", hx("810180"), nil, nil, 0)
	checkScan(t, "array value is fine", hx("81 01 91 01"), nil, nil, 0)
	checkScan(t, "key in nested map", hx("91 81 a161 81 90 01"), nil, errCompositeKey, 5)
	checkScan(t, "key after nested value", hx("82 01 81 a161 02 92 01 02 03"), nil, errCompositeKey, 6)
}

func deepArrays(depth int, tail []byte) []byte {
	return append(bytes.Repeat([]byte{0x91}, depth), tail...)
}

func TestSeedDeepNesting(t *testing.T) {
	b := deepArrays(20000, []byte{0x01})
	checkScan(t, "20000 deep", b, nil, errDepth, DefaultMaxDepth)
	if _, err := DecodeUntyped(b, nil); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Errorf("DecodeUntyped = %v, want decodeguard.ReasonOversize", err)
	}
	// With the limit raised the same frame is valid and the iterative scan
	// walks all 20,000 levels.
	deep := &decodeguard.Limits{MaxDepth: 1 << 20}
	checkScan(t, "20000 deep allowed", b, deep, nil, 0)
	checkScan(t, "20000 deep truncated", b[:len(b)-1], deep, errArrayLen, len(b)-2)
	checkScan(t, "20000 deep cut inside", append(b[:len(b)-1:len(b)-1], 0xcd, 0x01), deep, errTruncated, len(b)-1)
	maps := bytes.Repeat(hx("81a161"), 20000)
	checkScan(t, "20000 deep maps", append(maps, 0xc0), nil, errDepth, 3*DefaultMaxDepth)

	// The limit is exact, and empty containers count.
	checkScan(t, "at limit", deepArrays(DefaultMaxDepth, []byte{0x01}), nil, nil, 0)
	checkScan(t, "at limit, empty", deepArrays(DefaultMaxDepth-1, []byte{0x90}), nil, nil, 0)
	checkScan(t, "over limit, empty", deepArrays(DefaultMaxDepth, []byte{0x90}), nil, errDepth, DefaultMaxDepth)
	two := &decodeguard.Limits{MaxDepth: 2}
	checkScan(t, "depth 2", hx("919101"), two, nil, 0)
	checkScan(t, "depth 3", hx("91919101"), two, errDepth, 2)
	checkScan(t, "depth 3 empty map", hx("919180"), two, errDepth, 2)
	checkScan(t, "siblings", hx("93 9101 9101 9101"), two, nil, 0)
}

func TestSeedIntWhereArrayExpected(t *testing.T) {
	checkScan(t, "int", hx("45"), nil, nil, 0)
}

func TestSeedEmptyFrame(t *testing.T) {
	checkScan(t, "nil", nil, nil, errEmpty, 0)
	checkScan(t, "empty", []byte{}, nil, errEmpty, 0)
}

func TestScanHugeHeaders(t *testing.T) {
	checkScan(t, "array32 4G", hx("ddffffffff"), nil, errArrayLen, 0)
	checkScan(t, "map32 4G", hx("dfffffffff"), nil, errMapLen, 0)
	checkScan(t, "str32 4G", hx("dbffffffff"), nil, errStrLen, 0)
	checkScan(t, "bin32 4G", hx("c6ffffffff"), nil, errBinLen, 0)
	checkScan(t, "ext32 4G", hx("c9ffffffff01"), &decodeguard.Limits{AllowExt: AllExtTypes()}, errExtLen, 0)
	checkScan(t, "array16 64K", hx("dcffff01"), nil, errArrayLen, 0)
	checkScan(t, "map needs 2N", hx("82010203"), nil, errMapLen, 0)
	checkScan(t, "map has 2N", hx("8201020304"), nil, nil, 0)
	checkScan(t, "array needs N", hx("930102"), nil, errArrayLen, 0)
	// Pending siblings count too: the outer array still needs one object
	// after the inner one's two.
	checkScan(t, "pending sibling", hx("92 dc0002 01 01"), nil, errArrayLen, 1)
	checkScan(t, "pending sibling ok", hx("92 dc0002 01 01 01"), nil, nil, 0)
	for _, b := range [][]byte{hx("ddffffffff"), hx("dfffffffff"), hx("dbffffffff")} {
		if n := testing.AllocsPerRun(100, func() { _, _ = ScanOffset(b, nil) }); n != 0 {
			t.Errorf("ScanOffset(%x) allocates %v times", b, n)
		}
	}
}

func TestScanStructure(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want *decodeguard.Error
		off  int
	}{
		{"0xc1", "c1", errInvalidByte, 0},
		{"0xc1 nested", "9201c1", errInvalidByte, 2},
		{"trailing", "0102", errTrailing, 1},
		{"trailing after array", "920102ff", errTrailing, 3},
		{"trailing after empty", "9000", errTrailing, 1},
		{"truncated float64", "cb0000", errTruncated, 0},
		{"truncated uint16", "cd00", errTruncated, 0},
		{"truncated str8 header", "d9", errTruncated, 0},
		{"truncated array16 header", "dc00", errTruncated, 0},
		{"truncated map32 header", "df000000", errTruncated, 0},
		{"truncated fixext header", "d4", errTruncated, 0},
		{"missing element", "92a26162", errTruncated, 4},
		{"missing map value", "81a26162", errTruncated, 4},
		{"str short", "d90561", errStrLen, 0},
		{"fixstr short", "a3616263", nil, 0},
		{"fixstr short by one", "a36162", errStrLen, 0},
		{"bin short", "c40301", errBinLen, 0},
		{"every scalar", "9f c0 c2 c3 7f e0 cc01 cd0001 ce00000001 cf0000000000000001 d001 d10001 d200000001 d30000000000000001 ca00000000 cb0000000000000000", nil, 0},
		{"str/bin widths", "96 a0 d90161 da000162 db0000000163 c40101 c500020102", nil, 0},
		{"empty containers", "94 90 80 dc0000 de0000", nil, 0},
		{"array32 map32", "dd00000002 df00000001 a0 c0 01", nil, 0},
		{"valid utf8", "a4 e282ac41", nil, 0},
		{"surrogate", "a3 eda080", errBadUTF8, 0},
		// 8 to 16 bytes take the inline ASCII path, whose words overlap.
		{"ascii 8", "a8 6161616161616161", nil, 0},
		{"ascii 16", "b0 61616161616161616161616161616161", nil, 0},
		{"invalid last of 9", "a9 61616161616161 61ff", errBadUTF8, 0},
		{"invalid first of 16", "b0 ff616161616161616161616161616161", errBadUTF8, 0},
		{"invalid middle of 12", "ac 6161616161 ff 616161616161", errBadUTF8, 0},
		{"utf8 12", "ac c3a9c3a9c3a9c3a9c3a96162", nil, 0},
		{"invalid 17", "b1 6161616161616161616161616161616180", errBadUTF8, 0},
		{"invalid 31", "bf" + strings.Repeat("61", 30) + "c3", errBadUTF8, 0},
		{"short fixstr", "a9 6161616161616161", errStrLen, 0},
		{"bin not utf8 checked", "c403e08080", nil, 0},
		{"fixext refused", "d40100", errExtType, 0},
		{"timestamp refused by default", "d6ff00000000", errExtType, 0},
		{"ext8 refused", "c7010501", errExtType, 0},
	}
	for _, c := range cases {
		checkScan(t, c.name, hx(c.in), nil, c.want, c.off)
	}
}

func TestScanExtAllowList(t *testing.T) {
	ts := &decodeguard.Limits{AllowExt: []int8{ExtTimestamp}}
	checkScan(t, "timestamp32", hx("d6ff00000000"), ts, nil, 0)
	checkScan(t, "timestamp96", hx("c70cff 000000000000000000000000"), ts, nil, 0)
	checkScan(t, "other type", hx("d40100"), ts, errExtType, 0)
	s := newExtSet([]int8{1, 3, -128, 127})
	for _, typ := range []int8{1, 3, -128, 127} {
		if !s.has(typ) {
			t.Errorf("Has(%d) = false", typ)
		}
	}
	for _, typ := range []int8{0, 2, -1, 126, -127} {
		if s.has(typ) {
			t.Errorf("Has(%d) = true", typ)
		}
	}
	all := &decodeguard.Limits{AllowExt: AllExtTypes()}
	for _, in := range []string{"d40100", "d5010000", "d601" + strings.Repeat("00", 4),
		"d701" + strings.Repeat("00", 8), "d801" + strings.Repeat("00", 16),
		"c70001", "c7020101 02", "c8000201 0102", "c900000002 01 0102"} {
		checkScan(t, in, hx(in), all, nil, 0)
	}
	checkScan(t, "fixext16 short", hx("d801"+strings.Repeat("00", 15)), all, errExtLen, 0)
	checkScan(t, "ext8 short", hx("c7020101"), all, errExtLen, 0)
}

func TestScanLimits(t *testing.T) {
	three := &decodeguard.Limits{MaxElements: 3}
	checkScan(t, "3 objects", hx("920102"), three, nil, 0)
	checkScan(t, "4 objects", hx("93010203"), three, errElements, 0)
	checkScan(t, "map pairs count twice", hx("810102"), three, nil, 0)
	checkScan(t, "map pairs count twice, over", hx("91810102"), three, errElements, 1)
	// Counted from headers, before the elements are read.
	checkScan(t, "nested headers", hx("92 920101 01"), three, errElements, 1)

	short := &decodeguard.Limits{MaxBytes: 4}
	checkScan(t, "4 bytes", hx("93010203"), short, nil, 0)
	checkScan(t, "5 bytes", hx("9401020304"), short, errTooLong, -1)
	checkScan(t, "default MaxBytes", make([]byte, DefaultMaxBytes+1), nil, errTooLong, -1)

	// A structural lie wins over a limit on the same header.
	checkScan(t, "lie and over limit", hx("ddffffffff"), &decodeguard.Limits{MaxElements: 2}, errArrayLen, 0)

	// Zero and negative fields mean the defaults.
	for _, lim := range []*decodeguard.Limits{nil, {}, {MaxDepth: -1, MaxElements: -5, MaxBytes: -1}} {
		d := DefaultLimits()
		checkScan(t, "defaults depth", deepArrays(d.MaxDepth+1, []byte{1}), lim, errDepth, d.MaxDepth)
	}
	if d := DefaultLimits(); d.MaxDepth != DefaultMaxDepth || d.MaxElements != DefaultMaxElements ||
		d.MaxBytes != DefaultMaxBytes || d.CompositeKeys || d.AllowExt != nil {
		t.Errorf("DefaultLimits() = %+v", d)
	}
}

// Scanning a frame with many elements hits MaxElements exactly as counted.
func TestScanElementCountExact(t *testing.T) {
	b := msgp.AppendArrayHeader(nil, 1000)
	for i := 0; i < 1000; i++ {
		b = msgp.AppendNil(b)
	}
	checkScan(t, "1001 ok", b, &decodeguard.Limits{MaxElements: 1001}, nil, 0)
	checkScan(t, "1001 over", b, &decodeguard.Limits{MaxElements: 1000}, errElements, 0)
}

func TestScanZeroAllocs(t *testing.T) {
	str4k := msgp.AppendString(nil, strings.Repeat("é", 2048))
	many := smallElements4KiB()
	ok := map[string][]byte{"stats": vecStats, "start_wave": vecStartWave, "nixl": vecNixlPayload,
		"str4k": str4k, "many": many}
	for name, b := range ok {
		if n := testing.AllocsPerRun(100, func() {
			if Scan(b, nil) != nil {
				panic("refused")
			}
		}); n != 0 {
			t.Errorf("Scan(%s) allocates %v times", name, n)
		}
	}
	bad := [][]byte{nil, hx("a3e08080"), hx("818001"), deepArrays(20000, []byte{1}), hx("0102"), hx("c1"), hx("9201")}
	for _, b := range bad {
		if n := testing.AllocsPerRun(100, func() { _, _ = ScanOffset(b, nil) }); n != 0 {
			t.Errorf("ScanOffset(%s) allocates %v times", ratelog.Render(b), n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = Scan(b, nil) }); n != 1 {
			t.Errorf("Scan(%s) allocates %v times, want 1 (the *decodeguard.Error)", ratelog.Render(b), n)
		}
	}
}

// smallElements4KiB is a 4 KiB frame of many small objects: an array of
// [fixint, "abc", nil, 1.5] quadruples.
func smallElements4KiB() []byte {
	unit := msgp.AppendFloat64(msgp.AppendNil(msgp.AppendString(msgp.AppendInt(msgp.AppendArrayHeader(nil, 4), 7), "abc")), 1.5)
	n := (4096 - 3) / len(unit)
	b := msgp.AppendArrayHeader(nil, uint32(n))
	for i := 0; i < n; i++ {
		b = append(b, unit...)
	}
	return b
}

// validUTF8 and the inline fixstr path agree with utf8.Valid.
func TestValidUTF8MatchesStdlib(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	pieces := [][]byte{{'a'}, {'z'}, {0xc3, 0xa9}, {0xe2, 0x82, 0xac}, {0xf0, 0x9f, 0x98, 0x80}, {0xff}, {0x80}, {0xc3}, {0xed, 0xa0, 0x80}}
	for i := 0; i < 100000; i++ {
		var s []byte
		for n := r.IntN(40); len(s) < n; {
			if r.IntN(8) == 0 {
				s = append(s, pieces[r.IntN(len(pieces))]...)
			} else {
				s = append(s, byte('a'+r.IntN(26)))
			}
		}
		want := utf8.Valid(s)
		if got := validUTF8(s); got != want {
			t.Fatalf("validUTF8(% x) = %v, want %v", s, got, want)
		}
		if len(s) < 32 {
			frame := append([]byte{0xa0 | byte(len(s))}, s...)
			if got := Scan(frame, nil) == nil; got != want {
				t.Fatalf("Scan(% x) accepted = %v, want %v", frame, got, want)
			}
		}
	}
}

// TestScanErrorNoPeerBytes: a refused frame's error text, as it reaches a
// log line, carries no byte of the frame (terminal escapes included).
func TestScanErrorNoPeerBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, b := range [][]byte{
		[]byte("\x1b[31mred\x1b[0m"),
		[]byte("\x1b]0;title\x07\x1b[2J\r\n\x00\x7f\x9b"),
		all,
		append([]byte("\xa9\x1b[31m"), all...),
	} {
		err := Scan(b, nil)
		if err == nil {
			t.Fatalf("Scan(%s) accepted", ratelog.Render(b))
		}
		s := err.Error()
		if strings.Contains(s, "\x1b") || strings.Contains(s, "[31m") {
			t.Errorf("error text carries an escape sequence: %q", s)
		}
		for _, r := range s {
			if r < 0x20 || r == 0x7f || r >= 0x80 {
				t.Errorf("error text contains %U: %q", r, s)
				break
			}
		}
	}
}
