package socket

import (
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// EventKind says what happened to a peer.
type EventKind uint8

// The peer events.
const (
	// EventConnected: a connection completed its handshake and joined the socket.
	EventConnected EventKind = iota + 1
	// EventHandshakeFailed: a connection was refused during the handshake
	// (bad greeting, bad READY, incompatible type, deadline). Err says why.
	EventHandshakeFailed
	// EventRejected: a connection that completed its handshake, or was about
	// to start one, was refused by local policy (duplicate ROUTER identity,
	// connection caps, source allowlist). Err says why.
	EventRejected
	// EventDisconnected: an established peer left; Err is the cause (a
	// *zmtpguard.Violation when the peer broke the rules, io.EOF when it
	// closed, ErrClosed when the socket closed).
	EventDisconnected
	// EventDialFailed: a dial attempt failed before any handshake (for
	// example connection refused); the dialer retries after a back-off.
	EventDialFailed
)

// A heartbeat timeout is reported as EventDisconnected whose Err matches
// ErrHeartbeatTimeout; a ROUTER handover as EventDisconnected of the old
// connection whose Err says the identity was taken over.

var eventNames = [...]string{"", "connected", "handshake-failed", "rejected", "disconnected", "dial-failed"}

// String returns the kind's lower-case name.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one peer event, given to Options.OnEvent.
type Event struct {
	Kind EventKind
	// Peer is the peer concerned; nil for events about a connection that
	// never completed its handshake (then Remote names it).
	Peer *Peer
	// Remote is the remote address as text ("" if unknown).
	Remote string
	// Endpoint is the socket's bound or dialed endpoint the connection
	// belongs to.
	Endpoint string
	// Err is the cause, for every kind but EventConnected.
	Err error
	// Reason classifies Err (decodeguard.ReasonNone when Err is not bad
	// input, for example an ordinary disconnect).
	Reason decodeguard.Reason
}
