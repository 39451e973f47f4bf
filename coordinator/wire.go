package coordinator

import (
	"encoding/binary"
	"math"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
)

// The engine wire types live in package enginecore, their one home; the
// coordinator's names for them are aliases.

// EngineCoreOutputs is the coordinator's view of vLLM's EngineCoreOutputs,
// the message every engine core pushes to the coordinator's back-output
// socket: [enginecore.Header], which keeps every top-level field and only
// counts or flags the request outputs, the utility output and the finished
// request ids. A coordinator message has no request outputs and no utility
// output (the coordinator drops one that has). Decoding into a
// reused value allocates nothing.
type EngineCoreOutputs = enginecore.Header

// SchedulerStats is the part of vLLM's SchedulerStats the coordinator reads
// ([enginecore.SchedulerStats]).
type SchedulerStats = enginecore.SchedulerStats

// DecodeEngineCoreOutputs is the guarded decode of one back-output frame into
// dst (which it resets): [enginecore.DecodeHeader] with decodeguard's default
// limits (which refuse every ext type, so a message carrying arrays is
// refused), one pass that accepts exactly what msgpscan.Scan followed by
// [enginecore.Header.UnmarshalMsg] and [enginecore.Header.Validate] accept,
// with the same errors. It returns nil or a classified *[decodeguard.Error]. A valid frame into a reused dst allocates
// nothing. A nil dst is a programming error and yields an unclassified
// error.
func DecodeEngineCoreOutputs(b []byte, dst *EngineCoreOutputs) error {
	return enginecore.DecodeHeader(b, nil, dst)
}

// DecodeEngineCoreOutputsLimits is [DecodeEngineCoreOutputs] with Scan limits
// lim (nil means decodeguard's defaults).
func DecodeEngineCoreOutputsLimits(b []byte, lim *decodeguard.Limits, dst *EngineCoreOutputs) error {
	return enginecore.DecodeHeader(b, lim, dst)
}

// readFloat reads a msgpack float64 or float32 or, as msgspec accepts for a
// float field, an integer (the front-end publications' kv_cache_usage).
func readFloat(b []byte) (float64, []byte, error) {
	if len(b) >= 9 && b[0] == 0xcb {
		return math.Float64frombits(binary.BigEndian.Uint64(b[1:9])), b[9:], nil
	}
	switch msgp.NextType(b) {
	case msgp.Float64Type, msgp.Float32Type:
		return msgp.ReadFloat64Bytes(b)
	case msgp.IntType:
		i, o, err := msgp.ReadInt64Bytes(b)
		return float64(i), o, err
	case msgp.UintType:
		u, o, err := msgp.ReadUint64Bytes(b)
		return float64(u), o, err
	case msgp.InvalidType:
		if len(b) == 0 {
			return 0, b, msgp.ErrShortBytes
		}
	}
	return 0, b, msgp.TypeError{Method: msgp.Float64Type, Encoded: msgp.NextType(b)}
}

// usageOK reports whether a cache usage is a finite non-negative number.
func usageOK(f float64) bool { return f >= 0 && f <= math.MaxFloat64 }
