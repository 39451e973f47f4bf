package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// guardTransport is the zmq4 transport (github.com/go-zeromq/zmq4/transport)
// that RegisterTransport registers: see RegisterTransport for what it checks.
type guardTransport struct {
	network string
	cfg     Config
	ctr     counters
}

var _ transport.Transport = (*guardTransport)(nil)

// newTransport returns a guarded transport over network ("tcp" or "unix")
// with cfg's limits (nil means defaults).
func newTransport(network string, cfg *Config) (*guardTransport, error) {
	switch network {
	case "tcp", "tcp4", "tcp6", "unix":
	default:
		return nil, errors.New("zmtpguard: transport network must be tcp, tcp4, tcp6 or unix")
	}
	if cfg != nil {
		if err := cfg.Verify(); err != nil {
			return nil, err
		}
		if cfg.Curve != nil {
			return nil, errors.New("zmtpguard: the Transport supports NULL security only (Config.Curve is set)")
		}
	}
	t := &guardTransport{network: network}
	t.cfg = countingConfig(cfg, &t.ctr)
	return t, nil
}

// RegisterTransport registers with zmq4, under scheme (for example
// "zmqguard"), a TCP transport that puts the guard under an unmodified
// zmq4.Socket: a socket that listens on or dials "scheme://host:port" gets
// the checks below, under cfg's limits (nil means defaults). zmq4's
// registry is global and refuses to replace a scheme ("tcp" included), so
// register once per process. stats returns a snapshot of the counters of
// every listener of the transport (and the refusals and handshakes of its
// dialed connections).
//
// On the listening side, each accepted connection is validated in a
// background goroutine before zmq4 sees it: source allowlist, MaxConns, the
// pending-handshake pool (full, it evicts the oldest pending handshake of
// the source host holding the most, as a [Listener] does), the greeting and
// handshake deadlines, the peer's greeting byte by byte, and its READY in
// full (lengths, names, Socket-Type known). Only then does the
// net.Listener's Accept return it, so zmq4's accept goroutine —
// which runs zmq4.Open inline and would otherwise wait forever on a silent
// peer — never blocks on a peer. The returned net.Conn swallows zmq4's
// greeting (the guard already sent its own, which announces ZMTP 3.1 where
// zmq4's says 3.0: the guard answers PINGs for zmq4), replays the
// validated peer bytes to zmq4's reads, and learns the local socket type from
// the READY zmq4 writes: an incompatible peer is refused there, before zmq4
// checks (zmq4 would leave the connection open).
//
// After the handshake every frame header is checked against MaxMessageSize
// and MaxFrames before any of its bytes reach zmq4 (zmq4 allocates whatever a
// header claims); a violation closes the connection and fails zmq4's read.
// Commands never reach zmq4 as data: PING is answered with PONG by the guard
// (written between zmq4's messages), PONG is dropped, ERROR ends the
// connection, ZMTP 3.1 SUBSCRIBE/CANCEL become the ZMTP 3.0 subscription
// messages zmq4 understands when the local socket is PUB or XPUB (and are a
// violation otherwise), anything else is a violation.
//
// Config.BodyTimeout applies as on a [Conn]: once a message's first frame
// header has been handed to zmq4, the message must be complete within
// BodyTimeout (armed only when a read inside the message waits on the
// network); a peer that dribbles a body is closed as a ReasonPolicy
// violation. Config.Budget, when set, is shared by every connection of the
// transport (every socket bound or connected on its scheme). zmq4 allocates
// a frame whole when it reads the frame's header, so the frame's size is
// charged before its header is handed to zmq4: a connection over its fair
// share of a spent budget is not read any further there (zmq4 has not
// allocated, TCP flow control slows the peer), and past the budget's wait
// the largest holder is closed (ReasonPolicy), as for a Conn. A complete
// message stays charged, as the budget's outside charge (which only stalls,
// never evicts, while it holds half of the limit), until zmq4 asks that
// connection for its next message, which it does once the message is in
// the socket's receive queue. The budget cannot cover that queue: zmq4
// keeps up to 10 received messages per socket before Recv takes them, so a
// socket may hold up to 10 × MaxMessageSize beyond the budget, and the guard
// cannot see when Recv takes them.
//
// The dialing side does the same checks passively on the stream zmq4 drives:
// the peer's greeting and READY are validated before zmq4 reads them (the
// local type, for the compatibility check, comes from the READY zmq4 writes),
// the whole handshake is under HandshakeTimeout (zmq4 alone waits forever for
// a server that accepts TCP but never speaks; GreetingTimeout does not apply,
// as for [Dial]), and frames are scanned as above. Dial-side connections
// are not subject to MaxConns, the pending pool or the allowlist.
//
// What this mode cannot fix, because it lives in zmq4's socket layer above
// the stream:
//   - ROUTER: one peer that stops reading blocks every Send once its socket
//     buffers fill (zmq4 holds the writer lock across a blocking write); a
//     zero-frame Send panics with that lock held; a peer can claim another
//     peer's identity.
//   - XPUB: subscriptions are consumed by zmq4 and never reach the
//     application (only Topics()); one slow subscriber starves the others
//     and zmq4's queue grows without bound.
//   - PUB and XPUB leak one goroutine per socket; Recv after Close returns
//     empty messages.
//   - PUSH and DEALER copy each message to every peer instead of
//     round-robin.
//   - A connection the guard closes for a violation surfaces as one error
//     from the socket's Recv (zmq4 reports every peer's read error there).
//   - Only the NULL mechanism: a socket configured WithSecurity(PLAIN/CURVE)
//     fails every handshake on this transport.
//
// The socket package of zmqguard owns those layers and has none of these
// limits; this transport is for code that must keep a zmq4.Socket.
func RegisterTransport(scheme string, cfg *Config) (stats func() Stats, err error) {
	if scheme == "" || strings.Contains(scheme, "://") {
		return nil, errors.New("zmtpguard: invalid transport scheme " + strconv.Quote(scheme))
	}
	t, err := newTransport("tcp", cfg)
	if err != nil {
		return nil, err
	}
	if err := zmq4.RegisterTransport(scheme, t); err != nil {
		return nil, err
	}
	return t.Stats, nil
}

// Stats returns a snapshot of the counters of every listener of t (and the
// violations and handshakes of its dialed connections).
func (t *guardTransport) Stats() Stats { return t.ctr.snapshot() }

// Addr turns the part of an endpoint after "scheme://" into a network
// address, as zmq4's own tcp and ipc transports do: "*" as host means all
// interfaces, "*" as port means any port.
func (t *guardTransport) Addr(ep string) (string, error) {
	if t.network == "unix" {
		return ep, nil
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", err
	}
	switch port {
	case "", "*":
		port = "0"
	}
	switch host {
	case "", "*":
		host = "0.0.0.0"
	}
	return net.JoinHostPort(host, port), nil
}

// Listen announces on addr and returns a net.Listener whose Accept yields
// only connections whose greeting and READY passed the guard. ctx is the
// zmq4 socket's context: when it ends, the listener closes.
func (t *guardTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	gl := &guardListener{t: t}
	gl.loop = newAcceptLoop(ln, &t.cfg, &t.ctr, t.prevalidate, func(g *guardConn) { g.Close() })
	gl.loop.start()
	gl.mu.Lock()
	gl.stop = context.AfterFunc(ctx, func() { gl.Close() })
	gl.mu.Unlock()
	return gl, nil
}

// Dial connects to addr and returns a connection that checks the peer's
// greeting, READY and frames as zmq4 drives the handshake over it, all under
// HandshakeTimeout.
func (t *guardTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	nc, err := d.DialContext(ctx, t.network, addr)
	if err != nil {
		return nil, err
	}
	// HandshakeTimeout only: as for Dial, GreetingTimeout does not apply.
	if err := nc.SetDeadline(time.Now().Add(t.cfg.HandshakeTimeout)); err != nil {
		nc.Close()
		return nil, err
	}
	g := newGuardConn(nc, bufio.NewReaderSize(nc, t.cfg.ReadBufferSize), &t.cfg, &t.ctr, false)
	return g, nil
}

// prevalidate runs the listening side's checks on nc before zmq4 sees it.
// Like handshake, it does not report its violation (the accept loop does).
func (t *guardTransport) prevalidate(ctx context.Context, nc net.Conn, release func()) (*guardConn, error) {
	cfg := &t.cfg
	remote := remoteString(nc)
	fail := func(err error) (*guardConn, error) {
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
	dl := newHandshakeDeadlines(ctx, cfg, true)
	if err := nc.SetDeadline(dl.greeting); err != nil {
		return fail(err)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	br := bufio.NewReaderSize(nc, cfg.ReadBufferSize)
	if _, err := nc.Write(localGreeting[:]); err != nil {
		return fail(handshakeIOError("sending greeting", err, 0, nil))
	}
	var greet [greetingSize]byte
	if err := readGreeting(br, &greet, dl.greetingTimeout, dl.grace(ctx, nc), nil); err != nil {
		return fail(err)
	}
	if dl.greeting != dl.handshake {
		if err := nc.SetDeadline(dl.handshake); err != nil {
			return fail(err)
		}
		if ctx.Err() != nil { // see handshake
			return fail(ctx.Err())
		}
	}
	// The local type is not known yet: it comes with zmq4's READY, and the
	// compatibility check happens when zmq4 writes it.
	frame, md, err := readReadyFrame(br, "", cfg)
	if err != nil {
		return fail(err)
	}
	if !stop() {
		return fail(ctx.Err())
	}
	// zmq4 now only writes its READY (its reads are served from memory):
	// a fresh write deadline covers that, reads have none.
	if err := nc.SetReadDeadline(time.Time{}); err != nil {
		return fail(err)
	}
	if err := nc.SetWriteDeadline(time.Now().Add(cfg.HandshakeTimeout)); err != nil {
		return fail(err)
	}
	g := newGuardConn(nc, br, cfg, &t.ctr, true)
	g.peer = md
	g.release = release
	g.replay = append(greet[:], frame...)
	g.rphase = rStream
	// zmq4 cannot fail the rest of its handshake on peer input (the guard
	// has checked everything it checks), only on a write error, which
	// closes g. The watchdog closes g anyway if zmq4 has not read the
	// replayed handshake within HandshakeTimeout: zmq4 never closes a
	// connection whose handshake failed.
	g.watch = time.AfterFunc(cfg.HandshakeTimeout, func() {
		if !g.opened.Load() {
			g.shut()
		}
	})
	return g, nil
}

// guardListener is the net.Listener the transport gives zmq4.
type guardListener struct {
	t    *guardTransport
	loop *acceptLoop[*guardConn]
	mu   sync.Mutex
	stop func() bool
}

// Accept returns the next pre-validated connection. Accept errors of the OS
// listener are absorbed with back-off inside the loop; Accept itself fails
// only after Close (zmq4's accept loop retries errors without pause, so
// returning one per failed OS accept would make it spin).
func (l *guardListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.loop.ready:
		return c, nil
	case <-l.loop.done:
		return nil, &net.OpError{Op: "accept", Net: l.t.network, Addr: l.Addr(), Err: net.ErrClosed}
	}
}

func (l *guardListener) Close() error {
	l.mu.Lock()
	stop := l.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	err := l.loop.close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (l *guardListener) Addr() net.Addr { return l.loop.ln.Addr() }

// Read phases of a guardConn.
const (
	rGreeting uint8 = iota // dial side: peer greeting not read yet
	rReady                 // dial side: peer READY not read yet
	rStream                // frames
)

// Write phases of a guardConn.
const (
	wGreeting uint8 = iota // zmq4's greeting comes next
	wReady                 // zmq4's READY comes next
	wStream                // frames
)

// maxLocalReady bounds the READY zmq4 writes (its own metadata).
const maxLocalReady = 64 << 10

// guardConn is the net.Conn zmq4 runs over. Reads come from one zmq4
// goroutine at a time; writes are serialised by wmu (zmq4 writes one
// connection from several goroutines over its lifetime).
type guardConn struct {
	net.Conn
	br      *bufio.Reader
	cfg     *Config
	ctr     *counters
	remote  string
	server  bool
	release func()

	// Read side.
	replay []byte // validated bytes owed to zmq4
	rphase uint8
	remain int64 // body bytes of the current frame not yet passed on
	frames int   // frames of the current message before this one
	total  int64 // body bytes of those frames
	hdr    [9]byte
	stage  []byte // synthesised bytes (dial-side greeting, translated subscriptions)
	cmd    []byte // command body buffer
	rerr   error
	peer   Metadata
	// last is set while the current frame is its message's last.
	last bool
	// body is the message-body deadline and budget state (transportbody.go).
	body bodyClock
	// done is the bytes of the last complete message, charged to the
	// Budget outside any holder until zmq4 asks for the next message.
	done atomic.Int64

	// Write side, under wmu.
	wmu    sync.Mutex
	wphase uint8
	wbuf   []byte // zmq4's READY while it is being written
	out    outTracker
	werr   error
	// local is the local socket type, learnt from zmq4's READY.
	local atomic.Pointer[SocketType]
	// pong is a PONG frame waiting for a message boundary of zmq4's output.
	pong atomic.Pointer[[]byte]

	// watch closes a listening-side connection whose zmq4 handshake did
	// not complete; opened records that it did.
	watch  *time.Timer
	opened atomic.Bool

	closeOnce sync.Once
}

func newGuardConn(nc net.Conn, br *bufio.Reader, cfg *Config, ctr *counters, server bool) *guardConn {
	g := &guardConn{Conn: nc, br: br, cfg: cfg, ctr: ctr, remote: remoteString(nc), server: server}
	g.body.nc = nc
	return g
}

// Close closes the connection and releases its MaxConns slot.
func (g *guardConn) Close() error {
	// g.watch is set before g is handed to zmq4, so every Close caller
	// sees it; only the watchdog itself uses shut directly.
	if g.watch != nil {
		g.watch.Stop()
	}
	return g.shut()
}

func (g *guardConn) shut() error {
	err := g.Conn.Close()
	g.closeBody()
	g.closeOnce.Do(func() {
		if g.release != nil {
			g.release()
		}
	})
	return err
}

// violate reports v, closes the connection and returns the error zmq4's
// read or write gets: a non-timeout net.Error, so zmq4 marks its connection
// closed and removes it.
func (g *guardConn) violate(op string, err error) error {
	var v *Violation
	if errors.As(err, &v) {
		v.Remote = g.remote
		g.cfg.OnViolation(*v)
	}
	g.Close()
	return &net.OpError{Op: op, Net: "zmtpguard", Source: g.Conn.LocalAddr(), Addr: g.Conn.RemoteAddr(), Err: err}
}

func (g *guardConn) localType() SocketType {
	if p := g.local.Load(); p != nil {
		return *p
	}
	return ""
}

// Read gives zmq4 validated bytes only.
func (g *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(g.replay) > 0 {
			n := copy(p, g.replay)
			g.replay = g.replay[n:]
			return n, nil
		}
		if g.rerr != nil {
			return 0, g.rerr
		}
		switch g.rphase {
		case rGreeting:
			var greet [greetingSize]byte
			if err := readGreeting(g.br, &greet, 0, nil, nil); err != nil {
				g.rerr = g.violate("read", err)
				continue
			}
			g.stage = append(g.stage[:0], greet[:]...)
			g.replay = g.stage
			g.rphase = rReady
		case rReady:
			frame, md, err := readReadyFrame(g.br, g.localType(), g.cfg)
			if err != nil {
				g.rerr = g.violate("read", err)
				continue
			}
			if err := g.Conn.SetDeadline(time.Time{}); err != nil {
				g.rerr = err
				continue
			}
			g.ctr.handshakes.Add(1)
			g.peer = md
			g.replay = frame
			g.rphase = rStream
		default:
			if !g.opened.Load() {
				g.opened.Store(true) // zmq4 has read the whole handshake
				if g.watch != nil {
					g.watch.Stop()
				}
			}
			if g.remain > 0 {
				g.bodyWait(1)
				n, err := g.br.Read(p[:min(int64(len(p)), g.remain)])
				g.remain -= int64(n)
				if err != nil && n == 0 {
					err = g.readErr(err)
					g.rerr = err
					return 0, err
				}
				if g.remain == 0 && g.last {
					g.messageDone()
				}
				return n, err
			}
			if err := g.advance(); err != nil {
				g.rerr = g.readErr(err)
			}
		}
	}
}

// advance handles the next frame header: a data frame's header is checked
// and staged for zmq4 (its body then passes through as it arrives); a
// command is read whole and handled here.
func (g *guardConn) advance() error {
	g.nextMessage()
	var b []byte
	var err error
	if n := g.br.Buffered(); n >= 9 {
		b, _ = g.br.Peek(9) // buffered: never blocks
	} else {
		if g.frames > 0 {
			g.bodyWait(2)
		}
		b, err = g.br.Peek(1)
		if err != nil {
			return err
		}
		b, err = g.br.Peek(headerLen(b[0]))
	}
	hdr, ok, verr := parseFrameHeader(b, g.cfg.MaxMessageSize-g.total)
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) && v.Reason == decodeguard.ReasonOversize {
			v.Detail = "message of " + itoa(g.frames+1) + " frames claims " + formatSize(uint64(g.total)+uint64(v.Length)) +
				" bytes, over MaxMessageSize " + itoa(int(g.cfg.MaxMessageSize))
		}
		return g.violate("read", verr)
	}
	if !ok {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if hdr.Command() {
		if g.frames > 0 {
			return g.violate("read", violation(decodeguard.ReasonTransport, "command frame inside a multipart message", int64(g.frames), b))
		}
		if limit := min(int64(g.cfg.MaxHandshakeSize), g.cfg.MaxMessageSize); hdr.Size > limit {
			return g.violate("read", violation(decodeguard.ReasonOversize,
				"command of "+itoa(int(hdr.Size))+" bytes is over the command limit "+itoa(int(limit)), hdr.Size, b))
		}
		g.br.Discard(hdr.Len)
		if int64(cap(g.cmd)) < hdr.Size {
			g.cmd = make([]byte, hdr.Size) // bounded by the limit above
		}
		body := g.cmd[:hdr.Size]
		if _, err := io.ReadFull(g.br, body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		return g.command(body)
	}
	n := g.frames + 1
	if n > g.cfg.MaxFrames {
		return g.violate("read", violation(decodeguard.ReasonOversize,
			"message has more than MaxFrames="+itoa(g.cfg.MaxFrames)+" frames", int64(n), nil))
	}
	// zmq4 allocates the whole frame when it reads this header: the
	// budget is asked first (it may stall here, before zmq4 sees it).
	if err := g.charge(hdr.Size); err != nil {
		return err
	}
	copy(g.hdr[:], b[:hdr.Len])
	g.br.Discard(hdr.Len)
	g.replay = g.hdr[:hdr.Len]
	g.remain = hdr.Size
	g.last = !hdr.More()
	if hdr.More() {
		g.frames = n
		g.total += hdr.Size
	} else {
		g.frames, g.total = 0, 0
		if hdr.Size == 0 {
			g.messageDone()
		}
	}
	return nil
}

// command handles one command frame body after the handshake.
func (g *guardConn) command(body []byte) error {
	name, data, err := parseCommand(body)
	if err != nil {
		return g.violate("read", err)
	}
	switch string(name) {
	case cmdPing:
		var pingCtx []byte
		if len(data) > 2 {
			pingCtx = data[2:min(len(data), 18)]
		}
		g.queuePong(pingCtx)
		return nil
	case cmdPong:
		return nil
	case cmdSubscribe, cmdCancel:
		if lt := g.localType(); lt != "PUB" && lt != "XPUB" {
			return g.violate("read", violation(decodeguard.ReasonTransport,
				string(name)+" command sent to a "+string(lt)+" socket", int64(len(body)), body))
		}
		// zmq4 knows only ZMTP 3.0 subscriptions: a one-frame message
		// starting with 1 (subscribe) or 0 (cancel).
		op := byte(1)
		if string(name) == cmdCancel {
			op = 0
		}
		g.stage = appendFrameHeader(g.stage[:0], 0, 1+len(data))
		g.stage = append(g.stage, op)
		g.stage = append(g.stage, data...)
		g.replay = g.stage
		return nil
	case cmdError:
		g.Close()
		return io.EOF
	}
	return g.violate("read", violation(decodeguard.ReasonTransport,
		"unknown or misplaced ZMTP command after the handshake", int64(len(body)), body))
}

// appendFrameHeader appends a ZMTP frame header for a body of n bytes.
func appendFrameHeader(b []byte, flags byte, n int) []byte {
	if n > 255 {
		var h [9]byte
		h[0] = flags | flagLong
		putUint64(h[1:], uint64(n))
		return append(b, h[:]...)
	}
	return append(b, flags, byte(n))
}

// queuePong arranges for a PONG echoing ctx to be written at the next
// message boundary of zmq4's output, without ever blocking the reader on a
// writer: if zmq4 is mid-write, the writer sends it when it is done.
func (g *guardConn) queuePong(ctx []byte) {
	frame := appendFrameHeader(nil, flagCommand, 1+len(cmdPong)+len(ctx))
	frame = append(frame, byte(len(cmdPong)))
	frame = append(frame, cmdPong...)
	frame = append(frame, ctx...)
	g.pong.Store(&frame)
	if g.wmu.TryLock() {
		g.flushPongLocked()
		g.wmu.Unlock()
	}
}

// flushPongLocked writes a pending PONG if zmq4's output is at a message
// boundary. wmu must be held.
func (g *guardConn) flushPongLocked() {
	if g.wphase != wStream || g.werr != nil || !g.out.atBoundary() {
		return
	}
	if p := g.pong.Swap(nil); p != nil {
		if _, err := g.Conn.Write(*p); err != nil {
			g.werr = err
		}
	}
}

// Write passes zmq4's output on, except its greeting: on the listening side
// the guard sent its own already, on the dialing side the guard's goes out
// in its place (both announce ZMTP 3.1); zmq4's READY is read for the local
// socket type on its way out.
func (g *guardConn) Write(p []byte) (int, error) {
	n, err := g.write(p)
	// A PONG queued while this write held the lock is sent now (the reader's
	// TryLock failed, so it relies on this check).
	if g.pong.Load() != nil && g.wmu.TryLock() {
		g.flushPongLocked()
		g.wmu.Unlock()
	}
	return n, err
}

func (g *guardConn) write(p []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.werr != nil {
		return 0, g.werr
	}
	switch g.wphase {
	case wGreeting:
		if !bytes.Equal(p, zmq4Greeting[:]) {
			g.werr = errors.New("zmtpguard: zmq4's greeting is not the one the guard replaces (only the NULL mechanism is supported)")
			g.Close()
			return 0, g.werr
		}
		g.wphase = wReady
		if g.server {
			return len(p), nil
		}
		// The guard's greeting goes out in place of zmq4's: ZMTP 3.1, since
		// the guard answers PINGs and converts SUBSCRIBE/CANCEL for zmq4.
		if _, err := g.Conn.Write(localGreeting[:]); err != nil {
			g.werr = err
			g.Close()
			return 0, err
		}
		return len(p), nil
	case wReady:
		return g.writeReady(p)
	}
	n, err := g.Conn.Write(p)
	g.out.track(p[:n])
	if err != nil {
		return n, err
	}
	g.flushPongLocked()
	return n, nil
}

// writeReady collects zmq4's READY command, learns the local socket type
// from it, refuses an incompatible peer, and sends it.
func (g *guardConn) writeReady(p []byte) (int, error) {
	fail := func(err error) (int, error) {
		g.werr = err
		g.Close()
		return 0, err
	}
	if len(g.wbuf)+len(p) > maxLocalReady {
		return fail(errors.New("zmtpguard: zmq4's READY is too large"))
	}
	g.wbuf = append(g.wbuf, p...)
	hdr, ok, err := parseFrameHeader(g.wbuf, maxLocalReady)
	if err != nil || (ok && !hdr.Command()) {
		return fail(errors.New("zmtpguard: zmq4 did not write a READY command"))
	}
	if !ok || int64(len(g.wbuf)) < int64(hdr.Len)+hdr.Size {
		return len(p), nil // the rest of the frame is still to come
	}
	end := hdr.Len + int(hdr.Size)
	name, props, err := parseCommand(g.wbuf[hdr.Len:end])
	if err != nil || string(name) != cmdReady {
		return fail(errors.New("zmtpguard: zmq4 did not write a READY command"))
	}
	own, err := parseReady(props, "", g.cfg)
	if err != nil {
		return fail(errors.New("zmtpguard: zmq4's own READY metadata is not valid"))
	}
	lt := own.SocketType
	g.local.Store(&lt)
	if g.server && !compatible(lt, g.peer.SocketType) {
		v := violation(decodeguard.ReasonHandshake,
			"peer socket type "+string(g.peer.SocketType)+" is not compatible with "+string(lt), -1, nil)
		err := g.violate("write", v)
		g.werr = err
		return 0, err
	}
	if _, err := g.Conn.Write(g.wbuf[:end]); err != nil {
		return fail(err)
	}
	rest := g.wbuf[end:]
	g.wphase = wStream
	if g.server {
		if err := g.Conn.SetWriteDeadline(time.Time{}); err != nil {
			return fail(err)
		}
	}
	if len(rest) > 0 {
		if _, err := g.Conn.Write(rest); err != nil {
			return fail(err)
		}
		g.out.track(rest)
	}
	g.wbuf = nil
	return len(p), nil
}

// outTracker follows the frame structure of zmq4's output (trusted bytes)
// to know when a PONG may be inserted between two messages.
type outTracker struct {
	hdr    [9]byte
	hn     int   // header bytes seen of the frame being started
	remain int64 // body bytes of the current frame still to come
	more   bool  // the last complete header had MORE set
}

func (o *outTracker) atBoundary() bool { return o.hn == 0 && o.remain == 0 && !o.more }

func (o *outTracker) track(b []byte) {
	for len(b) > 0 {
		if o.remain > 0 {
			n := min(int64(len(b)), o.remain)
			o.remain -= n
			b = b[n:]
			continue
		}
		if o.hn == 0 {
			o.hdr[0] = b[0]
			o.hn = 1
			b = b[1:]
		}
		need := headerLen(o.hdr[0])
		k := copy(o.hdr[o.hn:need], b)
		o.hn += k
		b = b[k:]
		if o.hn < need {
			return
		}
		if need == 2 {
			o.remain = int64(o.hdr[1])
		} else {
			o.remain = int64(uint64(o.hdr[1])<<56 | uint64(o.hdr[2])<<48 | uint64(o.hdr[3])<<40 | uint64(o.hdr[4])<<32 |
				uint64(o.hdr[5])<<24 | uint64(o.hdr[6])<<16 | uint64(o.hdr[7])<<8 | uint64(o.hdr[8]))
		}
		o.more = o.hdr[0]&flagMore != 0
		o.hn = 0
	}
}
