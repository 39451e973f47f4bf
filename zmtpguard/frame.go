package zmtpguard

import (
	"strconv"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// ZMTP frame flag bits.
const (
	flagMore    = zmtpwire.FlagMore
	flagLong    = zmtpwire.FlagLong
	flagCommand = zmtpwire.FlagCommand
)

// frameHeader is a parsed ZMTP frame header.
type frameHeader = zmtpwire.FrameHeader

// headerLen returns how many header bytes a frame whose first byte is flags
// has: 2 or 9.
func headerLen(flags byte) int { return zmtpwire.HeaderLen(flags) }

// parseFrameHeader is zmtpwire.ParseFrameHeader with its fault as a
// *Violation.
func parseFrameHeader(b []byte, max int64) (frameHeader, bool, error) {
	h, ok, err := zmtpwire.ParseFrameHeader(b, max)
	return h, ok, fromWire(err)
}

// isDataFrame reports whether a frame whose first byte is flags is a data
// frame with no reserved bit set (only MORE and LONG may be set).
func isDataFrame(flags byte) bool { return flags&^(flagMore|flagLong) == 0 }

func formatSize(u uint64) string { return strconv.FormatUint(u, 10) }
