// Package nixlwire holds the byte-level codecs of vLLM's NIXL handshake side
// channel that package handshake runs on, for handshake itself and for the
// repository's tools, tests and reference peers.
//
//	body := nixlwire.AppendRequest(nil, 3, 0, 1) // V3 (GET_META_MSG, pp_rank 0, tp_rank 1)
//	p, err := nixlwire.DecodePayload(replyFrame)  // the payload of a V2/V3 reply
//	if err != nil {
//		return err // a classified *decodeguard.Error
//	}
//	m, err := p.AgentMetadata()
//
// [NixlHandshakePayload] and [NixlAgentMetadata] are msgp-generated codecs
// whose encodings match Python's msgpack and msgspec byte for byte ([Int]
// encodes integers as Python does); [DecodePayload] and [DecodeAgentMetadata]
// run decodeguard's structural pre-scan first. [CompatibilityHash] and
// [PythonJSON] render vLLM's compatibility hash. [SafeText] is how peer
// strings reach an error text. Every parser treats its input as hostile:
// bad input yields a classified error, never a panic, and no length read
// from the wire is allocated before it is checked against the bytes present.
// The wire is described in the repository's docs/protocol.md.
package nixlwire

import (
	"math"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// GetMetaMsg is the request message of every handshake variant: sent raw by
// V1 clients and as the first element (msgpack bin) of the V2 and V3 tuples.
const GetMetaMsg = "get_meta_msg"

// MaxRank is the largest pipeline- or tensor-parallel rank a handshake
// listener accepts in a request; larger ones are refused as
// ReasonValidate (no deployment has that many ranks).
const MaxRank = 1<<16 - 1

// ErrorReplyPrefix starts the text of every explicit error reply a
// handshake listener sends: in the compatibility_hash of a V2/V3 reply, in
// the msgpack str of a V1 reply. A real compatibility hash is 64 hex
// digits, so it can never start with it.
const ErrorReplyPrefix = "zmqguard-error: "

var getMetaMsg = []byte(GetMetaMsg)

// AppendRequest appends the body of a handshake request to dst, as vLLM's
// client encodes it: variant 1 is the raw bytes "get_meta_msg"; variant 2
// is the msgpack array (GET_META_MSG as bin, tp); any other variant is the
// current form 3, (GET_META_MSG, pp, tp), with the ranks encoded as Python's
// msgpack encodes ints.
func AppendRequest(dst []byte, variant, pp, tp int) []byte {
	switch variant {
	case 1:
		return append(dst, GetMetaMsg...)
	case 2:
		dst = msgp.AppendArrayHeader(dst, 2)
		dst = msgp.AppendBytes(dst, getMetaMsg)
		return appendInt(dst, int64(tp))
	}
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendBytes(dst, getMetaMsg)
	dst = appendInt(dst, int64(pp))
	return appendInt(dst, int64(tp))
}

// AppendTimestamp appends the V3 reply's last frame: seconds (the sender's
// perf-counter clock) as a msgpack float64, which is how Python encodes a
// float.
func AppendTimestamp(dst []byte, seconds float64) []byte {
	return msgp.AppendFloat64(dst, seconds)
}

// ParseTimestamp parses the last frame of a V3 reply. It accepts a msgpack
// float64 (what vLLM sends), a float32 or an integer, since a Python
// receiver decoding the frame untyped would accept those as numbers too.
// Anything else is ReasonDecode (or ReasonOversize from the pre-scan); NaN
// and infinities are ReasonValidate, as no clock reads them.
func ParseTimestamp(b []byte) (float64, error) {
	if err := msgpscan.Scan(b, nil); err != nil {
		return 0, err
	}
	var f float64
	switch msgp.NextType(b) {
	case msgp.Float64Type:
		f, _, _ = msgp.ReadFloat64Bytes(b)
	case msgp.Float32Type:
		f32, _, _ := msgp.ReadFloat32Bytes(b)
		f = float64(f32)
	case msgp.IntType:
		i, _, _ := msgp.ReadInt64Bytes(b)
		f = float64(i)
	case msgp.UintType:
		u, _, _ := msgp.ReadUint64Bytes(b)
		f = float64(u)
	default:
		return 0, TypeError(b, 0, "timestamp", "a float")
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, &decodeguard.Error{Reason: decodeguard.ReasonValidate, Detail: "timestamp is not finite", Offset: 0}
	}
	return f, nil
}

// TypeError reports that the object at offset off of body is not of the
// wanted type (ReasonDecode); it names the type found, never the bytes.
func TypeError(body []byte, off int, what, want string) error {
	got := "nothing"
	if off < len(body) {
		got = msgp.NextType(body[off:]).String()
	}
	return &decodeguard.Error{
		Reason: decodeguard.ReasonDecode,
		Detail: what + ": expected " + want + ", got " + got,
		Offset: off,
	}
}

// maxSafeText is the longest text SafeText shows as is.
const maxSafeText = 128

// SafeText returns s quoted when it is at most 128 bytes of printable ASCII
// (nothing in it can drive a terminal), and as ratelog.Render's length
// and hex prefix otherwise. Error texts show peer-supplied strings (hashes,
// engine ids, error replies) only through it.
func SafeText(s string) string {
	if len(s) > maxSafeText {
		return ratelog.Render([]byte(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return ratelog.Render([]byte(s))
		}
	}
	return strconv.Quote(s)
}
