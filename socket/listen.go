package socket

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// listener is one bound endpoint: a zmtpguard.Listener (accept back-off,
// caps, allowlist, handshakes in their own goroutines under a deadline) and
// the goroutine that turns its connections into peers.
type listener struct {
	s        *Socket
	gl       *zmtpguard.Listener
	ln       net.Listener // the OS listener gl accepts from
	addr     net.Addr     // the OS listener's address
	endpoint string
}

// Bind listens on endpoint ("tcp://host:port", host "*" for every
// interface and port 0 for a free port; or "ipc://path") and accepts peers
// in the background. Every connection goes through zmtpguard: a peer that
// stalls, speaks another protocol or breaks ZMTP is refused without
// affecting anyone else. The bound address is then given by Addr/Endpoint.
// A stale ipc socket file (nobody listening) is replaced.
func (s *Socket) Bind(endpoint string) error {
	ep, err := parseEndpoint(endpoint, true)
	if err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	ln, err := listenNet(ep)
	if err != nil {
		return err
	}
	text := endpointString(ln.Addr())
	if ep.network == "unix" {
		ln = &ipcNamer{Listener: ln, path: ep.address}
	} else {
		ln = &keepAliveListener{Listener: ln, cfg: s.opts.TCPKeepAlive}
	}
	cfg := s.guard
	cfg.OnViolation = s.violationHook(true, text)
	gl, err := zmtpguard.NewListener(ln, s.typ, &cfg)
	if err != nil {
		return err
	}
	l := &listener{s: s, gl: gl, ln: ln, addr: ln.Addr(), endpoint: text}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		gl.Close()
		return ErrClosed
	}
	s.listeners = append(s.listeners, l)
	s.wg.Add(1)
	s.mu.Unlock()
	go l.run()
	return nil
}

func (l *listener) run() {
	s := l.s
	defer s.wg.Done()
	for {
		c, err := l.gl.Accept(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log(decodeguard.ReasonNone, slogError, "zmqguard socket listener stopped", "endpoint", l.endpoint, "err", err.Error())
			}
			return
		}
		s.addPeer(c, l.endpoint, true, nil)
	}
}

func (l *listener) close() { l.gl.Close() }

// listenNet opens the OS listener, replacing a stale unix socket file.
func listenNet(ep endpoint) (net.Listener, error) {
	ln, err := net.Listen(ep.network, ep.address)
	if err == nil || ep.network != "unix" || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	fi, serr := os.Lstat(ep.address)
	if serr != nil || fi.Mode()&os.ModeSocket == 0 {
		return nil, err
	}
	if c, derr := net.DialTimeout("unix", ep.address, 200*time.Millisecond); derr == nil {
		c.Close()
		return nil, err // somebody is listening there
	}
	os.Remove(ep.address)
	return net.Listen(ep.network, ep.address)
}

// ipcNamer gives every accepted unix connection a distinct remote name
// ("path#n"): unix peers are otherwise all unnamed, and events, logs and
// Peer.String need to tell them apart.
type ipcNamer struct {
	net.Listener
	path string
	n    atomic.Uint64
}

func (l *ipcNamer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	name := l.path + "#" + strconv.FormatUint(l.n.Add(1), 10)
	return &namedConn{Conn: c, remote: &net.UnixAddr{Name: name, Net: "unix"}}, nil
}

type namedConn struct {
	net.Conn
	remote net.Addr
}

func (c *namedConn) RemoteAddr() net.Addr { return c.remote }

// violationHook returns the zmtpguard OnViolation hook of a listener
// (accepted=true) or a dialer: it counts every violation once, calls the
// user's hook, and for a listener reports refusals and failed handshakes as
// events (violations on established peers are reported by their disconnect).
func (s *Socket) violationHook(accepted bool, endpoint string) func(zmtpguard.Violation) {
	user := s.guard.OnViolation
	return func(v zmtpguard.Violation) {
		if v.Reason.Valid() {
			s.viol[v.Reason].Add(1)
		}
		if user != nil {
			user(v)
		}
		if !accepted {
			return
		}
		s.mu.RLock()
		established := s.estab[v.Remote] > 0
		s.mu.RUnlock()
		if established {
			return
		}
		vv := v
		kind := EventHandshakeFailed
		if v.Reason == decodeguard.ReasonPolicy {
			kind = EventRejected
		}
		s.emit(Event{Kind: kind, Remote: v.Remote, Endpoint: endpoint, Err: &vv, Reason: v.Reason})
	}
}

// Dial connects to endpoint ("tcp://host:port" or "ipc://path") in the
// background and returns at once (an error only for a malformed endpoint or
// a closed socket). The connection is retried after ReconnectMin, doubling
// up to ReconnectMax after each failure, each wait spread by
// ReconnectJitter, and re-established the same way whenever it is lost (a
// heartbeat timeout included); SUB and XSUB re-send their subscriptions on
// every new connection. Each attempt (connect and guarded handshake) is bounded by
// twice the handshake timeout.
func (s *Socket) Dial(endpoint string) error {
	ep, err := parseEndpoint(endpoint, false)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go s.dialLoop(ep, endpoint)
	return nil
}

func (s *Socket) dialLoop(ep endpoint, text string) {
	defer s.wg.Done()
	cfg := s.guard
	cfg.OnViolation = s.violationHook(false, text)
	delay := s.opts.ReconnectMin
	dialer := s.dialer()
	backoff := func() bool {
		ok := s.sleep(s.jittered(delay))
		delay = min(2*delay, s.opts.ReconnectMax)
		return ok
	}
	for s.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(s.ctx, 2*cfg.HandshakeTimeout)
		cfg.Dialer = dialer
		c, err := zmtpguard.Dial(ctx, ep.network, ep.address, s.typ, s.opts.Identity, &cfg)
		cancel()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var v *zmtpguard.Violation
			kind := EventDialFailed
			if errors.As(err, &v) {
				kind = EventHandshakeFailed
			}
			s.emit(Event{Kind: kind, Remote: ep.address, Endpoint: text, Err: err})
			if !backoff() {
				return
			}
			continue
		}
		gone := make(chan struct{})
		if _, err := s.addPeer(c, text, false, func() { close(gone) }); err != nil {
			if !backoff() {
				return
			}
			continue
		}
		delay = s.opts.ReconnectMin
		select {
		case <-gone:
		case <-s.ctx.Done():
			return
		}
		if !s.sleep(s.jittered(s.opts.ReconnectMin)) {
			return
		}
	}
}

// sleep waits d or until the socket closes; it reports whether d passed.
func (s *Socket) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}
