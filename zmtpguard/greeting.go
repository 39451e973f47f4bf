package zmtpguard

import (
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
)

// greetingSize is the length of a ZMTP 3.x greeting.
const greetingSize = zmtpwire.GreetingSize

// mechanismNULL is the only mechanism zmtpguard accepts.
const mechanismNULL = "NULL"

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

// checkGreeting validates a prefix of a peer's greeting, as much of it as
// is present. It returns nil while b is a valid prefix (more bytes may still
// be needed: len(b) < greetingSize), and a *Violation as soon as any present
// byte is wrong, so a peer speaking HTTP or ZMTP 1.0 is refused after its
// first byte. Bytes past greetingSize are ignored. The mechanism must be
// NULL (cc nil) or CURVE (a CURVE connection's peer must offer CURVE). The
// as-server byte is not compared with the expected role: libzmq 4.3.4 sends
// 0 there from a CURVE server too (seen in the interop tests); a peer in
// the wrong role fails at the first handshake command instead.
func checkGreeting(b []byte, cc *CurveConfig) error {
	if len(b) > greetingSize {
		b = b[:greetingSize]
	}
	n := len(b)
	if n >= 1 && b[0] != 0xFF {
		return violation(decodeguard.ReasonTransport,
			"not a ZMTP 3.x greeting (first byte is not 0xFF: ZMTP 1.0 or another protocol)", int64(n), b)
	}
	if n >= 10 && b[9] != 0x7F {
		// ZMTP 3 fixes the byte at 0x7F and zmq4 refuses any other value; a
		// looser check here would pass greetings zmq4 then drops mid-handshake.
		return violation(decodeguard.ReasonTransport, "bad ZMTP signature (byte 9 is not 0x7F)", int64(n), b)
	}
	if n >= 11 && b[10] < 3 {
		return violation(decodeguard.ReasonHandshake,
			"unsupported ZMTP version "+itoa(int(b[10]))+" (3.0 or 3.1 required)", int64(n), b)
	}
	if n >= 32 {
		mech := b[12:32]
		end := 0
		for end < len(mech) && mech[end] != 0 {
			end++
		}
		for _, c := range mech[end:] {
			if c != 0 {
				return violation(decodeguard.ReasonHandshake, "mechanism field is not NUL-padded", int64(n), b)
			}
		}
		if cc != nil {
			if string(mech[:end]) != mechanismCURVE {
				return violation(decodeguard.ReasonAuth,
					"peer does not offer CURVE on a CURVE socket (unauthenticated peers are refused)", int64(n), b)
			}
		} else if string(mech[:end]) != mechanismNULL {
			return violation(decodeguard.ReasonHandshake,
				"mechanism not allowed (only NULL is accepted)", int64(n), b)
		}
	}
	if n >= 33 && b[32] > 1 {
		return violation(decodeguard.ReasonHandshake, "as-server flag is neither 0 nor 1", int64(n), b)
	}
	return nil
}

// knownSocketType reports whether t is one of ZMTP's socket types.
func knownSocketType(t SocketType) bool { return t.Valid() == nil }

// compatible reports whether a local socket of type local may talk to a
// peer of type peer, per ZMTP's compatibility table (RFC 23/37). Unknown
// types are never compatible (zmq4's own check panics on them).
func compatible(local, peer SocketType) bool { return local.CompatibleWith(peer) }

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
