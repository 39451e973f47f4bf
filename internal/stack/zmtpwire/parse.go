package zmtpwire

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Limits a READY is read under when the caller has no others (zmtpguard's
// Config defaults are these values).
const (
	// DefaultMaxHandshakeSize bounds the body of a READY command.
	DefaultMaxHandshakeSize = 16 << 10
	// DefaultMaxPropertySize bounds one READY property value.
	DefaultMaxPropertySize = 1024
	// DefaultMaxProperties bounds the number of READY properties.
	DefaultMaxProperties = 32
	// MaxIdentity is ZMTP's limit on a peer identity, in bytes.
	MaxIdentity = 255
)

// maxPrefix is the number of offending bytes an Error keeps for logs.
const maxPrefix = 64

// Error is a peer's wire fault found by one of the parsers. zmtpguard turns
// it into a zmtpguard.Violation (adding the peer's address); other callers
// read its Reason with decodeguard.ReasonOf.
type Error struct {
	// Reason classifies the fault.
	Reason decodeguard.Reason
	// Detail says what was wrong, in words; it never holds peer bytes.
	Detail string
	// Length is the length involved (a claimed size, the bytes seen), -1
	// when not applicable.
	Length int64
	// Prefix is a copy of at most 64 offending bytes, for hex logging.
	Prefix []byte
}

// Error implements error. Offending bytes appear only as hex.
func (e *Error) Error() string {
	s := "zmtp: " + e.Reason.String() + ": " + e.Detail
	if e.Length >= 0 {
		s += " len=" + strconv.FormatInt(e.Length, 10)
	}
	if len(e.Prefix) > 0 {
		s += " hex=" + hex.EncodeToString(e.Prefix)
	}
	return s
}

// Unwrap exposes the classification so decodeguard.IsBadInput(err) is true.
func (e *Error) Unwrap() error { return &decodeguard.Error{Reason: e.Reason, Offset: -1} }

func fault(r decodeguard.Reason, detail string, length int64, prefix []byte) *Error {
	e := &Error{Reason: r, Detail: detail, Length: length}
	if len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	if len(prefix) > 0 {
		e.Prefix = append([]byte(nil), prefix...)
	}
	return e
}

func itoa(i int) string { return strconv.Itoa(i) }

// CheckGreeting validates a prefix of a peer's greeting, as much of it as
// is present. It returns nil while b is a valid prefix (more bytes may
// still be needed: len(b) < GreetingSize), and an *Error as soon as any
// present byte is wrong, so a peer speaking HTTP or ZMTP 1.0 is refused
// after its first byte. Bytes past GreetingSize are ignored. The mechanism
// must be NULL, or CURVE when curve is set. The as-server byte is not
// compared with the expected role: libzmq 4.3.4 sends 0 there from a CURVE
// server too; a peer in the wrong role fails at its first handshake
// command instead.
func CheckGreeting(b []byte, curve bool) error {
	if len(b) > GreetingSize {
		b = b[:GreetingSize]
	}
	n := len(b)
	if n >= 1 && b[0] != 0xFF {
		return fault(decodeguard.ReasonTransport,
			"not a ZMTP 3.x greeting (first byte is not 0xFF: ZMTP 1.0 or another protocol)", int64(n), b)
	}
	if n >= 10 && b[9] != 0x7F {
		// ZMTP 3 fixes the byte at 0x7F and zmq4 refuses any other value; a
		// looser check here would pass greetings zmq4 then drops mid-handshake.
		return fault(decodeguard.ReasonTransport, "bad ZMTP signature (byte 9 is not 0x7F)", int64(n), b)
	}
	if n >= 11 && b[10] < 3 {
		return fault(decodeguard.ReasonHandshake,
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
				return fault(decodeguard.ReasonHandshake, "mechanism field is not NUL-padded", int64(n), b)
			}
		}
		if curve {
			if string(mech[:end]) != MechanismCURVE {
				return fault(decodeguard.ReasonAuth,
					"peer does not offer CURVE on a CURVE socket (unauthenticated peers are refused)", int64(n), b)
			}
		} else if string(mech[:end]) != MechanismNULL {
			return fault(decodeguard.ReasonHandshake,
				"mechanism not allowed (only NULL is accepted)", int64(n), b)
		}
	}
	if n >= 33 && b[32] > 1 {
		return fault(decodeguard.ReasonHandshake, "as-server flag is neither 0 nor 1", int64(n), b)
	}
	return nil
}

// Security mechanism names as a greeting carries them.
const (
	MechanismNULL  = "NULL"
	MechanismCURVE = "CURVE"
)

// flagReserve are the flag bits ZMTP 3 leaves reserved.
const flagReserve = 0xF8

// FrameHeader is a parsed ZMTP frame header.
type FrameHeader struct {
	// Flags is the header's first byte.
	Flags byte
	// Size is the body length the header claims. It has been checked
	// against the caller's limit, not against the bytes present.
	Size int64
	// Len is the header's own length in bytes: 2 (short) or 9 (long).
	Len int
}

// More reports whether another frame of the same message follows.
func (h FrameHeader) More() bool { return h.Flags&FlagMore != 0 }

// Command reports whether the frame is a command.
func (h FrameHeader) Command() bool { return h.Flags&FlagCommand != 0 }

// PeekFrameHeader decodes the frame header at the start of b without
// checking it: its flags byte, the body size it claims and the header's own
// length (2 or 9, from the LONG flag). ok is false when b does not hold the
// whole header. It is the one place zmqguard decodes a header: the readers
// check what it returns (ParseFrameHeader, against a limit), and the
// walkers over buffered bytes (zmtpguard's fast paths, its CURVE and zmq4
// bridges) compare size with the bytes present before using it. It reads
// at most 9 bytes of b and allocates nothing.
func PeekFrameHeader(b []byte) (flags byte, size uint64, hdrLen int, ok bool) {
	if len(b) < 1 {
		return 0, 0, 0, false
	}
	flags = b[0]
	hdrLen = HeaderLen(flags)
	if len(b) < hdrLen {
		return flags, 0, hdrLen, false
	}
	if hdrLen == 2 {
		return flags, uint64(b[1]), 2, true
	}
	return flags, binary.BigEndian.Uint64(b[1:9]), 9, true
}

// ParseFrameHeader parses the frame header at the start of b and checks the
// claimed size against max (a limit on this frame's body). It returns
// ok=false with a nil error when b does not yet hold the whole header.
// Reserved flag bits, a command with MORE set, and a size over max (or over
// 2^63-1) are faults; nothing is allocated.
func ParseFrameHeader(b []byte, max int64) (h FrameHeader, ok bool, err error) {
	if len(b) < 1 {
		return h, false, nil
	}
	f := b[0]
	if f&flagReserve != 0 {
		return h, false, fault(decodeguard.ReasonTransport, "frame flags have reserved bits set", -1, b[:min(len(b), 9)])
	}
	if f&FlagCommand != 0 && f&FlagMore != 0 {
		return h, false, fault(decodeguard.ReasonTransport, "command frame has MORE set", -1, b[:min(len(b), 9)])
	}
	_, size, hl, whole := PeekFrameHeader(b)
	if !whole {
		return h, false, nil
	}
	if size > 1<<63-1 || int64(size) > max {
		return h, false, &Error{
			Reason: decodeguard.ReasonOversize,
			Detail: "frame claims " + strconv.FormatUint(size, 10) + " bytes, over the limit of " + strconv.FormatInt(max, 10),
			Length: int64(size & (1<<63 - 1)),
			Prefix: append([]byte(nil), b[:hl]...),
		}
	}
	return FrameHeader{Flags: f, Size: int64(size), Len: hl}, true, nil
}

// ParseCommand splits a command frame body into its name and data. The
// name is 1..255 bytes of printable ASCII.
func ParseCommand(body []byte) (name, data []byte, err error) {
	if len(body) < 1 {
		return nil, nil, fault(decodeguard.ReasonTransport, "empty command frame", 0, nil)
	}
	n := int(body[0])
	if n == 0 {
		return nil, nil, fault(decodeguard.ReasonTransport, "command name is empty", int64(len(body)), body)
	}
	if 1+n > len(body) {
		return nil, nil, fault(decodeguard.ReasonTransport,
			"command name length "+itoa(n)+" exceeds the frame", int64(len(body)), body)
	}
	name = body[1 : 1+n]
	for _, c := range name {
		if c < 0x21 || c > 0x7e {
			return nil, nil, fault(decodeguard.ReasonTransport, "command name is not printable ASCII", int64(len(body)), body)
		}
	}
	return name, body[1+n:], nil
}

// Ready is a READY command's validated property list.
type Ready struct {
	// SocketType is the peer's Socket-Type, known (and compatible when a
	// local type was given).
	SocketType string
	// Identity is the Identity property (0..255 bytes), "" if absent.
	Identity string
	// Properties holds every property by its name as sent.
	Properties map[string]string
}

// NameChar reports whether c may appear in a ZMTP property (or metadata) name.
func NameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '+'
}

// zmq4Key reports whether zmq4, which files a READY property under its name
// title-cased word by word (first letter of each '-'-separated word
// upper-cased, the rest left alone), files name under canon. A peer sending
// "SOCKET-TYPE" would otherwise pass a case-insensitive check while zmq4
// sees no Socket-Type at all and panics on the empty type.
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

// ParseReady validates the body of a peer's READY command (the property
// list after the name) for a local socket of type local, with at most
// maxProps properties of at most maxValue bytes each. Every length is
// checked against the bytes present and a cap; Socket-Type must be present,
// known and compatible; Identity is at most MaxIdentity bytes; property
// names are 1..255 ZMTP name characters and unique regardless of case.
// Socket-Type and Identity must be spelled so that zmq4 (which title-cases
// names without lowering them) reads them under their canonical keys:
// "socket-type" and "Socket-Type" pass, "SOCKET-TYPE" is refused. A local
// of "" skips the compatibility check (the type must still be known).
func ParseReady(props []byte, local string, maxProps, maxValue int) (Ready, error) {
	r := Ready{Properties: make(map[string]string, 2)}
	total := int64(len(props))
	bad := func(detail string) (Ready, error) {
		return Ready{}, fault(decodeguard.ReasonHandshake, detail, total, props)
	}
	haveType := false
	i := 0
	for i < len(props) {
		if len(r.Properties) >= maxProps {
			return bad("more than " + itoa(maxProps) + " READY properties")
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
			if !NameChar(ch) {
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
			return bad("READY property value length " + strconv.FormatUint(uint64(vlen), 10) + " exceeds the command")
		}
		if int64(vlen) > int64(maxValue) {
			return bad("READY property value of " + strconv.FormatUint(uint64(vlen), 10) + " bytes is over the limit")
		}
		value := props[i : i+int(vlen)]
		i += int(vlen)
		key := string(name)
		for k := range r.Properties {
			if strings.EqualFold(k, key) {
				return bad("duplicate READY property " + strings.ToLower(key))
			}
		}
		r.Properties[key] = string(value)
		switch {
		case strings.EqualFold(key, "Socket-Type"):
			if !zmq4Key(name, "Socket-Type") {
				return bad("Socket-Type property name is in a letter case zmq4 cannot read")
			}
			haveType = true
			r.SocketType = string(value)
		case strings.EqualFold(key, "Identity"):
			if !zmq4Key(name, "Identity") {
				return bad("Identity property name is in a letter case zmq4 cannot read")
			}
			if len(value) > MaxIdentity {
				return Ready{}, fault(decodeguard.ReasonOversize,
					"peer identity of "+itoa(len(value))+" bytes is over 255", int64(len(value)), nil)
			}
			r.Identity = string(value)
		}
	}
	if !haveType {
		return bad("READY has no Socket-Type")
	}
	if !KnownSocketType(r.SocketType) {
		return bad("READY Socket-Type is unknown")
	}
	if local != "" && !Compatible(local, r.SocketType) {
		return bad("peer socket type " + r.SocketType + " is not compatible with " + local)
	}
	return r, nil
}
