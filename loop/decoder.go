package loop

import (
	"math"
	"sync/atomic"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// Decoder decodes the body frames of one message into dst, which the loop
// reuses from one message to the next (a decoder must therefore set or reset
// every field it is responsible for). frames are the message's frames, or the
// body frames after the envelope when Config.Envelope is set; they are valid
// only until the handler returns, so a decoder that keeps slices into them
// makes *dst valid only as long.
//
// A Decoder returns nil, a classified bad-input error (a *decodeguard.Error,
// see decodeguard.NewError and decodeguard.WrapError) for input it refuses,
// or any other error for a genuine failure, which ends Run. A plain function,
// a closure over a hand-written parser or one of the helpers below all fit.
type Decoder[T any] func(frames [][]byte, dst *T) error

// resetter is implemented by message types that know how to return
// themselves to their zero state while keeping allocated capacity (a
// Reset() method): MsgpDecoder calls it before each decode.
type resetter interface {
	Reset()
}

// The shared, read-only errors of the helper decoders: a flood of frames of
// the wrong shape allocates nothing for them.
var (
	errNotOneFrame = &decodeguard.Error{Reason: decodeguard.ReasonEnvelope,
		Detail: "message must have exactly one body frame", Offset: -1}
	errNoSuchFrame = &decodeguard.Error{Reason: decodeguard.ReasonEnvelope,
		Detail: "message has too few frames for the decoded frame index", Offset: -1}
)

// The size of a message has one limit in a Loop: [Config.MaxMessageSize],
// which defaults to the MaxMessageSize of the *socket.Socket the loop
// receives from. The helper decoders below leave the size to it when
// lim.MaxBytes is zero (their other limits take decodeguard's defaults as
// usual); a positive lim.MaxBytes sets a decoder's frame limit apart on
// purpose.

// inheritSize returns lim with a zero MaxBytes replaced by "no limit of
// the decoder's own": the loop has already checked the message's size.
func inheritSize(lim decodeguard.Limits) *decodeguard.Limits {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = math.MaxInt
	}
	return &lim
}

// MsgpDecoder returns a Decoder for messages of exactly one body frame that
// holds a msgpack object of type T, decoded by T's msgp-generated (or
// hand-written) UnmarshalMsg through the project's guarded decode: the frame is
// pre-scanned against lim first, msgp errors are classified as
// decodeguard.ReasonDecode, a panic in UnmarshalMsg as
// decodeguard.ReasonDecoderPanic, and bytes left after the object are an
// error. A message with another number of frames is
// decodeguard.ReasonEnvelope.
//
// Before each decode the destination is reset: with (*T).Reset when *T
// implements a Reset() method, else by zeroing it. msgp-generated code leaves
// fields whose keys are missing from a map (or that a short variable-length
// tuple omits) untouched, so decoding into a reused value without a reset
// would leak the previous message's values into this one. Zeroing also
// drops slice capacity; implement Reset to keep it.
//
// Use it as MsgpDecoder[T](lim): the second type parameter is inferred.
func MsgpDecoder[T any, PT interface {
	*T
	msgp.Unmarshaler
}](lim decodeguard.Limits) Decoder[T] {
	return msgpFrameDecoder[T, PT](lim, 0, true)
}

// MsgpFrameDecoder is [MsgpDecoder] for messages of several body frames: it
// decodes the frame at index (negative counts from the end, so -1 is the
// last frame) and ignores the others. A message too short to have that frame
// is decodeguard.ReasonEnvelope. Bound the frame count with Config.Envelope
// (a ROUTER loop) or with the socket's Options.Guard.MaxFrames; Validate
// sees only the decoded value, not the frames.
func MsgpFrameDecoder[T any, PT interface {
	*T
	msgp.Unmarshaler
}](lim decodeguard.Limits, index int) Decoder[T] {
	return msgpFrameDecoder[T, PT](lim, index, false)
}

func msgpFrameDecoder[T any, PT interface {
	*T
	msgp.Unmarshaler
}](lim decodeguard.Limits, index int, exactlyOne bool) Decoder[T] {
	limits := inheritSize(lim)
	_, resettable := any(PT(new(T))).(resetter)
	// A dynamic type assertion per message costs a few nanoseconds, a
	// visible share of a ~140 ns decode; a loop always decodes into the
	// same destination, so the first destination's resetter is kept (set
	// once, never replaced: no allocation after the first message).
	var cache atomic.Pointer[resetEntry[T]]
	return func(frames [][]byte, dst *T) error {
		var b []byte
		switch {
		case exactlyOne:
			if len(frames) != 1 {
				return errNotOneFrame
			}
			b = frames[0]
		case index >= 0 && index < len(frames):
			b = frames[index]
		case index < 0 && -index <= len(frames):
			b = frames[len(frames)+index]
		default:
			return errNoSuchFrame
		}
		p := PT(dst)
		switch c := cache.Load(); {
		case !resettable:
			var zero T
			*dst = zero
		case c != nil && c.dst == dst:
			c.r.Reset()
		default:
			r := any(p).(resetter)
			if c == nil {
				cache.CompareAndSwap(nil, &resetEntry[T]{dst: dst, r: r})
			}
			r.Reset()
		}
		return msgpscan.DecodeMsgp(b, limits, p)
	}
}

// resetEntry is a decoder's cached resetter for one destination.
type resetEntry[T any] struct {
	dst *T
	r   resetter
}

// UntypedDecoder returns a Decoder for messages of exactly one body frame
// holding any msgpack object, decoded by the guarded untyped decode (pre-scan
// against lim, then msgp.ReadIntfBytes) into map[string]any, []any, int64,
// string and so on. It allocates the decoded tree on every message; prefer a
// typed decoder where the shape is known.
func UntypedDecoder(lim decodeguard.Limits) Decoder[any] {
	limits := inheritSize(lim)
	return func(frames [][]byte, dst *any) error {
		*dst = nil
		if len(frames) != 1 {
			return errNotOneFrame
		}
		v, err := msgpscan.DecodeUntyped(frames[0], limits)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}
}

// RawDecoder is the Decoder that decodes nothing: *dst is set to the body
// frames themselves (valid only until the handler returns). Use it for
// messages that are not msgpack, such as XPUB subscriptions, with
// Validate doing the checks.
func RawDecoder(frames [][]byte, dst *[][]byte) error {
	*dst = frames
	return nil
}
