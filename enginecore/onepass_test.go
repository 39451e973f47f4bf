package enginecore

import (
	"encoding/hex"
	"math"
	"reflect"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// onePassLimits derives the limits of one differential run from the
// fuzz input's first byte, so that tight depth and element limits, allowed
// ext types and composite keys are all exercised, not only the defaults.
func onePassLimits(sel byte) *decodeguard.Limits {
	switch sel % 8 {
	case 0:
		return nil
	case 1:
		return &decodeguard.Limits{MaxDepth: 1}
	case 2:
		return &decodeguard.Limits{MaxDepth: 2, MaxElements: 12}
	case 3:
		return &decodeguard.Limits{MaxDepth: 3, MaxElements: 20}
	case 4:
		return &decodeguard.Limits{MaxElements: 1 + int(sel>>3)}
	case 5:
		return &decodeguard.Limits{AllowExt: msgpscan.AllExtTypes(), CompositeKeys: true}
	case 6:
		return &decodeguard.Limits{MaxBytes: 16 + int(sel>>3)*4}
	}
	return &decodeguard.Limits{MaxDepth: 4, AllowExt: []int8{3}, CompositeKeys: true}
}

// onePassSeeds are stats, outputs and hazard frames, hex.
var onePassSeeds = []string{
	"94019085b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507ae6b765f63616368655f7573616765cb3fd0000000000000cb40c81cd6c8b43958",
	"9400919192a178c0c0cb40c81cd6c8b43958",                     // one output, nested
	"98009081a3666f6f9191919191c0cb0000000000000000c091a002c0", // unknown stats key, deep value, finished
	"980090c0cb00000000000000009407" + "93a0c0c0c0c0c0c0c0",    // utility output
	"9a0090c000c0c0c0c0c093c0c0c0",                             // extra trailing fields
	"9400c081a3e28082c0",                                       // bad UTF-8 key
	"9400c081b06e756d5f72756e6e696e675f72657173d40100",         // ext as a count
	"9400c08181a17801c0",                                       // composite key
	"9400c081a178d40100",                                       // ext in an unknown value
	"96000000000000c091a3e28082",                               // bad UTF-8 finished id
	"45",                                                       // the seed's junk frame
	"dd7fffffff",                                               // array32 count bomb
	"9400dc0400",                                               // outputs longer than the bytes
	"940090c0cb40c81cd6c8b4395800",                             // trailing byte
	"c1",                                                       // never-used byte
	"9400909191919191919191919191919191919191919191919191919191919191919191c0", // deep
}

// FuzzDecodeHeaderOnePass is the differential check of DecodeHeader's one
// pass against the two passes it replaces (msgpscan.Scan, then the typed
// decode and Validate), under limits picked by the first input byte: the
// one pass alone must accept exactly the frames the two passes accept, into
// the same Header; and DecodeHeader (the one pass plus its second look at
// a refused frame) must return the very same error, reason, detail and
// offset.
func FuzzDecodeHeaderOnePass(f *testing.F) {
	for i, s := range onePassSeeds {
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{byte(i)}, b...))
		f.Add(append([]byte{0}, b...))
	}
	for i, s := range headerFastForms { // header_fast_test.go
		b, err := hex.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{byte(i)}, b...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		lim := onePassLimits(in[0])
		b := in[1:]
		var one, two, full Header
		errOne := decodeHeaderOnePass(b, lim, &one)
		errTwo := decodeHeaderTwoPass(b, lim, &two)
		if (errOne == nil) != (errTwo == nil) {
			t.Fatalf("limits %+v: one pass: %v; two passes: %v", lim, errOne, errTwo)
		}
		if errOne == nil && !sameHeader(one, two) {
			t.Fatalf("values differ:\n%+v\n%+v", one, two)
		}
		errFull := DecodeHeader(b, lim, &full)
		if !reflect.DeepEqual(errFull, errTwo) {
			t.Fatalf("DecodeHeader error %#v, two passes %#v", errFull, errTwo)
		}
		if errFull != nil {
			if r := decodeguard.ReasonOf(errFull); !r.Valid() || r == decodeguard.ReasonDecoderPanic {
				t.Fatalf("unclassified or panic: %v", errFull)
			}
		} else if !sameHeader(full, two) {
			t.Fatalf("DecodeHeader value %+v, two passes %+v", full, two)
		}
	})
}

// sameHeader compares two Headers, floats by their bits (a NaN timestamp
// decodes, and NaN != NaN).
func sameHeader(a, b Header) bool {
	fa := [3]uint64{math.Float64bits(a.Timestamp), math.Float64bits(a.Stats.KVCacheUsage), math.Float64bits(a.Stats.EncoderCacheUsage)}
	fb := [3]uint64{math.Float64bits(b.Timestamp), math.Float64bits(b.Stats.KVCacheUsage), math.Float64bits(b.Stats.EncoderCacheUsage)}
	a.Timestamp, a.Stats.KVCacheUsage, a.Stats.EncoderCacheUsage = 0, 0, 0
	b.Timestamp, b.Stats.KVCacheUsage, b.Stats.EncoderCacheUsage = 0, 0, 0
	return fa == fb && a == b
}

// TestDecodeHeaderOnePassSeeds pins the seeds' outcomes, so that the
// differential target cannot pass by both sides refusing everything.
func TestDecodeHeaderOnePassSeeds(t *testing.T) {
	accept := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}
	for i, s := range onePassSeeds {
		b, _ := hex.DecodeString(s)
		var h Header
		err := decodeHeaderOnePass(b, nil, &h)
		if accept[i] != (err == nil) {
			t.Errorf("seed %d (%s): %v, want accepted=%v", i, s, err, accept[i])
		}
	}
	// A tight element limit refuses the stats vector in one pass too.
	b, _ := hex.DecodeString(onePassSeeds[0])
	var h Header
	if err := decodeHeaderOnePass(b, &decodeguard.Limits{MaxElements: 8}, &h); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Errorf("MaxElements 8: %v, want oversize", err)
	}
	if err := decodeHeaderOnePass(b, &decodeguard.Limits{MaxDepth: 1}, &h); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Errorf("MaxDepth 1: %v, want oversize", err)
	}
}

// TestDecodeHeaderAllocs: the one pass allocates nothing for a valid frame.
func TestDecodeHeaderAllocs(t *testing.T) {
	b, _ := hex.DecodeString(onePassSeeds[0])
	var h Header
	if n := testing.AllocsPerRun(100, func() {
		if err := DecodeHeader(b, nil, &h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocs per decode", n)
	}
}

// BenchmarkDecodeHeaderPasses compares the one pass with the two passes it
// replaced on the 101-byte stats vector (guard included in both).
func BenchmarkDecodeHeaderPasses(b *testing.B) {
	frame, _ := hex.DecodeString(onePassSeeds[0])
	for _, c := range []struct {
		name string
		fn   func([]byte, *decodeguard.Limits, *Header) error
	}{{"onepass", DecodeHeader}, {"twopass", decodeHeaderTwoPass}} {
		b.Run(c.name, func(b *testing.B) {
			var h Header
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			for b.Loop() {
				if err := c.fn(frame, nil, &h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
