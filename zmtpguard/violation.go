package zmtpguard

import (
	"encoding/hex"
	"strconv"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// maxPrefix is the number of offending bytes a Violation keeps for logs.
const maxPrefix = 64

// Violation describes one way a peer broke the rules. It is both the value
// given to [Config.OnViolation] and the error returned by [Handshake] and
// [Conn.ReadMessage]; errors.As(err, &v) with v *Violation retrieves it, and
// decodeguard.ReasonOf(err) returns its Reason.
type Violation struct {
	// Reason classifies the violation.
	Reason decodeguard.Reason
	// Detail says what was wrong, in words; it never holds peer bytes.
	Detail string
	// Remote is the peer's address as text ("" when unknown).
	Remote string
	// Length is the length involved: a claimed frame size, a frame count, or
	// the number of bytes seen. -1 when not applicable.
	Length int64
	// Prefix is a copy of at most 64 offending bytes, for hex logging.
	Prefix []byte
}

// Error implements error. Offending bytes appear only as hex.
func (v *Violation) Error() string {
	s := "zmtpguard: " + v.Reason.String() + ": " + v.Detail
	if v.Remote != "" {
		s += " (peer " + v.Remote + ")"
	}
	if v.Length >= 0 {
		s += " len=" + strconv.FormatInt(v.Length, 10)
	}
	if len(v.Prefix) > 0 {
		s += " hex=" + hex.EncodeToString(v.Prefix)
	}
	return s
}

// Unwrap exposes the classification so decodeguard.IsBadInput(err) is true.
func (v *Violation) Unwrap() error { return &decodeguard.Error{Reason: v.Reason, Offset: -1} }

func violation(r decodeguard.Reason, detail string, length int64, prefix []byte) *Violation {
	v := &Violation{Reason: r, Detail: detail, Length: length}
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	if len(prefix) > 0 {
		v.Prefix = append([]byte(nil), prefix...)
	}
	return v
}
