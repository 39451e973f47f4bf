package decodeguard

import (
	"errors"
	"strconv"
)

// Reason is why a frame, message or connection from a peer was dropped.
// The set is closed: every layer of zmqguard maps each way a peer can be
// wrong to exactly one of these values, so counters indexed by Reason add up.
type Reason uint8

// The drop reasons. The zero value is ReasonNone and never describes a drop.
const (
	ReasonNone         Reason = iota // not a drop
	ReasonTransport                  // stream-level garbage: bad greeting, bad frame flags, I/O abuse
	ReasonHandshake                  // ZMTP handshake refused: mechanism, READY metadata, socket type, deadline
	ReasonOversize                   // a length over a configured limit (message size, frame count, identity)
	ReasonEnvelope                   // multipart shape wrong: missing delimiter, wrong frame count, bad identity
	ReasonDecode                     // payload is not well-formed msgpack, or not the expected shape/types
	ReasonValidate                   // payload decoded but its values are not acceptable
	ReasonUnknownRank                // a well-formed request for a rank or engine this process does not serve
	ReasonDecoderPanic               // a decoder panicked on the input (caught at the frame boundary)
	ReasonPolicy                     // refused by local policy: source allowlist, connection caps, slow peer
	ReasonAuth                       // authentication failed: unknown or refused key, wrong mechanism, forged or replayed encrypted frame
	ReasonUnsupported                // well-formed, but of a kind this release does not know (a newer peer's message or event type)
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonNone:         "none",
	ReasonTransport:    "transport",
	ReasonHandshake:    "handshake",
	ReasonOversize:     "oversize",
	ReasonEnvelope:     "envelope",
	ReasonDecode:       "decode",
	ReasonValidate:     "validate",
	ReasonUnknownRank:  "unknown-rank",
	ReasonDecoderPanic: "decoder-panic",
	ReasonPolicy:       "policy",
	ReasonAuth:         "auth",
	ReasonUnsupported:  "unsupported",
}

// String returns the reason's stable, lower-case, dash-separated name, suitable
// as a metric label.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Valid reports whether r is one of the defined drop reasons (not ReasonNone).
func (r Reason) Valid() bool { return r > ReasonNone && r < numReasons }

// Reasons returns every valid drop reason in declaration order.
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := ReasonNone + 1; r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// parseReason returns the Reason whose String is name.
func parseReason(name string) (Reason, bool) {
	for r := ReasonNone + 1; r < numReasons; r++ {
		if reasonNames[r] == name {
			return r, true
		}
	}
	return ReasonNone, false
}

// MarshalText implements encoding.TextMarshaler so reasons print by name in JSON.
func (r Reason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler: it accepts the names
// [Reason.String] returns for valid reasons.
func (r *Reason) UnmarshalText(text []byte) error {
	v, ok := parseReason(string(text))
	if !ok {
		return errors.New("decodeguard: unknown reason " + strconv.Quote(string(text)))
	}
	*r = v
	return nil
}

// Error is a classified bad-input error: the peer sent something wrong, and
// the right response is to drop it and count Reason. Detail is a short,
// human-readable description that never contains raw peer bytes.
//
// Use [ReasonOf] or errors.As to get the reason, and errors.Is with
// &Error{Reason: r} to test for one.
type Error struct {
	Reason Reason
	Detail string
	// Offset is the byte offset in the input where the problem was found,
	// or -1 when not applicable.
	Offset int
	// Err is an optional underlying cause (for example a decoder's error).
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	if e == nil {
		return "zmqguard: <nil>"
	}
	s := "zmqguard: " + e.Reason.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Offset >= 0 {
		s += " at offset " + strconv.Itoa(e.Offset)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same Reason (Detail and
// Offset are ignored), so errors.Is(err, &decodeguard.Error{Reason: r})
// matches any error of that reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Reason == e.Reason && t.Detail == "" && t.Err == nil
}

// NewError returns a classified bad-input error with no offset.
func NewError(r Reason, detail string) *Error {
	return &Error{Reason: r, Detail: detail, Offset: -1}
}

// WrapError classifies cause as bad input of reason r. A nil cause yields nil.
func WrapError(r Reason, detail string, cause error) error {
	if cause == nil {
		return nil
	}
	return &Error{Reason: r, Detail: detail, Offset: -1, Err: cause}
}

// ReasonOf returns the reason of the first classified error in err's chain,
// or ReasonNone when err is nil or not classified.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) && e.Reason.Valid() {
		return e.Reason
	}
	return ReasonNone
}

// IsBadInput reports whether err is a classified bad-input error: something a
// peer did wrong, to be dropped and counted. Any other non-nil error is a
// genuine failure (a bug, a closed socket, a cancelled context) and must
// surface.
func IsBadInput(err error) bool { return ReasonOf(err) != ReasonNone }
