package dpwire

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// FrontKind is the kind of a message a front-end sends to the coordinator.
type FrontKind uint8

// The front-end message kinds. The zero value is not a valid kind.
const (
	// FrontSubscribe is an XPUB subscription: the byte 0x01 followed by the
	// topic (empty for vLLM's front-ends, whose XSUB sends "\x01").
	FrontSubscribe FrontKind = iota + 1
	// FrontUnsubscribe is an XPUB unsubscription: 0x00 followed by the topic.
	FrontUnsubscribe
	// FrontScale is ("SCALE_ELASTIC_EP", n): the engine count is now n.
	FrontScale
	// FrontWake is (engine_to_exclude, wave): a front-end is sending a
	// request for wave while the engines are paused, so the others must be
	// woken.
	FrontWake
)

var frontKindNames = [...]string{"invalid", "subscribe", "unsubscribe", "scale", "wake"}

// String returns the kind's lower-case name.
func (k FrontKind) String() string {
	if int(k) < len(frontKindNames) {
		return frontKindNames[k]
	}
	return "invalid"
}

// FrontMsg is one parsed front-end message. Which fields mean something
// depends on Kind.
type FrontMsg struct {
	Kind FrontKind
	// Topic is the subscription topic of a FrontSubscribe or
	// FrontUnsubscribe (the frame after its first byte). It aliases the
	// parsed frame.
	Topic []byte
	// Engines is the new engine count of a FrontScale, in [1, MaxEngines].
	Engines int
	// Wave is the wave of a FrontWake: the front-end's view of the current
	// wave, in [0, MaxWave].
	Wave int64
	// HasExclude reports whether a FrontWake names an engine to leave out of
	// the START_DP_WAVE broadcast (the one the request is going to); Exclude
	// is its index, non-negative.
	HasExclude bool
	Exclude    int64
	// ExcludeIdentity reports that Exclude arrived as vLLM's 2-byte
	// little-endian engine identity (a msgpack bin, as current front-ends
	// send it) rather than as an integer.
	ExcludeIdentity bool
}

// frontLimits bounds the pre-scan of front-end messages: the largest valid
// one, ("SCALE_ELASTIC_EP", n), is 27 bytes and two levels deep.
var frontLimits = decodeguard.Limits{MaxDepth: 4, MaxElements: 64, MaxBytes: 1024}

func frontError(r decodeguard.Reason, b, at []byte, detail string, cause error) error {
	return &decodeguard.Error{Reason: r, Detail: detail, Offset: len(b) - len(at), Err: cause}
}

// ParseFrontMessage parses one frame received on the coordinator's front
// publish (XPUB) socket. The socket delivers three kinds of frame:
//
//   - subscriptions and unsubscriptions, which an XPUB hands up as the byte
//     0x01 or 0x00 followed by the topic: FrontSubscribe / FrontUnsubscribe
//     with Topic (vLLM compares the whole frame with "\x01" and "\x00" and
//     so fails on a topic; here any topic is accepted and reported);
//   - msgpack ("SCALE_ELASTIC_EP", n) with n an int in [1, MaxEngines]:
//     FrontScale;
//   - msgpack (engine_to_exclude, wave) where engine_to_exclude is nil, an
//     int or a 2-byte little-endian engine identity as bin, and wave an int:
//     FrontWake.
//
// Every other frame yields a classified *[decodeguard.Error]: the Scan
// errors (ReasonDecode for malformed msgpack, invalid UTF-8, a map keyed by
// a map, trailing bytes; ReasonOversize for a frame over 1 KiB, nesting
// deeper than 4, more than 64 objects), ReasonDecode for a wrong shape,
// arity or type (a bool, a float, a str other than SCALE_ELASTIC_EP, an
// identity not 2 bytes long), ReasonValidate for a value out of range (a
// negative or too large wave, exclude or engine count). Parsing a valid
// message allocates nothing.
func ParseFrontMessage(b []byte) (FrontMsg, error) {
	if len(b) == 0 {
		return FrontMsg{}, decodeguard.NewError(decodeguard.ReasonDecode, "empty front-end message")
	}
	switch b[0] {
	case 0x01:
		return FrontMsg{Kind: FrontSubscribe, Topic: b[1:]}, nil
	case 0x00:
		return FrontMsg{Kind: FrontUnsubscribe, Topic: b[1:]}, nil
	}
	if err := msgpscan.Scan(b, &frontLimits); err != nil {
		return FrontMsg{}, err
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, b, "front-end message: want a 2-element array", err)
	}
	if n != 2 {
		return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, b, "front-end message: want a 2-element array, wrong arity", nil)
	}
	at := rest
	var m FrontMsg
	switch msgp.NextType(rest) {
	case msgp.StrType:
		var cmd []byte
		cmd, rest, err = msgp.ReadStringZC(rest)
		if err != nil || string(cmd) != ScaleElasticEP {
			return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, at, "front-end message: unknown command", nil)
		}
		at = rest
		var count int64
		count, rest, err = msgp.ReadInt64Bytes(rest)
		if err != nil {
			return FrontMsg{}, intError(b, at, "SCALE_ELASTIC_EP: engine count", err)
		}
		if count < 1 || count > MaxEngines {
			return FrontMsg{}, frontError(decodeguard.ReasonValidate, b, at, "SCALE_ELASTIC_EP: engine count out of range", nil)
		}
		m = FrontMsg{Kind: FrontScale, Engines: int(count)}
	case msgp.NilType:
		rest = rest[1:]
		m.Kind = FrontWake
	case msgp.IntType, msgp.UintType:
		m.Kind, m.HasExclude = FrontWake, true
		m.Exclude, rest, err = msgp.ReadInt64Bytes(rest)
		if err != nil {
			return FrontMsg{}, intError(b, at, "wake: engine_to_exclude", err)
		}
		if m.Exclude < 0 {
			return FrontMsg{}, frontError(decodeguard.ReasonValidate, b, at, "wake: engine_to_exclude is negative", nil)
		}
	case msgp.BinType:
		var id []byte
		id, rest, err = msgp.ReadBytesZC(rest)
		if err != nil || len(id) != 2 {
			return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, at, "wake: engine identity is not 2 bytes", nil)
		}
		m.Kind, m.HasExclude, m.ExcludeIdentity = FrontWake, true, true
		m.Exclude = int64(id[0]) | int64(id[1])<<8
	default:
		return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, at, "front-end message: first element is not a command, nil, an int or an engine identity", nil)
	}
	if m.Kind == FrontWake {
		at = rest
		m.Wave, rest, err = msgp.ReadInt64Bytes(rest)
		if err != nil {
			return FrontMsg{}, intError(b, at, "wake: wave", err)
		}
		if m.Wave < 0 || m.Wave > MaxWave {
			return FrontMsg{}, frontError(decodeguard.ReasonValidate, b, at, "wake: wave out of range", nil)
		}
	}
	if len(rest) != 0 {
		return FrontMsg{}, frontError(decodeguard.ReasonDecode, b, rest, "bytes left after front-end message", nil)
	}
	return m, nil
}

// intError classifies a failed integer read: ReasonValidate when the value
// does not fit int64, ReasonDecode when it is not an integer.
func intError(b, at []byte, what string, err error) error {
	if _, ok := err.(msgp.UintOverflow); ok {
		return frontError(decodeguard.ReasonValidate, b, at, what+": integer out of range", nil)
	}
	return frontError(decodeguard.ReasonDecode, b, at, what+": want an int", err)
}
