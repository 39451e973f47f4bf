package socket

import (
	"net"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Msg is one message received by a Socket.
//
// Aliasing: Frames (and the byte slices in it) belong to the socket and are
// valid only until the next Recv on the same socket; copy what must outlive
// that. For a ROUTER socket Frames[0] is the sending peer's routing identity.
// For an XPUB socket a subscription arrives as one frame "\x01topic" and an
// unsubscription as "\x00topic" (ZMTP 3.1 SUBSCRIBE/CANCEL commands are
// turned into this form).
type Msg struct {
	Frames [][]byte
	// Peer is the connection the message came from.
	Peer *Peer
}

// Peer describes one connected peer of a Socket. A *Peer stays valid (its
// accessors keep working) after the peer has disconnected.
type Peer struct {
	id       uint64
	addr     net.Addr
	addrText string
	typ      zmtpguard.SocketType
	identity []byte
	endpoint string
	// version is the ZMTP version (major, minor) of the peer's greeting.
	version [2]byte
}

// ID returns a number unique to this connection within its socket.
func (p *Peer) ID() uint64 {
	if p == nil {
		return 0
	}
	return p.id
}

// netAddr returns the peer's network address (nil if unknown).
func (p *Peer) netAddr() net.Addr {
	if p == nil {
		return nil
	}
	return p.addr
}

// peerType returns the peer's ZMTP socket type.
func (p *Peer) peerType() zmtpguard.SocketType {
	if p == nil {
		return ""
	}
	return p.typ
}

// Identity returns the peer's routing identity: the Identity it announced,
// or the one a ROUTER assigned. Do not modify the returned slice.
func (p *Peer) Identity() []byte {
	if p == nil {
		return nil
	}
	return p.identity
}

// endpointName returns the socket endpoint the connection came through: the
// bound endpoint for an accepted peer, the dialed one for a dialed peer
// (Event.Endpoint gives it to users).
func (p *Peer) endpointName() string {
	if p == nil {
		return ""
	}
	return p.endpoint
}

// zmtpVersion returns the ZMTP version the peer's greeting announced: 3.0
// for go-zeromq/zmq4 v0.17, 3.1 for libzmq (4.3.4 checked) and zmqguard.
// A 3.0 peer does not know PING (it would take one for a data message), so
// the socket never sends it one and never times it out by heartbeat: see
// Liveness in the package doc, and Stats.ZMTP30Peers.
func (p *Peer) zmtpVersion() (major, minor int) {
	if p == nil {
		return 0, 0
	}
	return int(p.version[0]), int(p.version[1])
}

// String returns the peer's network address as text ("" if unknown), for
// logs and per-host accounting (net.SplitHostPort takes it apart).
func (p *Peer) String() string {
	if p == nil {
		return ""
	}
	return p.addrText
}
