package msgpscan

import (
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/tinylib/msgp/msgp"
	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

// validFrames is the pool random frames are mutated from.
func validFrames() [][]byte {
	pool := [][]byte{fullStats, smallElements4KiB()}
	names := make([]string, 0, len(protocolVectors))
	for name := range protocolVectors {
		names = append(names, name)
	}
	sort.Strings(names) // a fixed order, so the seeded run is reproducible
	for _, name := range names {
		pool = append(pool, protocolVectors[name])
	}
	// More complete 8-field EngineCoreOutputs, so that mutations of them
	// still decode often.
	for i := int64(0); i < 4; i++ {
		w := i + 3
		out := vllmwire.EngineCoreOutputs{
			EngineIndex:      i,
			Outputs:          []msgp.Raw{msgp.AppendNil(nil), msgp.AppendString(nil, "req")},
			SchedulerStats:   &vllmwire.SchedulerStats{NumRunningReqs: i, NumWaitingReqs: 2 * i, KVCacheUsage: 0.5},
			Timestamp:        float64(i) * 1.25,
			FinishedRequests: []string{"a", "bc"},
			StartWave:        &w,
		}
		b, err := out.MarshalMsg(nil)
		if err != nil {
			panic(err)
		}
		pool = append(pool, b)
	}
	return pool
}

// mutate returns a damaged copy of b.
func mutate(r *rand.Rand, b []byte) []byte {
	c := append([]byte(nil), b...)
	for k := r.IntN(3) + 1; k > 0; k-- {
		if len(c) == 0 {
			c = append(c, byte(r.IntN(256)))
			continue
		}
		i := r.IntN(len(c))
		switch r.IntN(8) {
		case 0: // flip a bit
			c[i] ^= 1 << r.IntN(8)
		case 1: // random byte
			c[i] = byte(r.IntN(256))
		case 2: // truncate
			c = c[:i]
		case 3: // append junk
			c = append(c, byte(r.IntN(256)))
		case 4: // delete a byte
			c = append(c[:i], c[i+1:]...)
		case 5: // insert a byte
			c = append(c[:i], append([]byte{byte(r.IntN(256))}, c[i:]...)...)
		case 6: // a large length-ish byte
			c[i] = []byte{0xff, 0xdc, 0xdd, 0xde, 0xdf, 0xdb, 0xc6, 0xc1, 0x91}[r.IntN(9)]
		case 7: // a valid object spliced in
			c = append(c[:i], append([]byte{0x93, 0xa1, 'x', 0xc0, 0x01}, c[i:]...)...)
		}
	}
	return c
}

// randomFrame is pure noise (70% 0–64 bytes, else up to 4 KiB) a third of the
// time and a mutated valid frame otherwise; one in ten valid frames is kept
// intact.
func randomFrame(r *rand.Rand, pool [][]byte) []byte {
	switch r.IntN(30) {
	case 0, 1, 2, 3, 4, 5, 6, 7, 8, 9:
		n := r.IntN(65)
		if r.IntN(10) < 3 {
			n = r.IntN(4097)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	case 10, 11:
		return pool[r.IntN(len(pool))]
	default:
		return mutate(r, pool[r.IntN(len(pool))])
	}
}

// 200,000 random frames through (a) the pre-scan plus an untyped decode and
// (b) the pre-scan plus a typed tuple decode: every result is a success or
// a classified error, and a decoder never panics behind a scan that passed.
func TestRandomFrames(t *testing.T) {
	const frames = 200000
	r := rand.New(rand.NewPCG(2026, 11))
	pool := validFrames()
	var scanOK, untypedOK, typedOK, typedBad int
	for i := 0; i < frames; i++ {
		b := randomFrame(r, pool)
		scanErr := Scan(b, nil)
		if scanErr != nil && !decodeguard.IsBadInput(scanErr) {
			t.Fatalf("frame %d %s: unclassified scan error %v", i, ratelog.Render(b), scanErr)
		}
		if scanErr == nil {
			scanOK++
		}

		v, err := DecodeUntyped(b, nil)
		switch {
		case err == nil:
			untypedOK++
			if scanErr != nil {
				t.Fatalf("frame %d %s: untyped decode succeeded after scan refused", i, ratelog.Render(b))
			}
			_ = v
		case !decodeguard.IsBadInput(err):
			t.Fatalf("frame %d %s: unclassified untyped error %v", i, ratelog.Render(b), err)
		case decodeguard.ReasonOf(err) == decodeguard.ReasonDecoderPanic:
			t.Fatalf("frame %d %s: untyped decoder panicked: %v", i, ratelog.Render(b), err)
		}

		var out vllmwire.EngineCoreOutputs
		err = DecodeMsgp(b, nil, &out)
		switch {
		case err == nil:
			typedOK++
			if scanErr != nil {
				t.Fatalf("frame %d %s: typed decode succeeded after scan refused", i, ratelog.Render(b))
			}
		case !decodeguard.IsBadInput(err):
			t.Fatalf("frame %d %s: unclassified typed error %v", i, ratelog.Render(b), err)
		case decodeguard.ReasonOf(err) == decodeguard.ReasonDecoderPanic:
			t.Fatalf("frame %d %s: typed decoder panicked: %v", i, ratelog.Render(b), err)
		default:
			typedBad++
		}
	}
	t.Logf("%d frames: scan accepted %d, untyped decoded %d, typed decoded %d, typed refused %d",
		frames, scanOK, untypedOK, typedOK, typedBad)
	// Both paths must really have been exercised.
	if scanOK < frames/20 || scanOK > frames*19/20 || untypedOK == 0 || typedOK < frames/100 || typedBad < frames/2 {
		t.Errorf("random frames did not exercise both success and failure paths")
	}
}

// genValue appends a random valid msgpack value of at most depth levels of
// nesting below it. Strings are valid UTF-8, map keys are scalars, and ext
// values use arbitrary types (scan with AllExtTypes).
func genValue(t *rapid.T, b []byte, depth int) []byte {
	kinds := 12
	if depth == 0 {
		kinds = 9
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		return msgp.AppendNil(b)
	case 1:
		return msgp.AppendBool(b, rapid.Bool().Draw(t, "bool"))
	case 2:
		return msgp.AppendInt64(b, rapid.Int64().Draw(t, "int"))
	case 3:
		return msgp.AppendUint64(b, rapid.Uint64().Draw(t, "uint"))
	case 4:
		return msgp.AppendFloat64(b, rapid.Float64().Draw(t, "f64"))
	case 5:
		return msgp.AppendFloat32(b, rapid.Float32().Draw(t, "f32"))
	case 6:
		return msgp.AppendString(b, rapid.StringN(0, 300, -1).Draw(t, "str"))
	case 7:
		return msgp.AppendBytes(b, rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "bin"))
	case 8:
		payload := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, "ext")
		typ := rapid.Int8().Draw(t, "exttype")
		switch len(payload) {
		case 1, 2, 4, 8, 16:
			fix := map[int]byte{1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8}[len(payload)]
			b = append(b, fix, byte(typ))
		default:
			b = append(b, 0xc7, byte(len(payload)), byte(typ))
		}
		return append(b, payload...)
	case 9:
		n := rapid.IntRange(0, 20).Draw(t, "alen")
		b = msgp.AppendArrayHeader(b, uint32(n))
		for i := 0; i < n; i++ {
			b = genValue(t, b, depth-1)
		}
		return b
	case 10:
		n := rapid.IntRange(0, 20).Draw(t, "mlen")
		b = msgp.AppendMapHeader(b, uint32(n))
		for i := 0; i < n; i++ {
			b = msgp.AppendString(b, rapid.String().Draw(t, "key"))
			b = genValue(t, b, depth-1)
		}
		return b
	default: // a scalar-keyed map with non-string keys
		n := rapid.IntRange(0, 3).Draw(t, "mlen")
		b = msgp.AppendMapHeader(b, uint32(n))
		for i := 0; i < n; i++ {
			b = msgp.AppendInt(b, rapid.Int().Draw(t, "ikey"))
			b = genValue(t, b, depth-1)
		}
		return b
	}
}

var permissiveExt = &decodeguard.Limits{AllowExt: AllExtTypes()}

// Scan accepts every valid value; every proper prefix and any trailing byte
// are refused; msgp.Skip agrees on the object's extent.
func TestPropertyValidValues(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genValue(t, nil, rapid.IntRange(0, 6).Draw(t, "depth"))
		if err := Scan(b, permissiveExt); err != nil {
			t.Fatalf("Scan(%s) = %v", ratelog.Render(b), err)
		}
		if rest, err := msgp.Skip(b); err != nil || len(rest) != 0 {
			t.Fatalf("msgp.Skip: %d left, %v", len(rest), err)
		}
		for i := 0; i < len(b); i++ {
			err := Scan(b[:i], permissiveExt)
			if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
				t.Fatalf("prefix of %d/%d bytes: Scan = %v, want decodeguard.ReasonDecode", i, len(b), err)
			}
		}
		extra := append(b[:len(b):len(b)], rapid.Byte().Draw(t, "extra"))
		if off, err := ScanOffset(extra, permissiveExt); err != errTrailing || off != len(b) {
			t.Fatalf("trailing byte: (%d, %v)", off, err)
		}
	})
}

// Wrapping any valid value in arrays up to the depth limit passes; using it
// as a map key passes only with CompositeKeys when it is a container.
func TestPropertyDepthAndKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := genValue(t, nil, 3)
		m := &decodeguard.Limits{AllowExt: AllExtTypes(), MaxDepth: 8}
		lvl := 8 - 3 // genValue(…, 3) nests at most 3 levels
		wrapped := append(deepArrays(lvl, nil), v...)
		if err := Scan(wrapped, m); err != nil {
			t.Fatalf("Scan(wrapped) = %v", err)
		}
		keyed := append(append([]byte{0x81}, v...), 0xc0)
		err := Scan(keyed, m)
		t0 := msgp.NextType(v)
		isContainer := t0 == msgp.ArrayType || t0 == msgp.MapType
		e, _ := err.(*decodeguard.Error)
		if isContainer != (e != nil && e.Detail == errCompositeKey.Detail) || !isContainer && err != nil {
			t.Fatalf("key %s: Scan = %v (container %v)", ratelog.Render(v), err, isContainer)
		}
		m.CompositeKeys = true
		if err := Scan(keyed, m); err != nil {
			t.Fatalf("CompositeKeys: Scan = %v", err)
		}
	})
}
