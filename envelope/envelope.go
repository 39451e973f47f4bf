// Package envelope checks the multipart shapes of ZeroMQ messages before any
// payload decoder sees them.
//
//	// frames as a ROUTER receives them from a REQ peer
//	env, err := envelope.Parse(frames, nil) // strict: [identity, "", body...]
//	if err != nil {
//		return err // a classified decodeguard.Error: drop and count it
//	}
//	reply := env.Reply(nil, []byte("ok")) // [identity, "", "ok"]
//
// A ROUTER socket prefixes every message it receives with the sending peer's
// identity frame. From a REQ peer it therefore sees
//
//	[identity, "", body...]
//
// and from a bare DEALER that does not send the empty delimiter it sees
//
//	[identity, body...]
//
// A receive loop that unpacks a fixed number of frames dies on the second
// shape (vLLM's NIXL listener did exactly that). [Parse] names what is wrong
// with a message instead, as a classified [decodeguard.Error], so the loop can
// drop it, count it and go on. [Envelope.Reply] builds the matching reply and
// [CheckFrames] applies frame-count rules for sockets without an envelope
// (PULL, SUB, DEALER).
//
// Everything here is a pure function over [][]byte: nothing is copied, and
// neither a well-formed Parse nor a Reply into a slice with spare capacity
// allocates.
//
// Reasons: a frame-count or identity length over a configured limit
// (Options.MaxFrames, Options.MaxIdentity) is [decodeguard.ReasonOversize];
// every other wrong shape (no frames, empty identity, missing delimiter, body
// frame count outside Options.MinBody..Options.MaxBody, CheckFrames bounds) is
// [decodeguard.ReasonEnvelope]. Error details never contain raw peer bytes:
// a frame's content appears only as its length and a short hex prefix.
//
// The package imports nothing of the project except decodeguard, whose Reason
// and Error are the shared vocabulary of drop reasons.
package envelope

import (
	"encoding/hex"
	"errors"
	"strconv"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Defaults applied to zero-valued [Options] fields (each field's doc states
// its own).
const (
	// defaultMaxFrames is the default limit on the number of frames in one
	// message, identity and delimiter included.
	defaultMaxFrames = 64
	// defaultMaxIdentity is the default limit on the identity frame's length:
	// ZMTP routing identities are 1..255 bytes.
	defaultMaxIdentity = 255
	// defaultMinBody is the default minimum number of body frames.
	defaultMinBody = 1
)

// ErrInvalidOptions is wrapped by the error Parse (or CheckFrames) returns when
// its Options (or bounds) are contradictory or out of range. Such an error is a
// configuration bug, not bad input: decodeguard.IsBadInput reports false for
// it, so a receive loop surfaces it instead of dropping the message.
var ErrInvalidOptions = errors.New("envelope: invalid Options")

// Options tunes [Parse]. The zero value (and a nil *Options) means: strict
// (delimiter required), at least 1 body frame, at most 64 frames in all,
// identity at most 255 bytes.
type Options struct {
	// Lenient accepts a message with no empty delimiter after the identity,
	// [identity, body...], as a bare DEALER sends it. An empty second frame
	// is always taken as the delimiter, also in lenient mode: the two shapes
	// cannot be told apart when a DEALER's first body frame is empty.
	Lenient bool

	// MinBody is the minimum number of body frames (frames after the
	// identity and, if present, the delimiter). Zero means 1;
	// -1 accepts a message with no body at all. Values below -1 are invalid.
	MinBody int

	// MaxBody is the maximum number of body frames. 0 means no bound of its
	// own: only MaxFrames limits the body (to MaxFrames-2 frames for a
	// delimited message, MaxFrames-1 for an undelimited one). Negative
	// values, and a positive value below the effective MinBody, are invalid.
	MaxBody int

	// MaxFrames is the maximum number of frames in the whole message. Zero means
	// 64. Values below 2 other than 0 are invalid.
	MaxFrames int

	// MaxIdentity is the maximum identity frame length in bytes. Zero means
	// 255 (the ZMTP limit). Negative values are invalid.
	MaxIdentity int
}

// limits is Options with defaults applied.
type limits struct {
	lenient     bool
	minBody     int
	maxBody     int // 0: bounded by maxFrames only
	maxFrames   int
	maxIdentity int
}

func (o *Options) limits() (limits, error) {
	l := limits{
		minBody:     defaultMinBody,
		maxFrames:   defaultMaxFrames,
		maxIdentity: defaultMaxIdentity,
	}
	if o == nil {
		return l, nil
	}
	l.lenient = o.Lenient
	switch {
	case o.MinBody == -1:
		l.minBody = 0
	case o.MinBody < -1:
		return l, invalid("MinBody", o.MinBody)
	case o.MinBody > 0:
		l.minBody = o.MinBody
	}
	switch {
	case o.MaxFrames < 0 || o.MaxFrames == 1:
		return l, invalid("MaxFrames", o.MaxFrames)
	case o.MaxFrames > 0:
		l.maxFrames = o.MaxFrames
	}
	switch {
	case o.MaxIdentity < 0:
		return l, invalid("MaxIdentity", o.MaxIdentity)
	case o.MaxIdentity > 0:
		l.maxIdentity = o.MaxIdentity
	}
	switch {
	case o.MaxBody < 0:
		return l, invalid("MaxBody", o.MaxBody)
	case o.MaxBody > 0:
		if o.MaxBody < l.minBody {
			return l, invalidPair("MaxBody", o.MaxBody, "MinBody", l.minBody)
		}
		l.maxBody = o.MaxBody
	}
	return l, nil
}

func invalid(field string, v int) error {
	return &optionsError{field + " = " + strconv.Itoa(v)}
}

func invalidPair(a string, av int, b string, bv int) error {
	return &optionsError{a + " = " + strconv.Itoa(av) + " is below " + b + " = " + strconv.Itoa(bv)}
}

type optionsError struct{ detail string }

func (e *optionsError) Error() string { return ErrInvalidOptions.Error() + ": " + e.detail }
func (e *optionsError) Unwrap() error { return ErrInvalidOptions }

// Envelope is a parsed ROUTER message. Its slices alias the frames given to
// [Parse]; nothing is copied. Identity and Body have their capacity clipped to
// their length, so appending to them never overwrites the caller's frames.
type Envelope struct {
	// Identity is the routing identity frame the ROUTER put first.
	Identity []byte
	// Delimited reports whether an empty delimiter frame followed the
	// identity (REQ and REQ-like DEALER peers). It is false only for a
	// message accepted under Options.Lenient.
	Delimited bool
	// Body holds the frames after the identity and delimiter.
	Body [][]byte
}

// Parse checks that frames, as received by a ROUTER socket, have the shape
// [identity, "", body...] (or [identity, body...] under Options.Lenient) and
// returns its parts. opt may be nil for the defaults.
//
// Every malformed shape yields a *decodeguard.Error: ReasonOversize for more
// than MaxFrames frames or an identity longer than MaxIdentity bytes,
// ReasonEnvelope for everything else. The checks run in this order: no frames;
// too many frames; empty identity; identity too long; missing delimiter
// (strict only); body frame count. Invalid Options yield an error wrapping
// [ErrInvalidOptions] instead, which is not classified as bad input.
//
// Parse never panics, never copies and, on success, never allocates.
func Parse(frames [][]byte, opt *Options) (Envelope, error) {
	l, err := opt.limits()
	if err != nil {
		return Envelope{}, err
	}
	n := len(frames)
	if n == 0 {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope, "no frames")
	}
	if n > l.maxFrames {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonOversize,
			"message has "+strconv.Itoa(n)+" frames, limit "+strconv.Itoa(l.maxFrames))
	}
	id := frames[0]
	if len(id) == 0 {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope,
			"empty identity frame: a ROUTER always puts a non-empty peer identity first")
	}
	if len(id) > l.maxIdentity {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonOversize,
			"identity frame is "+strconv.Itoa(len(id))+" bytes, limit "+strconv.Itoa(l.maxIdentity))
	}
	env := Envelope{Identity: id[:len(id):len(id)]}
	start := 1
	switch {
	case n >= 2 && len(frames[1]) == 0:
		env.Delimited = true
		start = 2
	case l.lenient:
		// [identity, body...]: no delimiter, accepted.
	case n == 1:
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope,
			"no empty delimiter frame after the identity: the message is the identity frame alone")
	default:
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope,
			"no empty delimiter frame after the identity: second frame is non-empty ("+
				describe(frames[1])+"), the shape a bare DEALER sends; set Options.Lenient to accept it")
	}
	body := n - start
	if body < l.minBody {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope,
			"too few body frames: got "+strconv.Itoa(body)+", want at least "+strconv.Itoa(l.minBody))
	}
	if l.maxBody > 0 && body > l.maxBody {
		return Envelope{}, decodeguard.NewError(decodeguard.ReasonEnvelope,
			"too many body frames: got "+strconv.Itoa(body)+", want at most "+strconv.Itoa(l.maxBody))
	}
	if body > 0 {
		env.Body = frames[start:n:n]
	}
	return env, nil
}

// delimiter is the empty frame Reply puts after the identity. It has zero
// capacity, so a caller appending to it gets a fresh array.
var delimiter = []byte{}

// Reply appends to dst the frames of a reply to e carrying body and returns
// the extended slice: [identity, "", body...] when e was delimited, or
// [identity, body...] when e was an undelimited message accepted leniently.
// The result aliases e.Identity and body; nothing is copied, and when dst has
// room for the frames Reply does not allocate.
//
// A reply to an undelimited envelope with no body frames gets one empty body
// frame, so the result always holds a sendable message after the identity.
// Apart from that case, Reply(nil, e.Body...) reproduces the frames e was
// parsed from.
func (e Envelope) Reply(dst [][]byte, body ...[]byte) [][]byte {
	dst = append(dst, e.Identity)
	if e.Delimited || len(body) == 0 {
		dst = append(dst, delimiter)
	}
	return append(dst, body...)
}

// CheckFrames checks that a message of a socket without a routing envelope
// (PULL, SUB, DEALER, REQ) has between minFrames and maxFrames frames,
// inclusive. It
// returns a *decodeguard.Error with ReasonEnvelope when it has not; a frame
// count is a shape here, not a size, so too many frames is ReasonEnvelope as
// well. maxFrames <= 0 means no upper bound; use it only when the socket
// already caps the frame count. Invalid bounds (minFrames < 0, or
// maxFrames > 0 and maxFrames < minFrames) yield an error wrapping
// [ErrInvalidOptions].
func CheckFrames(frames [][]byte, minFrames, maxFrames int) error {
	if minFrames < 0 {
		return invalid("minFrames", minFrames)
	}
	if maxFrames > 0 && maxFrames < minFrames {
		return invalidPair("maxFrames", maxFrames, "minFrames", minFrames)
	}
	n := len(frames)
	if n < minFrames {
		return decodeguard.NewError(decodeguard.ReasonEnvelope,
			"too few frames: got "+strconv.Itoa(n)+", want at least "+strconv.Itoa(minFrames))
	}
	if maxFrames > 0 && n > maxFrames {
		return decodeguard.NewError(decodeguard.ReasonEnvelope,
			"too many frames: got "+strconv.Itoa(n)+", want at most "+strconv.Itoa(maxFrames))
	}
	return nil
}

// hexPrefixLen is how many leading bytes of a frame an error detail shows.
const hexPrefixLen = 8

// describe renders a frame for an error detail: its length and a capped hex
// prefix, never its raw bytes.
func describe(b []byte) string {
	s := strconv.Itoa(len(b)) + " bytes, hex " + hex.EncodeToString(b[:min(len(b), hexPrefixLen)])
	if len(b) > hexPrefixLen {
		s += "..."
	}
	return s
}
