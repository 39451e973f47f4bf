package zmtpguard

import (
	"encoding/binary"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
)

// ZMTP frame flag bits.
const (
	flagMore    = zmtpwire.FlagMore
	flagLong    = zmtpwire.FlagLong
	flagCommand = zmtpwire.FlagCommand
	flagReserve = 0xF8
)

// frameHeader is a parsed ZMTP frame header.
type frameHeader struct {
	Flags byte
	// Size is the body length the header claims. It has been checked
	// against the caller's limit, not against the bytes present.
	Size int64
	// Len is the header's own length in bytes: 2 (short) or 9 (long).
	Len int
}

// More reports whether another frame of the same message follows.
func (h frameHeader) More() bool { return h.Flags&flagMore != 0 }

// Command reports whether the frame is a command.
func (h frameHeader) Command() bool { return h.Flags&flagCommand != 0 }

// headerLen returns how many header bytes a frame whose first byte is flags
// has: 2 or 9.
func headerLen(flags byte) int {
	if flags&flagLong != 0 {
		return 9
	}
	return 2
}

// parseFrameHeader parses the frame header at the start of b and checks the
// claimed size against max (a limit on this frame's body). It returns
// ok=false with a nil error when b does not yet hold the whole header.
// Reserved flag bits, a command with MORE set, and a size over max (or over
// 2^63-1) are violations; nothing is allocated.
func parseFrameHeader(b []byte, max int64) (h frameHeader, ok bool, err error) {
	if len(b) < 1 {
		return h, false, nil
	}
	f := b[0]
	if f&flagReserve != 0 {
		return h, false, violation(decodeguard.ReasonTransport, "frame flags have reserved bits set", -1, b[:min(len(b), 9)])
	}
	if f&flagCommand != 0 && f&flagMore != 0 {
		return h, false, violation(decodeguard.ReasonTransport, "command frame has MORE set", -1, b[:min(len(b), 9)])
	}
	hl := headerLen(f)
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
		return h, false, &Violation{
			Reason: decodeguard.ReasonOversize,
			Detail: "frame claims " + formatSize(size) + " bytes, over the limit of " + itoa(int(max)),
			Length: int64(size & (1<<63 - 1)),
			Prefix: append([]byte(nil), b[:hl]...),
		}
	}
	return frameHeader{Flags: f, Size: int64(size), Len: hl}, true, nil
}

func formatSize(u uint64) string {
	if u <= 1<<62 {
		return itoa(int(u))
	}
	// Avoid int overflow in itoa for the top of the range.
	var buf [20]byte
	n := len(buf)
	for u > 0 {
		n--
		buf[n] = byte('0' + u%10)
		u /= 10
	}
	return string(buf[n:])
}
