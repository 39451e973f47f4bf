package handshake

import (
	"encoding/binary"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// Variant is the form of a handshake request, which also fixes the form of
// the reply (docs/protocol.md §1).
type Variant uint8

// The request variants. The zero Variant is none of them.
const (
	// V1 (vLLM ≈0.9–0.10): the raw bytes "get_meta_msg", not msgpack; the
	// reply is [identity, "", msgpack(NixlAgentMetadata)].
	V1 Variant = iota + 1
	// V2 (since vLLM 0.13): msgpack (GET_META_MSG, tp_rank); the reply is
	// [identity, "", msgpack(NixlHandshakePayload)].
	V2
	// V3 (current): msgpack (GET_META_MSG, pp_rank, tp_rank); the reply is
	// [identity, "", msgpack(NixlHandshakePayload), msgpack(float64 seconds)].
	V3
)

// String returns "V1", "V2", "V3", or "Variant(N)" for any other value.
func (v Variant) String() string {
	switch v {
	case V1:
		return "V1"
	case V2:
		return "V2"
	case V3:
		return "V3"
	}
	return "Variant(" + strconv.Itoa(int(v)) + ")"
}

// Request is a parsed handshake request.
type Request struct {
	// Variant is the request's form.
	Variant Variant
	// PP is the requested pipeline-parallel rank: 0 for V1 and V2, which
	// predate pipeline-parallel handshakes.
	PP int
	// TP is the requested tensor-parallel rank: 0 for V1, whose listeners
	// served one rank per port (the rank was in the port number).
	TP int
}

// parseRequest parses one handshake request body (the frame after the
// envelope) without allocating when it is valid.
//
// The body is V1 when it is exactly the 12 bytes "get_meta_msg". Otherwise
// it must pass [msgpscan.Scan] with the default limits and be a msgpack
// array of 2 (V2: message, tp_rank) or 3 (V3: message, pp_rank, tp_rank)
// elements, whose message is "get_meta_msg" as bin (what vLLM sends) or str,
// and whose ranks are integers in [0, nixlwire.MaxRank].
//
// Every refusal is a classified *[decodeguard.Error] whose detail says what
// was wrong and never contains raw peer bytes:
//
//   - ReasonDecode: not well-formed msgpack (from Scan), not an array,
//     wrong arity ("expected 2 or 3 elements, got N"), a message that is not
//     bin or str, a rank that is not an integer;
//   - ReasonOversize: a body over Scan's default limits;
//   - ReasonValidate: a message other than "get_meta_msg", a negative rank,
//     a rank over nixlwire.MaxRank.
//
// vLLM's own listener only logged a message other than GET_META_MSG and
// answered anyway; parseRequest refuses it, because no vLLM client sends
// anything else.
func parseRequest(body []byte) (Request, error) {
	if string(body) == nixlwire.GetMetaMsg {
		return Request{Variant: V1}, nil
	}
	if err := msgpscan.Scan(body, nil); err != nil {
		return Request{}, err
	}
	// Scan guarantees exactly one well-formed object, so the reads below
	// cannot run past the end; their errors are type mismatches.
	n, rest, err := msgp.ReadArrayHeaderBytes(body)
	if err != nil {
		return Request{}, nixlwire.TypeError(body, 0, "request", "an array")
	}
	if n != 2 && n != 3 {
		return Request{}, &decodeguard.Error{
			Reason: decodeguard.ReasonDecode,
			Detail: "request array: expected 2 or 3 elements, got " + strconv.FormatUint(uint64(n), 10),
			Offset: 0,
		}
	}
	req := Request{Variant: V2}
	if n == 3 {
		req.Variant = V3
	}

	off := len(body) - len(rest)
	var msg []byte
	switch msgp.NextType(rest) {
	case msgp.BinType:
		msg, rest, err = msgp.ReadBytesZC(rest)
	case msgp.StrType:
		msg, rest, err = msgp.ReadStringZC(rest)
	default:
		return Request{}, nixlwire.TypeError(body, off, "element 0 (message)", "bin")
	}
	if err != nil {
		return Request{}, nixlwire.TypeError(body, off, "element 0 (message)", "bin")
	}
	if string(msg) != nixlwire.GetMetaMsg {
		return Request{}, &decodeguard.Error{
			Reason: decodeguard.ReasonValidate,
			Detail: "element 0 (message) is not get_meta_msg: " + ratelog.Render(msg),
			Offset: off,
		}
	}

	if n == 3 {
		off = len(body) - len(rest)
		req.PP, rest, err = readRank(body, rest, off, "element 1 (pp_rank)")
		if err != nil {
			return Request{}, err
		}
	}
	off = len(body) - len(rest)
	idx := "element 1 (tp_rank)"
	if n == 3 {
		idx = "element 2 (tp_rank)"
	}
	req.TP, _, err = readRank(body, rest, off, idx)
	if err != nil {
		return Request{}, err
	}
	return req, nil
}

// readRank reads one rank at b (which starts at offset off of body).
func readRank(body, b []byte, off int, what string) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, nixlwire.TypeError(body, off, what, "an integer")
	}
	var neg bool
	var u uint64
	c := b[0]
	switch {
	case c <= 0x7f:
		u, b = uint64(c), b[1:]
	case c >= 0xe0:
		neg, b = true, b[1:]
	case c >= 0xcc && c <= 0xcf: // uint 8/16/32/64
		w := 1 << (c - 0xcc)
		if len(b) < 1+w {
			return 0, b, nixlwire.TypeError(body, off, what, "an integer")
		}
		u, b = readBE(b[1:1+w]), b[1+w:]
	case c >= 0xd0 && c <= 0xd3: // int 8/16/32/64
		w := 1 << (c - 0xd0)
		if len(b) < 1+w {
			return 0, b, nixlwire.TypeError(body, off, what, "an integer")
		}
		raw := readBE(b[1 : 1+w])
		shift := 64 - 8*uint(w)
		v := int64(raw<<shift) >> shift // sign-extend
		if v < 0 {
			neg = true
		} else {
			u = uint64(v)
		}
		b = b[1+w:]
	default:
		return 0, b, nixlwire.TypeError(body, off, what, "an integer")
	}
	if neg {
		return 0, b, &decodeguard.Error{Reason: decodeguard.ReasonValidate, Detail: what + " is negative", Offset: off}
	}
	if u > nixlwire.MaxRank {
		return 0, b, &decodeguard.Error{
			Reason: decodeguard.ReasonValidate,
			Detail: what + " is " + strconv.FormatUint(u, 10) + ", over MaxRank " + strconv.Itoa(nixlwire.MaxRank),
			Offset: off,
		}
	}
	return int(u), b, nil
}

func readBE(b []byte) uint64 {
	switch len(b) {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.BigEndian.Uint16(b))
	case 4:
		return uint64(binary.BigEndian.Uint32(b))
	}
	return binary.BigEndian.Uint64(b)
}

// appendRequest appends the body of req in its variant's form to dst, as
// vLLM's client encodes it (see nixlwire.AppendRequest). Any other Variant,
// including the zero value, is encoded as V3, the current form.
func appendRequest(dst []byte, req Request) []byte {
	return nixlwire.AppendRequest(dst, int(req.Variant), req.PP, req.TP)
}
