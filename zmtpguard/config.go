package zmtpguard

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Defaults for Config: a zero field means its default, stated in the
// field's doc.
const (
	defaultMaxMessageSize   = 1 << 20 // bytes, all frames of one message together
	defaultMaxFrames        = 64
	defaultHandshakeTimeout = 5 * time.Second
	defaultGreetingTimeout  = 2 * time.Second
	defaultMaxHandshakeSize = 16 << 10 // bytes of one handshake command (READY)
	defaultMaxPropertySize  = 1024     // bytes of one READY property value
	defaultMaxProperties    = 32
	// defaultMaxPendingHandshakes is the default size of a listener's pool
	// of handshakes in progress. A connection that arrives when it is full
	// is admitted and evicts a pending one, from the source host with the
	// most pending (see Config.MaxPendingHandshakes): a flood of idle
	// connections from one host only ever evicts its own.
	defaultMaxPendingHandshakes = 128
	defaultMaxConns             = 4096
	defaultIPv6HostPrefix       = 64
	defaultReadBufferSize       = 16 << 10
	defaultWriteBufferSize      = 16 << 10
	// maxIdentity is ZMTP's limit on a peer identity.
	maxIdentity = 255
)

// Config holds the limits a guarded connection or listener enforces. The zero
// value is valid and means every default. Config values are read, never
// modified, by this package; do not change one while it is in use.
type Config struct {
	// MaxMessageSize bounds the total body bytes of one message (all of its
	// frames together). Zero means 1 MiB.
	MaxMessageSize int64
	// MaxFrames bounds the number of frames in one message. Zero means 64.
	MaxFrames int
	// HandshakeTimeout bounds the whole handshake (greeting and READY).
	// Zero means 5 s.
	HandshakeTimeout time.Duration
	// GreetingTimeout bounds the arrival of the peer's complete 64-byte
	// greeting, counted from the start of the handshake; the rest of the
	// handshake stays under HandshakeTimeout. A peer that connects and
	// sends nothing (or dribbles its greeting) thus holds a pending
	// handshake for GreetingTimeout, not HandshakeTimeout. A greeting too
	// late is a handshake violation. "Arrived" is judged by the socket, not
	// by this process's scheduling: when the deadline has passed, one more
	// short read takes what the kernel already holds, so a process that did
	// not run for a while (a loaded machine, a long pause) does not fail a
	// peer whose greeting came in time. Zero means 2 s. A value larger than
	// HandshakeTimeout is lowered to it (the greeting is part of the
	// handshake), so GreetingTimeout = HandshakeTimeout turns the separate
	// greeting deadline off.
	//
	// It applies where connections are accepted: Listener, the Transport's
	// listeners, and Handshake. Dial and the Transport's dialing side do
	// not apply it: there the wait for the server's greeting includes the
	// server's accept latency, which a loaded server stretches past a
	// second, and no pending pool needs protecting; HandshakeTimeout bounds
	// a server that never speaks.
	GreetingTimeout time.Duration
	// MaxHandshakeSize bounds the body of the peer's READY command (under
	// CURVE, the metadata in its INITIATE or READY). Zero means 16 KiB.
	MaxHandshakeSize int
	// MaxPropertySize bounds one READY property value. Zero means 1 KiB.
	// Identity is always limited to 255 bytes.
	MaxPropertySize int
	// MaxProperties bounds the number of READY properties. Zero means 32.
	MaxProperties int
	// MaxPendingHandshakes bounds a Listener's (or a Transport listener's)
	// concurrent unfinished handshakes. A new connection that would exceed
	// it is still admitted, and a pending handshake is aborted instead (its
	// connection closed, one policy violation "evicted: ...", counted in
	// Stats.Evicted): the oldest pending handshake of the source host that
	// has the most pending handshakes, the new connection included; on a
	// tie, the host whose oldest pending handshake is the oldest overall
	// loses that one. A source host is an IPv4 address, an IPv6 prefix of
	// IPv6HostPrefix bits (/64 by default), or "unix" for every
	// unix-socket peer. So idle connections
	// from one host only ever evict that host's own, and a real peer's
	// handshake (about a millisecond) is evicted only if its host holds the
	// most pending handshakes and MaxPendingHandshakes newer ones arrive
	// from it before it completes. Zero means 128.
	MaxPendingHandshakes int
	// MaxConns bounds a Listener's open connections (pending and
	// established). While fewer are open, a connection is admitted (subject
	// to MaxConnsPerHost). When MaxConns are open, a new connection is
	// admitted only by closing another one (a policy violation
	// "evicted: ...", counted in Stats.ConnsEvicted and, by reason, in
	// EvictedIdle, EvictedOverShare and EvictedForReserve), chosen by this
	// rule, and otherwise refused (closed at once, a policy violation):
	//
	//  1. Work keeps its place. A connection is working when a message
	//     passed on it (read from the peer, or written and flushed to it)
	//     within the last minute; every other connection, pending
	//     handshakes included, is idle. A new connection has done no work,
	//     so it never closes a working connection of a host within its
	//     fair share.
	//  2. Idle connections go first, whatever host they come from: the
	//     idle connection longest unseen working (a clock order over the
	//     whole listener) is closed, provided its source host holds more
	//     connections than the new connection's host holds idle ones. So
	//     a host opening idle connections without end never closes a
	//     smaller host's (once the listener is full it is refused), while a
	//     host whose connections work gets in past any number of idle ones
	//     from any number of addresses.
	//  3. Fair share, when no idle connection may go: a host's share is
	//     MaxConns divided by the hosts holding connections (the new one's
	//     included); if the host holding the most holds more than its
	//     share and more than the new connection's host will, its least
	//     recently working connection is closed.
	//  4. Reservations: a connection from a Reserve network whose
	//     reservation is not used up closes an idle connection outside the
	//     reservations, or else the least recently working one of the host
	//     holding the most; connections held by a reservation are never
	//     closed by this rule.
	//
	// Source hosts are keyed as for MaxPendingHandshakes (an IPv4 address,
	// an IPv6 prefix of IPv6HostPrefix bits, "unix"). Zero means 4096.
	MaxConns int
	// MaxConnsPerHost, when positive, also bounds the open connections of
	// one source host at any time, full listener or not: a connection from
	// a host holding MaxConnsPerHost is refused (a policy violation naming
	// the value). Zero means no fixed per-host bound beyond the fair share
	// of MaxConns above.
	MaxConnsPerHost int
	// Reserve reserves connections for trusted networks: up to n
	// connections from addresses in prefix (the longest prefix holding the
	// address counts) are held by the reservation, which keeps them open
	// against every other connection's claim and, when the listener is
	// full, closes a connection outside the reservations for a new one
	// (see rule 4 of MaxConns). The counts must be positive and add up to
	// at most MaxConns. Nil means no reservation.
	Reserve map[netip.Prefix]int
	// IPv6HostPrefix is the prefix length, 1 to 128, by which IPv6 source
	// addresses are grouped into one source host for MaxPendingHandshakes,
	// MaxConns and MaxConnsPerHost (a host given a /48 is one host at
	// 48). IPv4 addresses are each a host. Zero means 64.
	IPv6HostPrefix int
	// Allow, when non-empty, is the source allowlist checked at accept:
	// a connection whose remote address is in none of the prefixes is closed.
	Allow []netip.Prefix
	// ReadBufferSize is the largest size of each connection's read buffer.
	// A connection starts with 4 KiB (or ReadBufferSize if smaller) and
	// grows the buffer fourfold, up to ReadBufferSize, each time a read fills
	// it, so idle connections stay small and busy ones read many messages
	// per system call. A grown buffer is given back (replaced by a 4 KiB
	// one) when the connection, between two messages, has waited one to two
	// seconds for its next byte. Zero means 16 KiB.
	ReadBufferSize int
	// WriteBufferSize is the largest size of each connection's write
	// buffer. It is allocated on first write at 4 KiB (or WriteBufferSize if
	// smaller) and grows fourfold, up to WriteBufferSize, after each Flush
	// that followed at least a buffer's worth of writes, so a connection
	// that is only sent heartbeats costs 4 KiB; it shrinks back to 4 KiB
	// after four Flushes in a row that each wrote under a quarter of it.
	// Zero means 16 KiB.
	WriteBufferSize int
	// OnViolation, if set, is called for every violation (from the
	// connection's own goroutine: keep it fast and never block).
	OnViolation func(Violation)
	// BodyTimeout bounds how long a message may take to arrive once its
	// first frame header has: a peer that sends a header and then dribbles
	// the body (one byte every few seconds) is closed when it passes, as a
	// ReasonPolicy violation. It is armed only when a read inside a message
	// must wait on the network, so whole messages already received cost
	// nothing. Time a connection spends stalled by its Budget does not
	// count (the deadline restarts after the stall). Zero means 10 s
	// (1 MiB at 100 KiB/s); raise it with
	// MaxMessageSize for large messages over slow links; negative turns it
	// off.
	BodyTimeout time.Duration
	// Budget, when set, is the byte budget this connection's unfinished
	// messages are charged to, shared with the other connections holding
	// the same *Budget (see [Budget]). Nil means no budget beyond
	// MaxMessageSize per connection. The Transport applies it too, with
	// one limit (see [RegisterTransport]).
	Budget *Budget
	// Curve, when set, makes every connection use the CURVE security
	// mechanism (RFC 25/26) instead of NULL: a peer whose greeting offers
	// another mechanism is refused at the greeting (ReasonAuth). Nil means
	// NULL. The Transport (zmq4 socket mode) supports NULL only.
	Curve *CurveConfig
	// OnRelease, if set, is called with the bytes of buffers a connection
	// gives back while it stays open: a grown read buffer (and CURVE's
	// scratch buffer) once the connection is idle, from a timer goroutine,
	// and a grown write buffer, from the writing goroutine. The bytes
	// become garbage; a process that then allocates little may want to
	// collect them sooner than its next garbage collection would (the
	// socket package does, see its Options.ReclaimBytes). Keep it fast and
	// never block in it.
	OnRelease func(bytes int)
	// Dialer, when set, is what Dial connects with (its TCP keepalive,
	// local address, Timeout and Deadline apply besides Dial's context).
	// Nil means a zero net.Dialer. Listeners and Handshake ignore it.
	Dialer *net.Dialer
}

// DefaultConfig returns a Config with every default filled in: what each
// zero field of a Config means. Constructors fill a Config this way first,
// then Verify it.
func DefaultConfig() Config {
	var c Config
	return c.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = defaultMaxMessageSize
	}
	if c.MaxFrames == 0 {
		c.MaxFrames = defaultMaxFrames
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = defaultHandshakeTimeout
	}
	if c.GreetingTimeout == 0 {
		c.GreetingTimeout = defaultGreetingTimeout
	}
	c.GreetingTimeout = min(c.GreetingTimeout, c.HandshakeTimeout)
	if c.MaxHandshakeSize == 0 {
		c.MaxHandshakeSize = defaultMaxHandshakeSize
	}
	if c.MaxPropertySize == 0 {
		c.MaxPropertySize = defaultMaxPropertySize
	}
	if c.MaxProperties == 0 {
		c.MaxProperties = defaultMaxProperties
	}
	if c.MaxPendingHandshakes == 0 {
		c.MaxPendingHandshakes = defaultMaxPendingHandshakes
	}
	if c.MaxConns == 0 {
		c.MaxConns = defaultMaxConns
	}
	if c.IPv6HostPrefix == 0 {
		c.IPv6HostPrefix = defaultIPv6HostPrefix
	}
	if c.ReadBufferSize == 0 {
		c.ReadBufferSize = defaultReadBufferSize
	}
	if c.WriteBufferSize == 0 {
		c.WriteBufferSize = defaultWriteBufferSize
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = defaultBodyTimeout
	}
	return c
}

// Verify reports whether c is usable once its defaults are filled in (the
// order every constructor follows: fill, then verify): no negative limit or
// timeout except where a field's doc gives negative a meaning, and limits
// within what the ZMTP wire format and this package support. The error is
// one line, "zmtpguard: Config.Field value what is wrong", for the first
// field at fault. (A GreetingTimeout above HandshakeTimeout is not an
// error: it is lowered to HandshakeTimeout.)
func (c *Config) Verify() error {
	f := c.withDefaults()
	bad := func(field string, v any, what string) error {
		return fmt.Errorf("zmtpguard: Config.%s %v %s", field, v, what)
	}
	for _, n := range []struct {
		field string
		v     int64
	}{
		{"MaxMessageSize", f.MaxMessageSize},
		{"MaxFrames", int64(f.MaxFrames)},
		{"HandshakeTimeout", int64(f.HandshakeTimeout)},
		{"GreetingTimeout", int64(f.GreetingTimeout)},
		{"MaxHandshakeSize", int64(f.MaxHandshakeSize)},
		{"MaxPropertySize", int64(f.MaxPropertySize)},
		{"MaxProperties", int64(f.MaxProperties)},
		{"MaxPendingHandshakes", int64(f.MaxPendingHandshakes)},
		{"MaxConns", int64(f.MaxConns)},
		{"MaxConnsPerHost", int64(f.MaxConnsPerHost)},
		{"IPv6HostPrefix", int64(f.IPv6HostPrefix)},
		{"ReadBufferSize", int64(f.ReadBufferSize)},
		{"WriteBufferSize", int64(f.WriteBufferSize)},
	} {
		if n.v < 0 {
			if d := time.Duration(n.v); strings.HasSuffix(n.field, "Timeout") {
				return bad(n.field, d, "is negative")
			}
			return bad(n.field, n.v, "is negative")
		}
	}
	if f.MaxMessageSize > 1<<40 {
		return bad("MaxMessageSize", f.MaxMessageSize, "is over 1 TiB")
	}
	if f.IPv6HostPrefix > 128 {
		return bad("IPv6HostPrefix", f.IPv6HostPrefix, "is over 128 bits")
	}
	reserved := 0
	for p, n := range f.Reserve {
		if !p.IsValid() {
			return bad("Reserve", p, "is not a valid prefix")
		}
		if n <= 0 {
			return bad("Reserve", p.String()+"="+itoa(n), "is not a positive count")
		}
		reserved += n
		if reserved > f.MaxConns {
			return bad("Reserve", reserved, "connections in all are more than MaxConns="+itoa(f.MaxConns))
		}
	}
	if f.ReadBufferSize < 64 {
		return bad("ReadBufferSize", f.ReadBufferSize, "is below 64 bytes")
	}
	if f.Curve != nil {
		if err := f.Curve.verify(); err != nil {
			return err
		}
	}
	for _, p := range f.Allow {
		if !p.IsValid() {
			return bad("Allow", p, "holds an invalid prefix")
		}
	}
	return nil
}
