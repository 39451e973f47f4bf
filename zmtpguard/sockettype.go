package zmtpguard

import (
	"strconv"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// SocketType is a ZMTP socket type as a READY command's Socket-Type
// property names it, upper case: "PAIR", "PUB", "SUB", "REQ", "REP",
// "DEALER", "ROUTER", "PULL", "PUSH", "XPUB" or "XSUB" (RFC 23 and 37).
// Any other value is refused, with an error naming it, by Handshake, Dial
// and NewListener. A zmq4.SocketType converts with SocketType(t).
type SocketType string

// validType returns nil when t is one of ZMTP's socket types, else a
// one-line error naming t.
func validType(t SocketType) error {
	if zmtpwire.KnownSocketType(t) {
		return nil
	}
	return &socketTypeError{t}
}

type socketTypeError struct{ t SocketType }

func (e *socketTypeError) Error() string {
	return "zmtpguard: unknown socket type " + strconv.Quote(string(e.t)) +
		" (want PAIR, PUB, SUB, REQ, REP, DEALER, ROUTER, PULL, PUSH, XPUB or XSUB)"
}
