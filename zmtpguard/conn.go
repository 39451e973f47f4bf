package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// readChunk bounds how much a body read grows a buffer ahead of the bytes
// actually received, so a header claiming MaxMessageSize costs memory only as
// the peer really sends it.
const readChunk = 64 << 10

// initialReadBuffer is the read buffer a connection starts with (or
// Config.ReadBufferSize if smaller): enough for any handshake and for a
// quiet peer's messages, so that an idle connection costs a few KiB. The
// buffer grows fourfold, up to Config.ReadBufferSize, each time a read fills
// it: a busy peer soon gets the full buffer and its one-syscall-per-many-
// messages batching.
const initialReadBuffer = 4 << 10

// connReader is what a Conn's bufio.Reader reads from: the network
// connection, preceded by the bytes a smaller buffer still held when it was
// replaced by a larger one. It notes when a read filled at least half of the
// buffer, the sign of a peer sending faster than the buffer drains.
type connReader struct {
	nc    net.Conn
	carry []byte
	// min is the read size, at least, that makes full true when it fills the
	// space bufio offered; 0 once the buffer is as large as it may grow.
	min  int
	full bool
	// err is the error the idle wait (parkIdle, readbuf.go) met, returned
	// after carry.
	err error
	// idle is the idle-wait state that gives a grown buffer back (readbuf.go).
	idle readIdle
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(r.carry) > 0 {
		n := copy(p, r.carry)
		if r.carry = r.carry[n:]; len(r.carry) == 0 {
			r.carry = nil
		}
		return n, nil
	}
	if err := r.err; err != nil {
		r.err = nil
		return 0, err
	}
	n, err := r.nc.Read(p)
	if n == len(p) && r.min > 0 && n >= r.min {
		r.full = true
	}
	return n, err
}

// newConnReader returns the buffered reader a connection starts with.
func newConnReader(nc net.Conn, max int) (*bufio.Reader, *connReader) {
	size := min(initialReadBuffer, max)
	cr := &connReader{nc: nc, min: growAt(size, max)}
	return bufio.NewReaderSize(cr, size), cr
}

// growAt is connReader.min for a buffer of size bytes that may grow to max:
// half of it, or 0 once it may not grow.
func growAt(size, max int) int {
	if size < max {
		return size / 2
	}
	return 0
}

// growReader replaces c's read buffer by one four times larger (at most
// ReadBufferSize), carrying over the bytes it holds. Called between messages
// once a read has filled the buffer.
func (c *Conn) growReader() {
	c.cr.full = false
	size := min(4*c.br.Size(), c.cfg.ReadBufferSize)
	if size <= c.br.Size() {
		c.cr.min = 0
		return
	}
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n) // buffered: never blocks
		c.cr.carry = append(make([]byte, 0, n), b...)
	}
	c.cr.idle.mu.Lock() // the idle timer and readBufferSize read c.br under it
	c.br = bufio.NewReaderSize(c.cr, size)
	c.cr.idle.mu.Unlock()
	c.cr.min = growAt(size, c.cfg.ReadBufferSize)
}

// errClosed is returned by operations on a closed Conn; it wraps
// net.ErrClosed, which callers test for.
var errClosed = fmt.Errorf("zmtpguard: connection closed: %w", net.ErrClosed)

// Message is one ZMTP message read by [Conn.ReadMessage]. Its frames alias a
// buffer owned by the Message: they are valid until the next ReadMessage into
// the same Message. Copy what must outlive that.
type Message struct {
	// Frames are the message's frame bodies. For a command, Frames holds a
	// single frame: the command's data (its name removed).
	Frames [][]byte
	// Command is the command's name ("PING", "PONG", "SUBSCRIBE", "CANCEL" or
	// "ERROR"; answer a PING with [Conn.Pong]) when the
	// message is a ZMTP command, and "" for a data message.
	Command string

	buf  []byte
	ends []int
}

// Reset empties m, keeping its buffers for reuse (large ones are released).
func (m *Message) Reset() {
	if cap(m.buf) > 4*readChunk {
		// Dropping the big buffer: the old frames must not pin it.
		m.buf = nil
		clear(m.Frames)
	}
	// Otherwise the old frames alias m.buf, which m keeps anyway: clearing
	// them would cost a pointer write barrier per frame for nothing.
	m.buf = m.buf[:0]
	m.ends = m.ends[:0]
	m.Frames = m.Frames[:0]
	m.Command = ""
}

// Size returns the total body bytes of m's frames.
func (m *Message) Size() int { return len(m.buf) }

// Footprint returns the bytes of memory m keeps for reuse: the capacity of
// its body buffer and of its frame and offset tables. A receiver that
// recycles Messages uses it to bound what idle Messages pin; assigning
// Message{} releases it all.
func (m *Message) Footprint() int {
	return cap(m.buf) + cap(m.ends)*wordSize + cap(m.Frames)*3*wordSize
}

// wordSize is the size of an int (and of a pointer) in bytes.
const wordSize = 4 << (^uint(0) >> 63)

// Conn is a ZMTP connection whose handshake passed the guard. Reads return
// whole, validated messages; writes are buffered until Flush.
//
// One goroutine may read while another writes; concurrent reads, or
// concurrent writes, must be serialised by the caller. Close may be called
// from any goroutine at any time.
type Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	cr     *connReader // under br; grows it
	bw     *bufio.Writer
	cfg    Config
	local  SocketType
	peer   Metadata
	remote string
	zc     *zmq4.Conn
	cz     *curveState // CURVE session; nil under NULL

	closeOnce sync.Once
	closeErr  error
	hdr       [9]byte
	// onClose, when set (by a Listener), runs once after the first Close.
	onClose func()
	// body is the message-body deadline and budget state (body.go).
	body bodyClock
	// wrote counts the bytes written since the last Flush (growWriter).
	wrote int
	// smallFlushes counts consecutive Flushes that wrote little (shrinkWriter).
	smallFlushes int
}

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
	fail := func(err error) (*Conn, error) {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var v *Violation
		if errors.As(err, &v) {
			v.Remote = remote
			return nil, v
		}
		return nil, err
	}
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

// Peer returns the peer's validated READY metadata.
func (c *Conn) Peer() Metadata { return c.peer }

// NetConn returns the connection under c, as crypto/tls's Conn.NetConn
// does: for deadlines (SetDeadline), addresses and socket options. Reading
// from or writing to it directly corrupts the ZMTP stream (tests that play
// a hostile peer do exactly that).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the connection. It is safe to call more than once and from
// any goroutine; later calls return the first call's result.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.nc.Close()
		c.body.closed.Store(true)
		if c.cfg.Budget != nil {
			c.cfg.Budget.wakeIfWaiting() // a reader stalled on the budget
		}
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.closeErr
}

func (c *Conn) fail(v *Violation) error {
	v.Remote = c.remote
	if c.cfg.OnViolation != nil {
		c.cfg.OnViolation(*v)
	}
	c.Close()
	return v
}

// ReadMessage reads the next whole message into m, reusing m's buffers.
// Each frame header is checked before its body is read: a message over
// MaxMessageSize bytes or MaxFrames frames, reserved flag bits, a command
// inside a multipart message, or an unknown command is a *Violation, after
// which the connection is closed (the stream cannot be trusted to resync).
// Other errors are the connection's I/O errors (io.EOF when the peer left).
func (c *Conn) ReadMessage(m *Message) error {
	if c.cr != nil && c.cr.full {
		c.growReader()
	}
	c.parkIdle()
	m.Reset()
	if c.cz != nil {
		return c.endMessage(m, c.readCurve(m))
	}
	if c.readBuffered(m) {
		return nil
	}
	if c.br.Buffered() < 2 {
		// Nothing buffered (the last message ended where the last read
		// did): wait for the next read here, where the general path would
		// wait for its header anyway, so that a message that arrives whole
		// takes the fast path too.
		if _, err := c.br.Peek(1); err == nil && c.readBuffered(m) {
			return nil
		}
	}
	return c.endMessage(m, c.readMessage(m))
}

// readMessage is ReadMessage's general path: frame by frame, each header
// checked before its body is read.
func (c *Conn) readMessage(m *Message) error {
	var total int64
	for nframes := 0; ; nframes++ {
		var b []byte
		var err error
		if n := min(c.br.Buffered(), 9); n >= 2 {
			// Fast path: the header is (most likely) buffered already;
			// Peek of buffered bytes never blocks.
			b, _ = c.br.Peek(n)
		} else {
			if nframes > 0 {
				c.bodyWait(2)
			}
			b, err = c.br.Peek(1)
			if err != nil {
				if nframes > 0 && err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			b, err = c.br.Peek(headerLen(b[0]))
		}
		hdr, ok, verr := parseFrameHeader(b, c.cfg.MaxMessageSize-total)
		if verr != nil {
			return c.fail(c.oversize(verr, nframes, total))
		}
		if !ok {
			if len(b) >= 2 && err == nil {
				// Fast path found a long header not wholly buffered yet.
				b, err = c.br.Peek(headerLen(b[0]))
				hdr, ok, verr = parseFrameHeader(b, c.cfg.MaxMessageSize-total)
				if verr != nil {
					return c.fail(c.oversize(verr, nframes, total))
				}
			}
			if !ok {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		if nframes >= c.cfg.MaxFrames {
			return c.fail(violation(decodeguard.ReasonOversize,
				"message has more than MaxFrames="+itoa(c.cfg.MaxFrames)+" frames", int64(nframes+1), nil))
		}
		if hdr.Command() && nframes > 0 {
			return c.fail(violation(decodeguard.ReasonTransport, "command frame inside a multipart message", int64(nframes), b))
		}
		c.br.Discard(hdr.Len)
		if err := c.readBody(m, hdr.Size); err != nil {
			return err
		}
		total += hdr.Size
		m.ends = append(m.ends, len(m.buf))
		if hdr.Command() {
			return c.command(m)
		}
		if !hdr.More() {
			break
		}
	}
	start := 0
	for _, end := range m.ends {
		m.Frames = append(m.Frames, m.buf[start:end:end])
		start = end
	}
	return nil
}

// readBuffered is ReadMessage's fast path: when the read buffer already
// holds a whole data message within the limits, it copies the frames out
// with one Peek and one Discard and reports true. Anything else (a message
// not wholly received, a command, reserved flag bits, a limit exceeded)
// leaves the buffer and m untouched and reports false, for the general path
// to read, or refuse with the right violation.
func (c *Conn) readBuffered(m *Message) bool {
	b, _ := c.br.Peek(c.br.Buffered()) // buffered: never blocks
	off := 0
	var total uint64
	for nframes := 0; ; nframes++ {
		if len(b)-off < 2 || nframes >= c.cfg.MaxFrames {
			break
		}
		flags := b[off]
		var size uint64
		hl := 2
		switch flags &^ flagMore {
		case 0:
			size = uint64(b[off+1])
		case flagLong:
			hl = 9
			if len(b)-off < hl {
				break
			}
			size = binary.BigEndian.Uint64(b[off+1:])
		default: // a command or reserved bits: the general path decides
			hl = 0
		}
		// size is checked against the limit and the bytes present before
		// anything is copied.
		if hl == 0 || len(b)-off < hl || size > uint64(c.cfg.MaxMessageSize)-total || size > uint64(len(b)-off-hl) {
			break
		}
		if nframes == 0 && flags&flagMore != 0 {
			// A multipart message: size m's buffers once for all of it,
			// instead of growing them frame by frame (a cold Message would
			// reallocate each a few times for a message of many frames).
			frames, bytes, ok := c.bufferedExtent(b)
			if !ok {
				break
			}
			m.buf = slices.Grow(m.buf, bytes)
			m.ends = slices.Grow(m.ends, frames)
			m.Frames = slices.Grow(m.Frames, frames)
		}
		off += hl
		m.buf = append(m.buf, b[off:off+int(size)]...)
		m.ends = append(m.ends, len(m.buf))
		off += int(size)
		total += size
		if flags&flagMore == 0 {
			c.br.Discard(off)
			start := 0
			for _, end := range m.ends {
				m.Frames = append(m.Frames, m.buf[start:end:end])
				start = end
			}
			return true
		}
	}
	m.buf = m.buf[:0]
	m.ends = m.ends[:0]
	return false
}

// bufferedExtent walks the frame headers of the data message at the front
// of b (buffered bytes) and reports its frame count and body bytes when the
// whole message is there within MaxFrames and MaxMessageSize, with only
// data frames; ok is false otherwise (readBuffered then leaves it to the
// general path, which checks and reports whatever is wrong).
func (c *Conn) bufferedExtent(b []byte) (frames, bytes int, ok bool) {
	var total uint64
	off := 0
	for n := 0; n < c.cfg.MaxFrames; n++ {
		if len(b)-off < 2 {
			return 0, 0, false
		}
		flags := b[off]
		var size uint64
		hl := 2
		switch flags &^ flagMore {
		case 0:
			size = uint64(b[off+1])
		case flagLong:
			hl = 9
			if len(b)-off < hl {
				return 0, 0, false
			}
			size = binary.BigEndian.Uint64(b[off+1:])
		default:
			return 0, 0, false
		}
		if size > uint64(c.cfg.MaxMessageSize)-total || size > uint64(len(b)-off-hl) {
			return 0, 0, false
		}
		off += hl + int(size)
		total += size
		if flags&flagMore == 0 {
			return n + 1, int(total), true
		}
	}
	return 0, 0, false
}

// oversize restates a frame-size violation in terms of the whole message.
func (c *Conn) oversize(verr error, nframes int, total int64) *Violation {
	var v *Violation
	errors.As(verr, &v)
	if v.Reason == decodeguard.ReasonOversize {
		v.Detail = "message of " + itoa(nframes+1) + " frames claims " + formatSize(uint64(total)+uint64(v.Length)) +
			" bytes, over MaxMessageSize " + itoa(int(c.cfg.MaxMessageSize))
	}
	return v
}

func (c *Conn) readBody(m *Message, n int64) error {
	for n > 0 {
		step := min(n, readChunk)
		if err := c.bodyReserve(len(m.buf), int(step)); err != nil {
			return err
		}
		start := len(m.buf)
		m.buf = slices.Grow(m.buf, int(step))[:start+int(step)]
		if _, err := io.ReadFull(c.br, m.buf[start:]); err != nil {
			m.buf = m.buf[:start]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n -= step
	}
	return nil
}

var commandNames = [...]string{cmdPing, cmdPong, cmdSubscribe, cmdCancel, cmdError}

func (c *Conn) command(m *Message) error {
	name, data, err := parseCommand(m.buf)
	if err != nil {
		var v *Violation
		errors.As(err, &v)
		return c.fail(v)
	}
	for _, known := range commandNames {
		if string(name) == known {
			m.Command = known
			m.Frames = append(m.Frames, data)
			return nil
		}
	}
	return c.fail(violation(decodeguard.ReasonTransport, "unknown or misplaced ZMTP command after the handshake", int64(len(m.buf)), m.buf))
}

func (c *Conn) writer() *bufio.Writer {
	if c.bw == nil {
		// Small first (see initialWriteBuffer); Flush grows it.
		c.bw = bufio.NewWriterSize(c.nc, min(initialWriteBuffer, c.cfg.WriteBufferSize))
	}
	return c.bw
}

func (c *Conn) writeFrame(flags byte, body []byte) error {
	if c.cz != nil {
		return c.writeCurve(flags&flagMore, nil, body)
	}
	w := c.writer()
	c.wrote += len(body)
	h := c.hdr[:]
	if len(body) > 255 {
		h[0] = flags | flagLong
		putUint64(h[1:9], uint64(len(body)))
		h = h[:9]
	} else {
		h[0] = flags
		h[1] = byte(len(body))
		h = h[:2]
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// errEmptyMessage is returned when asked to write a message with no frames.
var errEmptyMessage = errors.New("zmtpguard: a message needs at least one frame")

// WriteMessage buffers one message of the given frames. Call Flush to send.
func (c *Conn) WriteMessage(frames ...[]byte) error {
	if len(frames) == 0 {
		return errEmptyMessage
	}
	last := len(frames) - 1
	for i, f := range frames {
		var flags byte
		if i < last {
			flags = flagMore
		}
		if err := c.writeFrame(flags, f); err != nil {
			return err
		}
	}
	return nil
}

// WriteCommand buffers one ZMTP command (name, 1..255 bytes, and data), for
// example a PING of ZMTP 3.1 (RFC 37) or a SUBSCRIBE; call Flush to send.
// Send PING only to a peer whose greeting announced 3.1 or later
// (Metadata.Minor): a 3.0 peer takes it for a data message.
func (c *Conn) WriteCommand(name string, data []byte) error {
	if len(name) == 0 || len(name) > 255 {
		return errors.New("zmtpguard: command name must be 1..255 bytes")
	}
	if c.cz != nil {
		return c.writeCurve(curveFlagCommand, []byte(name), data)
	}
	w := c.writer()
	size := 1 + len(name) + len(data)
	c.wrote += size
	h := c.hdr[:]
	if size > 255 {
		h[0] = flagCommand | flagLong
		putUint64(h[1:9], uint64(size))
		h = h[:9]
	} else {
		h[0] = flagCommand
		h[1] = byte(size)
		h = h[:2]
	}
	w.Write(h)
	w.WriteByte(byte(len(name)))
	w.WriteString(name)
	_, err := w.Write(data)
	return err
}

// Pong answers a PING message m (as returned by ReadMessage) with the PONG
// ZMTP 3.1 prescribes, echoing the ping's context. It buffers; call Flush.
func (c *Conn) Pong(m *Message) error {
	if m.Command != cmdPing || len(m.Frames) != 1 {
		return errors.New("zmtpguard: Pong needs a PING message")
	}
	var ctxData []byte
	if d := m.Frames[0]; len(d) > 2 {
		ctxData = d[2:]
		if len(ctxData) > 16 {
			ctxData = ctxData[:16]
		}
	}
	return c.WriteCommand(cmdPong, ctxData)
}

// Flush sends buffered writes.
func (c *Conn) Flush() error {
	if c.bw == nil {
		return nil
	}
	err := c.bw.Flush()
	c.growWriter()
	return err
}

// messageBuffered reports whether the read buffer already holds at least one
// whole message, so that the next ReadMessage will not wait on the network.
// A reader that batches messages uses it to hand a batch on instead of
// holding it while a peer's next message is still arriving. It only looks at
// frame headers already received and never blocks or allocates. (A message
// larger than the read buffer is never reported as buffered.)
func (c *Conn) messageBuffered() bool {
	if c.cz != nil {
		return c.curveMessageBuffered()
	}
	b, _ := c.br.Peek(c.br.Buffered())
	for off := 0; off < len(b); {
		hl := headerLen(b[off])
		if len(b)-off < hl {
			return false
		}
		flags := b[off]
		var size uint64
		if hl == 2 {
			size = uint64(b[off+1])
		} else {
			size = uint64(b[off+1])<<56 | uint64(b[off+2])<<48 | uint64(b[off+3])<<40 | uint64(b[off+4])<<32 |
				uint64(b[off+5])<<24 | uint64(b[off+6])<<16 | uint64(b[off+7])<<8 | uint64(b[off+8])
		}
		if size > uint64(len(b)-off-hl) {
			return false
		}
		off += hl + int(size)
		if flags&flagMore == 0 || flags&flagCommand != 0 {
			return true
		}
	}
	return false
}

// TryReadMessage is ReadMessage for a reader that batches: when the read
// buffer already holds the next whole message it reads it into m as
// ReadMessage would (same checks, same violations) and reports true;
// otherwise it consumes nothing, leaves m reset and reports false, without
// waiting on the network. It never blocks, so a reader can hand on what it
// has instead of holding it while the peer's next message is arriving.
func (c *Conn) TryReadMessage(m *Message) (bool, error) {
	m.Reset()
	if c.cz == nil && (c.cr == nil || !c.cr.full) {
		if c.readBuffered(m) {
			return true, nil
		}
	}
	// Anything else that is whole (a command, a message the general path
	// refuses, a buffer about to grow, CURVE) goes through ReadMessage.
	if !c.messageBuffered() {
		return false, nil
	}
	return true, c.ReadMessage(m)
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	b[0] = byte(v >> 56)
	b[1] = byte(v >> 48)
	b[2] = byte(v >> 40)
	b[3] = byte(v >> 32)
	b[4] = byte(v >> 24)
	b[5] = byte(v >> 16)
	b[6] = byte(v >> 8)
	b[7] = byte(v)
}
