package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// The guarded handshake: the local greeting first, the peer's greeting
// checked byte by byte and its READY in full, then zmq4.Open over the
// validated bytes only.

// Handshake runs a guarded ZMTP 3 handshake on nc for a local socket of type
// local with the given identity (nil for none), under cfg's limits (nil means
// defaults). It writes the local greeting, validates the peer's greeting byte
// by byte and its READY command in full, and lets zmq4.Open complete the
// exchange over the validated bytes only. The peer's 64-byte greeting must
// arrive within cfg.GreetingTimeout; the whole handshake is bounded by
// cfg.HandshakeTimeout and by ctx. ([Dial] does not apply GreetingTimeout:
// see [Config.GreetingTimeout].)
//
// On failure nc is closed and the error is a *Violation (bad peer, deadline
// passed) or ctx's error. Violations are also reported to cfg.OnViolation.
func Handshake(ctx context.Context, nc net.Conn, local SocketType, identity []byte, cfg *Config) (*Conn, error) {
	return reportedHandshake(ctx, nc, local, identity, cfg, true)
}

// reportedHandshake is Handshake, with the greeting deadline applied only if
// greeting is true.
func reportedHandshake(ctx context.Context, nc net.Conn, local SocketType, identity []byte, cfg *Config, greeting bool) (*Conn, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	if err := c.Verify(); err != nil {
		nc.Close()
		return nil, err
	}
	conn, err := handshake(ctx, nc, local, identity, &c, greeting)
	if err != nil && c.OnViolation != nil {
		var v *Violation // declared here: its escape costs nothing on success
		if errors.As(err, &v) {
			c.OnViolation(*v)
		}
	}
	return conn, err
}

// handshake is Handshake with cfg already defaulted and verified, the
// greeting deadline optional, and without reporting: a failure's *Violation
// (Remote set) is returned only, for the caller to report (a Listener does
// not report a handshake it evicted).
func handshake(ctx context.Context, nc net.Conn, local SocketType, identity []byte, cfg *Config, greeting bool) (*Conn, error) {
	c := *cfg
	remote := remoteString(nc)
	fail := func(err error) (*Conn, error) { return nil, handshakeFailed(ctx, nc, remote, err) }
	if err := validType(local); err != nil {
		nc.Close()
		return nil, err
	}
	if len(identity) > maxIdentity {
		nc.Close()
		return nil, errors.New("zmtpguard: local identity is longer than 255 bytes")
	}

	dl := newHandshakeDeadlines(ctx, &c, greeting)
	if err := nc.SetDeadline(dl.greeting); err != nil {
		return fail(err)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	br, cr := newConnReader(nc, c.ReadBufferSize)
	mine := &localGreeting // no copy: a NULL handshake allocates nothing more
	if c.Curve != nil {
		g := curveGreeting(c.Curve.Server)
		mine = &g
	}
	if _, err := nc.Write(mine[:]); err != nil {
		return fail(handshakeIOError("sending greeting", err, 0, nil))
	}
	var greet [greetingSize]byte
	if err := readGreeting(br, &greet, dl.greetingTimeout, dl.grace(ctx, nc), c.Curve); err != nil {
		return fail(err)
	}
	if dl.greeting != dl.handshake {
		if err := nc.SetDeadline(dl.handshake); err != nil {
			return fail(err)
		}
		// A cancellation whose past deadline the line above overwrote
		// is seen here; a later one sets its deadline after ours.
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}

	var zc *zmq4.Conn
	var md Metadata
	var cz *curveState
	if c.Curve != nil {
		// CURVE: the guard runs the whole handshake itself.
		var err error
		if c.Curve.Server {
			cz, md, err = curveServerHandshake(nc, br, &c, local, identity)
		} else {
			cz, md, err = curveClientHandshake(nc, br, &c, local, identity)
		}
		if err != nil {
			return fail(err)
		}
	} else {
		hs := &handshakeConn{Conn: nc, br: br, cfg: &c, local: local, replay: greet[:], swallow: true}
		var err error
		zc, err = openZMQ(hs, local, identity)
		if hs.err != nil {
			return fail(hs.err)
		}
		if err != nil {
			return fail(handshakeIOError("completing handshake", err, -1, nil))
		}
		md = hs.md
	}
	if !stop() || ctx.Err() != nil {
		return fail(ctx.Err())
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return fail(err)
	}
	md.Major, md.Minor = int(greet[10]), int(greet[11])
	return &Conn{nc: nc, br: br, cr: cr, cfg: c, local: local, peer: md, remote: remote, zc: zc, cz: cz}, nil
}

// openZMQ runs zmq4.Open over the guarded stream. The validator is meant to
// make every zmq4 panic impossible; the recover is a second line, so that a
// gap in it costs one connection, never the process.
func openZMQ(hs *handshakeConn, local SocketType, identity []byte) (zc *zmq4.Conn, err error) {
	defer func() {
		if r := recover(); r != nil {
			zc = nil
			// The panic value may quote peer bytes: it is not kept.
			err = violation(decodeguard.ReasonDecoderPanic, "zmq4 panicked during the handshake", -1, nil)
		}
	}()
	return zmq4.Open(hs, null.Security(), zmq4.SocketType(local), zmq4.SocketIdentity(identity), false, nil)
}

// remoteString returns nc's remote address as text, "" when unknown.
func remoteString(nc net.Conn) string {
	if ra := nc.RemoteAddr(); ra != nil {
		return ra.String()
	}
	return ""
}

// handshakeDeadlines are the two deadlines of one handshake.
type handshakeDeadlines struct {
	handshake time.Time // the whole handshake: HandshakeTimeout or ctx's deadline
	greeting  time.Time // the peer's greeting: GreetingTimeout, at most handshake
	// greetingTimeout is GreetingTimeout when the greeting deadline is
	// earlier than the handshake deadline, for the violation detail; 0 when
	// they are the same (the usual handshake deadline detail applies).
	greetingTimeout time.Duration
}

// newHandshakeDeadlines computes the deadlines of a handshake starting now;
// without greeting, the greeting deadline is the handshake deadline.
func newHandshakeDeadlines(ctx context.Context, cfg *Config, greeting bool) handshakeDeadlines {
	now := time.Now()
	d := handshakeDeadlines{handshake: now.Add(cfg.HandshakeTimeout)}
	if cd, ok := ctx.Deadline(); ok && cd.Before(d.handshake) {
		d.handshake = cd
	}
	d.greeting = d.handshake
	if g := now.Add(cfg.GreetingTimeout); greeting && g.Before(d.handshake) {
		d.greeting = g
		d.greetingTimeout = cfg.GreetingTimeout
	}
	return d
}

// greetingGrace is how long the one extra read after a passed greeting
// deadline may wait (see handshakeDeadlines.grace).
const greetingGrace = 20 * time.Millisecond

// grace returns the function readGreeting calls once when the greeting
// deadline has passed: it moves the read deadline greetingGrace ahead (never
// past the handshake deadline) so that one more read can take what the
// kernel already holds. A Go read whose deadline has passed fails without
// looking at the socket, so without it a process that did not run for
// GreetingTimeout (a loaded machine, a long GC) would fail a peer whose
// greeting had arrived in time. It reports false, and readGreeting gives
// up, when ctx is done or there is no separate greeting deadline.
func (d *handshakeDeadlines) grace(ctx context.Context, nc net.Conn) func() bool {
	if d.greetingTimeout == 0 {
		return nil
	}
	return func() bool {
		until := time.Now().Add(greetingGrace)
		if until.After(d.handshake) {
			until = d.handshake
		}
		// A cancellation after this call sets its past deadline after ours;
		// one before it is seen by the ctx check.
		return nc.SetReadDeadline(until) == nil && ctx.Err() == nil
	}
}

// readGreeting reads the peer's greeting from br into g, validating each
// byte as it arrives (checkGreeting), so a wrong first byte is refused
// without waiting for 63 more. A read deadline passing is reported as the
// greeting deadline when greetingTimeout is not 0 (see handshakeDeadlines).
func readGreeting(br *bufio.Reader, g *[greetingSize]byte, greetingTimeout time.Duration, grace func() bool, cc *CurveConfig) error {
	for _, n := range [...]int{1, 10, 11, 33, greetingSize} {
		b, err := br.Peek(n)
		if err != nil && grace != nil && errors.Is(err, os.ErrDeadlineExceeded) && grace() {
			grace = nil
			b, err = br.Peek(n)
		}
		if verr := checkGreeting(b, cc); verr != nil {
			return verr
		}
		if err != nil {
			if greetingTimeout > 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				return violation(decodeguard.ReasonHandshake, "greeting deadline passed: the 64-byte greeting did not arrive within GreetingTimeout ("+
					greetingTimeout.String()+")", int64(len(b)), b)
			}
			return handshakeIOError("reading greeting", err, len(b), b)
		}
	}
	_, err := io.ReadFull(br, g[:]) // cannot fail: Peek above holds the bytes
	return err
}

// readReadyFrame reads the peer's READY command frame from br and validates
// it in full for a local socket of type local ("" skips the compatibility
// check). It returns the whole frame, header included, for replay.
func readReadyFrame(br *bufio.Reader, local SocketType, cfg *Config) ([]byte, Metadata, error) {
	b, err := br.Peek(1)
	if err != nil {
		return nil, Metadata{}, handshakeIOError("reading READY", err, len(b), b)
	}
	b, err = br.Peek(headerLen(b[0]))
	hdr, ok, verr := parseFrameHeader(b, int64(cfg.MaxHandshakeSize))
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) {
			v.Reason = decodeguard.ReasonHandshake
			v.Detail = "READY " + v.Detail
		}
		return nil, Metadata{}, verr
	}
	if !ok {
		return nil, Metadata{}, handshakeIOError("reading READY", err, len(b), b)
	}
	if !hdr.Command() {
		return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "expected a READY command, got a data frame", hdr.Size, b)
	}
	// hdr.Size is at most MaxHandshakeSize: the allocation is bounded.
	frame := make([]byte, hdr.Len+int(hdr.Size))
	if n, err := io.ReadFull(br, frame); err != nil {
		return nil, Metadata{}, handshakeIOError("reading READY", err, n, frame[:n])
	}
	name, props, verr := parseCommand(frame[hdr.Len:])
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) {
			v.Reason = decodeguard.ReasonHandshake
		}
		return nil, Metadata{}, verr
	}
	if string(name) != cmdReady {
		if string(name) == cmdError {
			return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "peer refused the handshake with ERROR", int64(len(frame)), frame)
		}
		return nil, Metadata{}, violation(decodeguard.ReasonHandshake, "expected READY (only NULL security is supported)", int64(len(frame)), frame)
	}
	md, verr := parseReady(props, local, cfg)
	if verr != nil {
		return nil, Metadata{}, verr
	}
	return frame, md, nil
}

// handshakeIOError turns an I/O failure during the handshake into a
// violation: the peer stalled past the deadline or went away mid-handshake.
func handshakeIOError(during string, err error, n int, seen []byte) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return violation(decodeguard.ReasonHandshake, "handshake deadline passed while "+during, int64(n), seen)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return violation(decodeguard.ReasonHandshake, "peer closed the connection while "+during, int64(n), seen)
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return violation(decodeguard.ReasonHandshake, "network error while "+during+": "+ne.Error(), int64(n), seen)
	}
	return violation(decodeguard.ReasonHandshake, "handshake failed while "+during, int64(n), seen)
}

// handshakeConn is the stream zmq4.Open runs over: it swallows zmq4's
// greeting (the guard already sent its own), replays the validated
// peer greeting, and hands zmq4 the peer's READY only after validating it.
// zmq4 can never read a byte the guard has not checked.
type handshakeConn struct {
	net.Conn
	br      *bufio.Reader
	cfg     *Config
	local   SocketType
	replay  []byte
	swallow bool
	ready   bool
	md      Metadata
	err     error
}

var errOverread = errors.New("zmtpguard: zmq4 read past the handshake")

func (h *handshakeConn) Write(p []byte) (int, error) {
	if h.swallow {
		h.swallow = false
		if bytes.Equal(p, zmq4Greeting[:]) {
			return len(p), nil
		}
		return 0, errors.New("zmtpguard: zmq4 greeting differs from the guard's")
	}
	return h.Conn.Write(p)
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	if len(h.replay) == 0 {
		if h.ready {
			return 0, errOverread
		}
		if err := h.readReady(); err != nil {
			h.err = err
			return 0, err
		}
	}
	n := copy(p, h.replay)
	h.replay = h.replay[n:]
	return n, nil
}

func (h *handshakeConn) readReady() error {
	h.ready = true
	frame, md, err := readReadyFrame(h.br, h.local, h.cfg)
	if err != nil {
		return err
	}
	h.md = md
	h.replay = frame
	return nil
}

// handshakeFailed closes nc after a failed handshake or prevalidation and
// returns the error to report: ctx's error when ctx ended, a *Violation
// with its Remote set to remote, or err itself.
func handshakeFailed(ctx context.Context, nc net.Conn, remote string, err error) error {
	nc.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var v *Violation
	if errors.As(err, &v) {
		v.Remote = remote
		return v
	}
	return err
}
