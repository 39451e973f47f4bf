package zmtpguard

import (
	"encoding/binary"
	"strings"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
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

// parseCommand splits a command frame body into its name and data. The name
// is 1..255 bytes of printable ASCII.
func parseCommand(body []byte) (name, data []byte, err error) {
	if len(body) < 1 {
		return nil, nil, violation(decodeguard.ReasonTransport, "empty command frame", 0, nil)
	}
	n := int(body[0])
	if n == 0 {
		return nil, nil, violation(decodeguard.ReasonTransport, "command name is empty", int64(len(body)), body)
	}
	if 1+n > len(body) {
		return nil, nil, violation(decodeguard.ReasonTransport,
			"command name length "+itoa(n)+" exceeds the frame", int64(len(body)), body)
	}
	name = body[1 : 1+n]
	for _, c := range name {
		if c < 0x21 || c > 0x7e {
			return nil, nil, violation(decodeguard.ReasonTransport, "command name is not printable ASCII", int64(len(body)), body)
		}
	}
	return name, body[1+n:], nil
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
	// UserID is the user id a CURVE server's Authorizer assigned to the
	// client, "" if none.
	UserID string
}

func validNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '+'
}

// zmq4Key reports whether zmq4, which files a READY property under its name
// title-cased word by word (first letter of each '-'-separated word upper-cased,
// the rest left alone), files name under canon. A peer sending
// "SOCKET-TYPE" would otherwise pass a case-insensitive check while zmq4 sees
// no Socket-Type at all and panics on the empty type.
func zmq4Key(name []byte, canon string) bool {
	if len(name) != len(canon) {
		return false
	}
	for i, c := range name {
		if (i == 0 || name[i-1] == '-') && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != canon[i] {
			return false
		}
	}
	return true
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
	md := Metadata{Properties: make(map[string]string, 2)}
	total := int64(len(props))
	bad := func(detail string) (Metadata, error) {
		return Metadata{}, violation(decodeguard.ReasonHandshake, detail, total, props)
	}
	haveType := false
	i := 0
	for i < len(props) {
		if len(md.Properties) >= c.MaxProperties {
			return bad("more than " + itoa(c.MaxProperties) + " READY properties")
		}
		nlen := int(props[i])
		i++
		if nlen == 0 {
			return bad("READY property name is empty")
		}
		if nlen > len(props)-i {
			return bad("READY property name length " + itoa(nlen) + " exceeds the command")
		}
		name := props[i : i+nlen]
		for _, ch := range name {
			if !validNameChar(ch) {
				return bad("READY property name has a character outside ZMTP's name set")
			}
		}
		i += nlen
		if len(props)-i < 4 {
			return bad("READY property value length is truncated")
		}
		vlen := binary.BigEndian.Uint32(props[i : i+4])
		i += 4
		if uint64(vlen) > uint64(len(props)-i) {
			return bad("READY property value length " + itoa(int(vlen)) + " exceeds the command")
		}
		if int64(vlen) > int64(c.MaxPropertySize) {
			return bad("READY property value of " + itoa(int(vlen)) + " bytes is over the limit")
		}
		value := props[i : i+int(vlen)]
		i += int(vlen)
		key := string(name)
		for k := range md.Properties {
			if strings.EqualFold(k, key) {
				return bad("duplicate READY property " + strings.ToLower(key))
			}
		}
		md.Properties[key] = string(value)
		switch {
		case strings.EqualFold(key, "Socket-Type"):
			if !zmq4Key(name, "Socket-Type") {
				return bad("Socket-Type property name is in a letter case zmq4 cannot read")
			}
			haveType = true
			md.SocketType = SocketType(value)
		case strings.EqualFold(key, "Identity"):
			if !zmq4Key(name, "Identity") {
				return bad("Identity property name is in a letter case zmq4 cannot read")
			}
			if len(value) > MaxIdentity {
				return Metadata{}, violation(decodeguard.ReasonOversize,
					"peer identity of "+itoa(len(value))+" bytes is over 255", int64(len(value)), nil)
			}
			md.Identity = string(value)
		}
	}
	if !haveType {
		return bad("READY has no Socket-Type")
	}
	if !knownSocketType(md.SocketType) {
		return bad("READY Socket-Type is unknown")
	}
	if local != "" && !compatible(local, md.SocketType) {
		return bad("peer socket type " + string(md.SocketType) + " is not compatible with " + string(local))
	}
	return md, nil
}
