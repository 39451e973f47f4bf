package msgpscan

import (
	"bytes"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

// seedHazards are the named hostile frames; the committed corpora under
// testdata/fuzz hold them too, with the docs/protocol.md vectors.
func seedHazards() map[string][]byte {
	return map[string][]byte{
		"invalid_utf8_str":  hx("a3e08080"),
		"map_keyed_by_map":  hx("818001"),
		"deep_20000":        deepArrays(20000, []byte{0x01}),
		"int_not_array":     hx("45"),
		"empty":             {},
		"array32_4g":        hx("ddffffffff"),
		"map32_4g":          hx("dfffffffff"),
		"str32_4g":          hx("dbffffffff"),
		"never_used_c1":     hx("c1"),
		"trailing":          hx("0102"),
		"pending_sibling":   hx("92dc00020101"),
		"ext_timestamp":     hx("d6ff00000000"),
		"full_stats_tuple":  fullStats,
		"ready_raw":         []byte("READY"),
		"escape_in_key":     hx("81a51b5b33316d01"),
		"deep_maps":         bytes.Repeat(hx("81a161"), 100),
		"array_of_4k_nils":  append(hx("dc1000"), bytes.Repeat([]byte{0xc0}, 4096)...),
		"int_key_map":       hx("810102"),
		"array_key_map":     hx("81910101"),
		"nil_where_int":     hx("98c090c0cb40c81cd6c8b43958c0c0c0c0"),
		"str_where_float":   hx("980190c0a13fc0c0c0c0"),
		"negative_engine":   hx("98ff90c0cb40c81cd6c8b43958c0c0c0c0"),
		"outputs_not_empty": hx("980191c0c0cb40c81cd6c8b43958c0c0c0c0"),
	}
}

func addSeeds(f *testing.F) {
	for _, b := range seedHazards() {
		f.Add(b)
	}
	for _, b := range protocolVectors {
		f.Add(b)
	}
}

var permissive = &decodeguard.Limits{
	MaxDepth:      1 << 20,
	MaxElements:   1 << 30,
	MaxBytes:      1 << 30,
	CompositeKeys: true,
	AllowExt:      AllExtTypes(),
}

// FuzzScan: the pre-scan never panics, and agrees with msgp.Skip on what a
// well-formed object is. With every check but UTF-8 relaxed, Scan accepts
// exactly the inputs that msgp.Skip consumes entirely, minus those with an
// invalid str; and anything the default scan accepts, the relaxed one does.
func FuzzScan(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Scan(b, nil)
		if err != nil && !decodeguard.IsBadInput(err) {
			t.Fatalf("unclassified: %v", err)
		}
		off, shared := ScanOffset(b, nil)
		if (err == nil) != (shared == nil) {
			t.Fatalf("Scan %v, ScanOffset %v", err, shared)
		}
		if err != nil && (err.(*decodeguard.Error).Offset != off || err.(*decodeguard.Error).Detail != shared.(*decodeguard.Error).Detail) {
			t.Fatalf("Scan %v, ScanOffset (%d, %v)", err, off, shared)
		}
		if off < -1 || off > len(b) {
			t.Fatalf("offset %d out of range for %d bytes", off, len(b))
		}

		relaxed := Scan(b, permissive)
		if err == nil && relaxed != nil {
			t.Fatalf("default scan accepts, relaxed refuses: %v", relaxed)
		}
		rest, skipErr := msgp.Skip(b)
		skipOK := skipErr == nil && len(rest) == 0
		if relaxed == nil && !skipOK {
			t.Fatalf("Scan accepts but msgp.Skip: %d left, %v", len(rest), skipErr)
		}
		if skipOK && relaxed != nil && relaxed.(*decodeguard.Error).Detail != errBadUTF8.Detail {
			t.Fatalf("msgp.Skip consumes all but Scan refuses: %v", relaxed)
		}
	})
}

// FuzzScanDecode: the pre-scan plus a typed decode (and an untyped one)
// ends in success or a classified error, never an unclassified one, and a
// decoder behind an accepting scan never panics.
func FuzzScanDecode(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		scanErr := Scan(b, nil)
		var out vllmwire.EngineCoreOutputs
		err := DecodeMsgp(b, nil, &out)
		if err != nil && !decodeguard.IsBadInput(err) {
			t.Fatalf("typed: unclassified %v", err)
		}
		if err == nil && scanErr != nil {
			t.Fatalf("typed decode succeeded after scan refused: %v", scanErr)
		}
		if decodeguard.ReasonOf(err) == decodeguard.ReasonDecoderPanic {
			t.Fatalf("typed decoder panicked: %v", err)
		}
		if err == nil {
			// What decoded re-encodes to something the scan accepts.
			re, merr := out.MarshalMsg(nil)
			if merr != nil {
				t.Fatalf("re-encode: %v", merr)
			}
			if serr := Scan(re, &decodeguard.Limits{MaxBytes: 1 << 30}); serr != nil {
				t.Fatalf("re-encoded frame refused: %v", serr)
			}
		}
		_, uerr := DecodeUntyped(b, nil)
		if uerr != nil && !decodeguard.IsBadInput(uerr) || decodeguard.ReasonOf(uerr) == decodeguard.ReasonDecoderPanic {
			t.Fatalf("untyped: %v", uerr)
		}
	})
}
