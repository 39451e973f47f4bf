package zmtpguard

import (
	"strconv"

	"github.com/zmqguard/zmqguard/internal/zmtpwire"
)

// SocketType is a ZMTP socket type, as a READY command's Socket-Type
// property names it ("PULL", "PUSH", ...). It has the same values as
// zmq4.SocketType: code that has one converts it with SocketType(t).
type SocketType string

// The socket types of ZMTP 3 (RFC 23 and 37).
const (
	Pair   SocketType = "PAIR"
	Pub    SocketType = "PUB"
	Sub    SocketType = "SUB"
	Req    SocketType = "REQ"
	Rep    SocketType = "REP"
	Dealer SocketType = "DEALER"
	Router SocketType = "ROUTER"
	Pull   SocketType = "PULL"
	Push   SocketType = "PUSH"
	XPub   SocketType = "XPUB"
	XSub   SocketType = "XSUB"
)

// Valid returns nil when t is one of the socket types above, else a
// one-line error naming t. (Names are upper case, as on the wire.)
func (t SocketType) Valid() error {
	if zmtpwire.KnownSocketType(t) {
		return nil
	}
	return &socketTypeError{t}
}

// CompatibleWith reports whether a socket of type t may talk to a peer of
// type peer, per ZMTP's compatibility table (RFC 23/37): PULL with PUSH,
// XPUB with SUB or XSUB, ROUTER with DEALER, REQ or ROUTER, and so on. An
// unknown type is compatible with nothing.
func (t SocketType) CompatibleWith(peer SocketType) bool { return zmtpwire.Compatible(t, peer) }

type socketTypeError struct{ t SocketType }

func (e *socketTypeError) Error() string {
	return "zmtpguard: unknown socket type " + strconv.Quote(string(e.t)) +
		" (want PAIR, PUB, SUB, REQ, REP, DEALER, ROUTER, PULL, PUSH, XPUB or XSUB)"
}
