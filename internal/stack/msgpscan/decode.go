package msgpscan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime/debug"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// maxCauseText caps the text a decoder's error or a panic value contributes
// to an error string.
const maxCauseText = 256

var errNilDestination = errors.New("decodeguard: DecodeMsgp called with a nil destination")

// DecodeMsgp is the guarded typed decode of one frame: it runs [Scan] with
// lim, then v.UnmarshalMsg(b) (v is typically a pointer to a msgp-generated
// type), and requires the decoder to consume the whole frame. It returns nil
// or a classified error:
//
//   - the Scan error (decodeguard.ReasonDecode or decodeguard.ReasonOversize);
//   - decodeguard.ReasonDecode wrapping the decoder's error when UnmarshalMsg fails (the
//     input is well-formed msgpack but not the expected shape or types) or
//     leaves bytes over;
//   - decodeguard.ReasonDecoderPanic wrapping a *[PanicError] when UnmarshalMsg panics: the
//     recover here is the per-frame boundary.
//
// The wrapped cause stays available to errors.As, but its text in Error() is
// made safe for logs (non-printable and non-ASCII bytes escaped, capped at
// 256 bytes), because msgp puts map keys read from the wire into its error
// context. On failure v may be partly filled. A nil v is a programming error
// and yields an unclassified error.
func DecodeMsgp(b []byte, lim *decodeguard.Limits, v msgp.Unmarshaler) error {
	if v == nil {
		return errNilDestination
	}
	if err := Scan(b, lim); err != nil {
		return err
	}
	return unmarshalGuarded(b, v)
}

func unmarshalGuarded(b []byte, v msgp.Unmarshaler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = newPanicError(r)
		}
	}()
	rest, uerr := v.UnmarshalMsg(b)
	if uerr != nil {
		return &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "typed decode failed", Offset: -1, Err: safeCause{uerr}}
	}
	if len(rest) != 0 {
		return &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "decoder left bytes over", Offset: len(b) - len(rest)}
	}
	return nil
}

// DecodeUntyped is the guarded untyped decode of one frame: [Scan] with lim,
// then msgp.ReadIntfBytes, with the same error classification and panic
// boundary as [DecodeMsgp]. Values come back as msgp builds them: maps as
// map[string]any, arrays as []any, integers as int64 or uint64, str as
// string, bin as []byte, nil as nil. msgp's untyped decoder only accepts str
// and bin map keys, so a map keyed by anything else (an int, say) is a
// decodeguard.ReasonDecode error here even when Scan accepts it.
func DecodeUntyped(b []byte, lim *decodeguard.Limits) (any, error) {
	if err := Scan(b, lim); err != nil {
		return nil, err
	}
	return readIntfGuarded(b)
}

func readIntfGuarded(b []byte) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, newPanicError(r)
		}
	}()
	v, rest, uerr := msgp.ReadIntfBytes(b)
	if uerr != nil {
		return nil, &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "untyped decode failed", Offset: -1, Err: safeCause{uerr}}
	}
	if len(rest) != 0 {
		return nil, &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "decoder left bytes over", Offset: len(b) - len(rest)}
	}
	return v, nil
}

// PanicError is the cause inside a [decodeguard.ReasonDecoderPanic] error: a decoder
// panicked on a frame, and the panic was recovered at the frame boundary.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack (runtime/debug.Stack), for
	// logging once; it contains no frame bytes.
	Stack []byte
}

// Error returns the panic value's text, with non-printable and non-ASCII
// bytes escaped and capped at 256 bytes, so that a panic message quoting
// input cannot put raw bytes into a log.
func (p *PanicError) Error() string {
	return "panic: " + ratelog.Escape(fmt.Sprint(p.Value), maxCauseText)
}

// Unwrap returns the panic value if it is an error (a runtime.Error, say).
func (p *PanicError) Unwrap() error {
	if err, ok := p.Value.(error); ok {
		return err
	}
	return nil
}

func newPanicError(r any) *decodeguard.Error {
	return &decodeguard.Error{
		Reason: decodeguard.ReasonDecoderPanic,
		Detail: "decoder panicked",
		Offset: -1,
		Err:    &PanicError{Value: r, Stack: debug.Stack()},
	}
}

// safeCause wraps a decoder's error so that its text is safe to log while
// errors.Is and errors.As still reach the original.
type safeCause struct{ err error }

func (c safeCause) Error() string { return ratelog.Escape(c.err.Error(), maxCauseText) }
func (c safeCause) Unwrap() error { return c.err }

// ReadFloat reads a msgpack float64 or float32 or, as msgspec accepts for a
// float field, an integer (vLLM sends float64; a front-end's kv_cache_usage
// may come as an integer).
func ReadFloat(b []byte) (float64, []byte, error) {
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
