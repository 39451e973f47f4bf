package enginecore

import (
	"encoding/hex"
	"reflect"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// headerFastForms are frames in the forms headerFast takes: the 101-byte
// stats vector, vLLM's full 8-field struct with every stats field it reads
// (and the waves set), the same with scheduler_stats nil, and a fixmap with
// a repeated key (the last value wins, as in the general pass).
var headerFastForms = []string{
	onePassSeeds[0],
	"98079085b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507ae6b765f63616368655f7573616765cb3fd0000000000000" +
		"cb40c81cd6c8b43958c0c00709",
	"97029087b06e756d5f72756e6e696e675f7265717300b06e756d5f77616974696e675f7265717300b86e756d5f736b69707065645f77616974696e675f7265717301ac737465705f636f756e74657200ac63757272656e745f7761766500" +
		"ae6b765f63616368655f7573616765cb0000000000000000b3656e636f6465725f63616368655f7573616765cb3fb999999999999a" +
		"cb40c81cd6c8b43958c0c0c0",
	"980190c0cb40c81cd6c8b43958c0c0c0c0",
	"94019082ac737465705f636f756e74657201ac737465705f636f756e74657202cb0000000000000000",
}

// sameAsTwoPasses fails unless DecodeHeader and the two passes it replaces
// give b under lim the same error (reason, detail, offset) and, when they
// accept it, the same Header.
func sameAsTwoPasses(t *testing.T, b []byte, lim *decodeguard.Limits) {
	t.Helper()
	var fast, two Header
	errFast := DecodeHeader(b, lim, &fast)
	errTwo := decodeHeaderTwoPass(b, lim, &two)
	if !reflect.DeepEqual(errFast, errTwo) {
		t.Fatalf("%x under %+v: DecodeHeader %v; two passes %v", b, lim, errFast, errTwo)
	}
	if errFast == nil && !sameHeader(fast, two) {
		t.Fatalf("%x under %+v: values differ:\nDecodeHeader %+v\ntwo passes   %+v", b, lim, fast, two)
	}
}

// TestHeaderFastTaken: the forms above take the fast path, with the
// default limits, and a message with request outputs does not.
func TestHeaderFastTaken(t *testing.T) {
	for i, s := range headerFastForms {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		d := decoder{exact: true, budget: 1<<20 - 1}
		d.rawLim.MaxDepth = 32
		var h Header
		if !h.headerFast(b, &d) {
			t.Errorf("form %d (%s): fast path not taken", i, s)
		}
		var want Header
		if err := decodeHeaderTwoPass(b, nil, &want); err != nil || !sameHeader(h, want) {
			t.Errorf("form %d: fast %+v, two passes %+v (%v)", i, h, want, err)
		}
	}
	b, _ := hex.DecodeString(onePassSeeds[1])
	d := decoder{exact: true, budget: 1<<20 - 1}
	d.rawLim.MaxDepth = 32
	var h Header
	if h.headerFast(b, &d) {
		t.Error("a message with an output took the fast path")
	}
}

// TestHeaderFastSame runs the differential check over every single-byte
// change of each fast form to values the fast path tests for, over every
// truncation and one extra byte, and under limits around what each form
// needs (MaxBytes, MaxDepth, MaxElements), so that whatever the fast path
// refuses or gets wrong shows up as a difference from the two passes.
func TestHeaderFastSame(t *testing.T) {
	lims := []*decodeguard.Limits{nil, {MaxDepth: 1}, {MaxDepth: 2}}
	for _, me := range []int{1, 4, 5, 8, 14, 15, 19, 20, 21} {
		lims = append(lims, &decodeguard.Limits{MaxElements: me})
	}
	for _, s := range headerFastForms {
		body, _ := hex.DecodeString(s)
		for _, lim := range append(lims, &decodeguard.Limits{MaxBytes: len(body)}, &decodeguard.Limits{MaxBytes: len(body) - 1}) {
			sameAsTwoPasses(t, body, lim)
		}
		for i := range body {
			for _, v := range []byte{0x00, 0x01, 0x05, 0x7f, 0x80, 0x85, 0x8f, 0x90, 0x91, 0x93, 0x94, 0x98, 0x99,
				0xa0, 0xac, 0xb0, 0xbf, 0xc0, 0xc2, 0xca, 0xcb, 0xcc, 0xd0, 0xd9, 0xe0, 0xff} {
				if body[i] == v {
					continue
				}
				c := append([]byte(nil), body...)
				c[i] = v
				sameAsTwoPasses(t, c, nil)
			}
			sameAsTwoPasses(t, body[:i], nil)
		}
		sameAsTwoPasses(t, append(append([]byte(nil), body...), 0xc0), nil)
	}
}

// BenchmarkDecodeHeaderFast is DecodeHeader of the stats vector with and
// without the fast path.
func BenchmarkDecodeHeaderFast(b *testing.B) {
	frame, _ := hex.DecodeString(onePassSeeds[0])
	for _, on := range []bool{true, false} {
		name := "fast"
		if !on {
			name = "general"
		}
		b.Run(name, func(b *testing.B) {
			withFastPaths(on, func() {
				var h Header
				b.ReportAllocs()
				for b.Loop() {
					if err := DecodeHeader(frame, nil, &h); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
