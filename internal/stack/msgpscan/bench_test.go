package msgpscan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

// BenchmarkScanStats100 scans the minimal EngineCoreOutputs stats vector of
// docs/protocol.md §2 (77 bytes; the benchmark keeps the name it was asked for).
func BenchmarkScanStats100(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(vecStats)))
	for b.Loop() {
		if Scan(vecStats, nil) != nil {
			b.Fatal("refused")
		}
	}
}

func BenchmarkScan4KiB(b *testing.B) {
	frames := []struct {
		name string
		b    []byte
	}{
		{"bin", msgp.AppendBytes(nil, bytes.Repeat([]byte{0xab}, 4096-3))},
		{"str-ascii", msgp.AppendString(nil, strings.Repeat("a", 4096-3))},
		{"str-utf8", msgp.AppendString(nil, strings.Repeat("é", (4096-3)/2))},
		{"small-elements", smallElements4KiB()},
		{"nils", append(hx("dc0ffd"), bytes.Repeat([]byte{0xc0}, 4096-3)...)},
	}
	for _, f := range frames {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f.b)))
			for b.Loop() {
				if Scan(f.b, nil) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkScanRefuse is the flood path: a hostile frame refused.
func BenchmarkScanRefuse(b *testing.B) {
	frames := map[string][]byte{
		"array32-4G": hx("ddffffffff"),
		"deep-20000": deepArrays(20000, []byte{0x01}),
		"bad-utf8":   hx("a3e08080"),
	}
	for name, f := range frames {
		b.Run(name+"/ScanOffset", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ScanOffset(f, nil); err == nil {
					b.Fatal("accepted")
				}
			}
		})
		b.Run(name+"/Scan", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if Scan(f, nil) == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// BenchmarkDecodeMsgp compares the guarded typed decode with the bare one.
func BenchmarkDecodeMsgp(b *testing.B) {
	b.Run("guarded", func(b *testing.B) {
		b.ReportAllocs()
		var out vllmwire.EngineCoreOutputs
		for b.Loop() {
			if err := DecodeMsgp(fullStats, nil, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		var out vllmwire.EngineCoreOutputs
		for b.Loop() {
			if _, err := out.UnmarshalMsg(fullStats); err != nil {
				b.Fatal(err)
			}
		}
	})
}
