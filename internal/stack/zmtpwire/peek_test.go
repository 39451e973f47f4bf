package zmtpwire

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// TestPeekFrameHeader checks the decoder on short and long headers, on
// headers not wholly present, and that it never reads past the header.
func TestPeekFrameHeader(t *testing.T) {
	long := []byte{FlagLong | FlagMore, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xEE}
	cases := []struct {
		name  string
		b     []byte
		flags byte
		size  uint64
		hl    int
		ok    bool
	}{
		{"empty", nil, 0, 0, 0, false},
		{"short flags only", []byte{FlagMore}, FlagMore, 0, 2, false},
		{"short", []byte{FlagMore, 200, 0xAA}, FlagMore, 200, 2, true},
		{"command", []byte{FlagCommand, 5}, FlagCommand, 5, 2, true},
		{"reserved bits are not checked", []byte{0xF8, 3}, 0xF8, 3, 2, true},
		{"long truncated", long[:8], FlagLong | FlagMore, 0, 9, false},
		{"long", long, FlagLong | FlagMore, 0x0102030405060708, 9, true},
		{"long max", []byte{FlagLong, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, FlagLong, 1<<64 - 1, 9, true},
	}
	for _, c := range cases {
		flags, size, hl, ok := PeekFrameHeader(c.b)
		if flags != c.flags || size != c.size || hl != c.hl || ok != c.ok {
			t.Errorf("%s: PeekFrameHeader(% x) = %#x %d %d %v, want %#x %d %d %v",
				c.name, c.b, flags, size, hl, ok, c.flags, c.size, c.hl, c.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { PeekFrameHeader(long) }); n != 0 {
		t.Errorf("PeekFrameHeader allocates %v times", n)
	}
}

// oldParseFrameHeader is ParseFrameHeader as it was before PeekFrameHeader
// (issue 40), kept as the reference of the differential fuzz target.
func oldParseFrameHeader(b []byte, max int64) (h FrameHeader, ok bool, err error) {
	if len(b) < 1 {
		return h, false, nil
	}
	f := b[0]
	if f&flagReserve != 0 {
		return h, false, fault(decodeguard.ReasonTransport, "frame flags have reserved bits set", -1, b[:min(len(b), 9)])
	}
	if f&FlagCommand != 0 && f&FlagMore != 0 {
		return h, false, fault(decodeguard.ReasonTransport, "command frame has MORE set", -1, b[:min(len(b), 9)])
	}
	hl := HeaderLen(f)
	if len(b) < hl {
		return h, false, nil
	}
	var size uint64
	if hl == 2 {
		size = uint64(b[1])
	} else {
		size = binary.BigEndian.Uint64(b[1:9])
	}
	if size > 1<<63-1 || int64(size) > max {
		return h, false, &Error{
			Reason: decodeguard.ReasonOversize,
			Detail: "frame claims " + strconv.FormatUint(size, 10) + " bytes, over the limit of " + strconv.FormatInt(max, 10),
			Length: int64(size & (1<<63 - 1)),
			Prefix: append([]byte(nil), b[:hl]...),
		}
	}
	return FrameHeader{Flags: f, Size: int64(size), Len: hl}, true, nil
}

// oldShiftDecode is the hand-written decode zmtpguard's messageBuffered and
// its zmq4 output tracker used (issue 40 finding): header length from
// the flags, the size by shifts, ok when the header is present.
func oldShiftDecode(b []byte) (flags byte, size uint64, hl int, ok bool) {
	if len(b) < 1 {
		return 0, 0, 0, false
	}
	hl = HeaderLen(b[0])
	if len(b) < hl {
		return 0, 0, 0, false
	}
	if hl == 2 {
		size = uint64(b[1])
	} else {
		size = uint64(b[1])<<56 | uint64(b[2])<<48 | uint64(b[3])<<40 | uint64(b[4])<<32 |
			uint64(b[5])<<24 | uint64(b[6])<<16 | uint64(b[7])<<8 | uint64(b[8])
	}
	return b[0], size, hl, true
}

// FuzzPeekFrameHeader: PeekFrameHeader never panics nor reads past the
// header, agrees with the hand-written decoders it replaced (the old
// ParseFrameHeader, errors included, and the shift decode), and what it
// reports re-encodes to the bytes it read.
func FuzzPeekFrameHeader(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add([]byte{FlagMore, 7}, int64(7))
	f.Add([]byte{FlagLong, 0, 0, 0, 0, 0, 0, 1, 0, 0}, int64(256))
	f.Add([]byte{FlagLong | FlagMore, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, int64(1<<20))
	f.Add([]byte{FlagCommand | FlagMore, 1}, int64(10))
	f.Add([]byte{0xFF, 0}, int64(10))
	f.Add([]byte{FlagLong, 1, 2, 3}, int64(10))
	f.Fuzz(func(t *testing.T, b []byte, max int64) {
		flags, size, hl, ok := PeekFrameHeader(b)
		of, os, ohl, ook := oldShiftDecode(b)
		if ok != ook || (ok && (flags != of || size != os || hl != ohl)) {
			t.Fatalf("% x: peek %#x %d %d %v, shift decode %#x %d %d %v", b, flags, size, hl, ok, of, os, ohl, ook)
		}
		if ok {
			enc := []byte{flags, byte(size)}
			if hl == 9 {
				enc = binary.BigEndian.AppendUint64([]byte{flags}, size)
			}
			if !bytes.Equal(enc, b[:hl]) {
				t.Fatalf("% x: decoded %#x %d re-encodes to % x", b, flags, size, enc)
			}
		}
		h, pok, err := ParseFrameHeader(b, max)
		oh, opok, oerr := oldParseFrameHeader(b, max)
		if h != oh || pok != opok || (err == nil) != (oerr == nil) || (err != nil && err.Error() != oerr.Error()) {
			t.Fatalf("% x max %d: ParseFrameHeader %+v %v %v, old %+v %v %v", b, max, h, pok, err, oh, opok, oerr)
		}
	})
}
