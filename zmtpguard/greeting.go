package zmtpguard

import (
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// greetingSize is the length of a ZMTP 3.x greeting.
const greetingSize = zmtpwire.GreetingSize

// localGreeting is the greeting zmtpguard sends: ZMTP 3.1, NULL mechanism,
// as-server 0. It announces 3.1 because zmtpguard answers PING and takes
// SUBSCRIBE/CANCEL commands, and because a zmqguard socket PINGs only peers
// that announce 3.1 (two zmqguard peers heartbeat each other).
var localGreeting = zmtpwire.LocalGreeting()

// zmq4Greeting is what zmq4.Open writes for NULL security (ZMTP 3.0, as
// localGreeting otherwise): Handshake writes localGreeting first and
// swallows zmq4's greeting in its place; only its version byte differs, and
// zmq4 accepts a peer at a higher minor version.
var zmq4Greeting = zmtpwire.ZMQ4Greeting()

// checkGreeting validates a prefix of a peer's greeting with
// zmtpwire.CheckGreeting (NULL, or CURVE when cc is set); a fault is a
// *Violation.
func checkGreeting(b []byte, cc *CurveConfig) error {
	return fromWire(zmtpwire.CheckGreeting(b, cc != nil))
}

// fromWire turns a wire parser's *zmtpwire.Error into a *Violation (other
// errors, and nil, pass unchanged).
func fromWire(err error) error {
	// A type assertion, not errors.As: the parsers return *zmtpwire.Error
	// itself, and errors.As's target would escape to the heap on every
	// call, the successful ones included.
	if e, ok := err.(*zmtpwire.Error); ok {
		return &Violation{Reason: e.Reason, Detail: e.Detail, Length: e.Length, Prefix: e.Prefix}
	}
	return err
}

// compatible reports whether a local socket of type local may talk to a
// peer of type peer, per ZMTP's compatibility table (RFC 23/37). Unknown
// types are never compatible (zmq4's own check panics on them).
func compatible(local, peer SocketType) bool { return zmtpwire.Compatible(local, peer) }

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	neg := i < 0
	if neg {
		i = -i
	}
	for i > 0 {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
	}
	if neg {
		n--
		buf[n] = '-'
	}
	return string(buf[n:])
}
