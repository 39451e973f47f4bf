// Package zmtpwire holds ZMTP 3's wire format as pure functions: frame flag
// bits, command names, the greeting, the socket type table of RFC 23/37, and
// the parsers that check a peer's greeting, frame headers, commands and READY
// properties before anything is allocated (parse.go). zmtpguard reads every
// connection through these parsers; zmqguard's socket tests, the hostile
// corpus and the benchmarks use the same ones to build and read raw bytes.
// It imports nothing of zmqguard but decodeguard, and nothing here keeps
// state.
package zmtpwire

import (
	"github.com/go-zeromq/zmq4"
)

// ZMTP frame flag bits (RFC 23 §2.3 and RFC 37).
const (
	FlagMore    = 0x01
	FlagLong    = 0x02
	FlagCommand = 0x04
)

// Command names zmtpguard recognises after the handshake, and READY.
const (
	CmdPing      = "PING"
	CmdPong      = "PONG"
	CmdSubscribe = "SUBSCRIBE"
	CmdCancel    = "CANCEL"
	CmdError     = "ERROR"
	CmdReady     = "READY"
)

// GreetingSize is the length of a ZMTP 3.x greeting.
const GreetingSize = 64

// LocalGreeting returns the 64-byte greeting zmtpguard sends: ZMTP 3.1,
// the NULL mechanism, as-server 0. zmqguard speaks what 3.1 adds to 3.0 (it
// answers PING with PONG, takes SUBSCRIBE and CANCEL commands), and the
// minor version is how a peer learns it may PING us: a zmqguard socket
// PINGs only peers whose greeting says 3.1 or later (RFC 37).
func LocalGreeting() (g [GreetingSize]byte) {
	g = ZMQ4Greeting()
	g[11] = 1
	return g
}

// ZMQ4Greeting returns the greeting go-zeromq/zmq4 v0.17's zmq4.Open writes
// for the NULL mechanism: ZMTP 3.0, as-server 0. zmtpguard recognises it
// when it swallows zmq4's greeting (it has sent its own in its place).
func ZMQ4Greeting() (g [GreetingSize]byte) {
	g[0] = 0xFF
	g[9] = 0x7F
	g[10] = 3
	g[11] = 0
	copy(g[12:32], "NULL")
	return g
}

// Heartbeats reports whether a peer whose greeting announced ZMTP
// major.minor understands PING (RFC 37: ZMTP 3.1 and later). A 3.0 peer,
// go-zeromq/zmq4 v0.17 for one, would surface a PING as a data message.
func Heartbeats(major, minor byte) bool { return major > 3 || (major == 3 && minor >= 1) }

// PongContext returns what the PONG answering a PING carries (RFC 37):
// the PING's context, which follows its 2-byte TTL, at most 16 bytes. ping
// is the PING command's data (the command name removed); the result aliases
// it.
func PongContext(ping []byte) []byte {
	if len(ping) <= 2 {
		return nil
	}
	return ping[2:min(len(ping), 18)]
}

// HeaderLen returns how many header bytes a frame whose first byte is flags
// has: 2 or 9.
func HeaderLen(flags byte) int {
	if flags&FlagLong != 0 {
		return 9
	}
	return 2
}

// knownTypes are the socket types ZMTP defines, as sent in Socket-Type.
var knownTypes = [...]string{
	string(zmq4.Pair), string(zmq4.Pub), string(zmq4.Sub), string(zmq4.Req), string(zmq4.Rep),
	string(zmq4.Dealer), string(zmq4.Router), string(zmq4.Pull), string(zmq4.Push),
	string(zmq4.XPub), string(zmq4.XSub),
}

// KnownSocketType reports whether t is one of ZMTP's socket types. T is
// zmtpguard.SocketType or zmq4.SocketType.
func KnownSocketType[T ~string](t T) bool {
	for _, k := range knownTypes {
		if k == string(t) {
			return true
		}
	}
	return false
}

// Compatible reports whether a local socket of type local may talk to a
// peer of type peer, per ZMTP's compatibility table (RFC 23/37). Unknown
// types are never compatible (zmq4's own check panics on them).
func Compatible[T ~string](local, peer T) bool {
	if !KnownSocketType(local) || !KnownSocketType(peer) {
		return false
	}
	return zmq4.SocketType(local).IsCompatible(zmq4.SocketType(peer))
}
