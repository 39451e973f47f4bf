package zmtpguard

import (
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// Command names zmtpguard recognises after the handshake.
const (
	cmdPing      = zmtpwire.CmdPing
	cmdPong      = zmtpwire.CmdPong
	cmdSubscribe = zmtpwire.CmdSubscribe
	cmdCancel    = zmtpwire.CmdCancel
	cmdError     = zmtpwire.CmdError
	cmdReady     = zmtpwire.CmdReady
)

// parseCommand is zmtpwire.ParseCommand with its fault as a *Violation.
func parseCommand(body []byte) (name, data []byte, err error) {
	name, data, err = zmtpwire.ParseCommand(body)
	return name, data, fromWire(err)
}

// Metadata is a peer's validated READY properties.
type Metadata struct {
	// SocketType is the peer's Socket-Type, known and compatible.
	SocketType SocketType
	// Identity is the peer's Identity property (0..255 bytes), "" if absent.
	Identity string
	// Properties holds every property by its name as sent (Socket-Type and
	// Identity included).
	Properties map[string]string
	// CurveKey is the peer's long-term CURVE public key, proven by the
	// handshake (the client's key on a CURVE server, the server's on a
	// client); zero under NULL.
	CurveKey CurveKey
	// UserID is the user id a CURVE server's Authorize function assigned to the
	// client, "" if none.
	UserID string
	// Major and Minor are the ZMTP version the peer's greeting announced:
	// 3.0 for go-zeromq/zmq4 v0.17, 3.1 for libzmq (4.3.4 checked) and for
	// zmqguard. Only a peer at 3.1 or later understands PING (RFC 37); a
	// 3.0 peer would take one for a data message, so a zmqguard socket
	// sends PINGs, and applies its heartbeat timeout, only to peers at 3.1
	// or later.
	Major, Minor int
}

// parseReady validates the body of a peer's READY command (the property list
// after the name) for a local socket of type local, under cfg's limits
// (zero fields mean defaults). Every length is checked against the bytes
// present and a cap; Socket-Type must be present, known and compatible;
// Identity is at most 255 bytes; property names are 1..255 ZMTP name
// characters and unique regardless of case. Socket-Type and Identity must be
// spelled so that zmq4 (which title-cases names without lowering them) reads
// them under their canonical keys: "socket-type" and "Socket-Type" pass,
// "SOCKET-TYPE" is refused. A local of "" skips the compatibility check (the
// type must still be known).
func parseReady(props []byte, local SocketType, cfg *Config) (Metadata, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	r, err := zmtpwire.ParseReady(props, string(local), c.MaxProperties, c.MaxPropertySize)
	if err != nil {
		return Metadata{}, fromWire(err)
	}
	return Metadata{SocketType: SocketType(r.SocketType), Identity: r.Identity, Properties: r.Properties}, nil
}
