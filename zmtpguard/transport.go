package zmtpguard

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
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
func (t *guardTransport) prevalidate(ctx context.Context, nc net.Conn, release func(), work *atomic.Uint32) (*guardConn, error) {
	cfg := &t.cfg
	remote := remoteString(nc)
	fail := func(err error) (*guardConn, error) { return nil, handshakeFailed(ctx, nc, remote, err) }
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
	g.work = work
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
