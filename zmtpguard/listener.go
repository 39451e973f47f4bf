package zmtpguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
)

// errListenerClosed is returned by [Listener.Accept] after [Listener.Close];
// it wraps net.ErrClosed, which callers test for.
var errListenerClosed = fmt.Errorf("zmtpguard: listener closed: %w", net.ErrClosed)

// Listener accepts ZMTP connections and hands out only those whose guarded
// handshake completed.
//
// One goroutine accepts from the OS listener; a failed accept is retried
// after a back-off (5 ms doubling to 1 s, reset by a success) so descriptor
// exhaustion never spins a CPU. Each connection is checked against the
// source allowlist, MaxConnsPerHost and MaxConns at once — a refused one is
// closed immediately and counted as a policy violation; when MaxConns is
// reached, an idle connection, or one of a host over its fair share, may be
// closed for it instead, never one that works within its host's share
// (Stats.ConnsEvicted; see [Config.MaxConns] for the rule) — and then runs its
// handshake in its own goroutine (greeting under GreetingTimeout, the whole
// handshake under HandshakeTimeout), so a stalled peer never delays anyone
// else. When MaxPendingHandshakes handshakes are already in progress, the
// new connection is still admitted and the oldest pending handshake of the
// source host with the most pending ones is aborted instead (a policy
// violation, counted in Stats.Evicted): idle connections from one host
// cannot lock other hosts out (see [Config.MaxPendingHandshakes]).
//
// Connections returned by Accept count against MaxConns until their Close
// is called: the caller must Close every Conn it accepts, also after the peer
// went away.
type Listener struct {
	local SocketType
	cfg   Config
	ctr   counters
	loop  *acceptLoop[*Conn]
}

func checkListenArgs(local SocketType, cfg *Config) error {
	if err := validType(local); err != nil {
		return err
	}
	if cfg != nil {
		if err := cfg.Verify(); err != nil {
			return err
		}
	}
	return nil
}

// NewListener guards ln (from net.Listen: network "tcp", "tcp4", "tcp6" or
// "unix"), which it takes over: closing the Listener closes ln, and ln.Addr
// is the Listener's address. It accepts for a local socket of type local,
// under cfg's limits (nil means defaults). On error ln is closed.
func NewListener(ln net.Listener, local SocketType, cfg *Config) (*Listener, error) {
	l, err := newListener(ln, local, cfg)
	if err != nil {
		return nil, err
	}
	l.loop.start()
	return l, nil
}

// newListener builds a Listener without starting it (tests adjust the loop).
func newListener(ln net.Listener, local SocketType, cfg *Config) (*Listener, error) {
	if err := checkListenArgs(local, cfg); err != nil {
		ln.Close()
		return nil, err
	}
	l := &Listener{local: local}
	l.cfg = countingConfig(cfg, &l.ctr)
	hs := func(ctx context.Context, nc net.Conn, release func(), work *atomic.Uint32) (*Conn, error) {
		// The loop reports the violation (unless it evicted nc).
		c, err := handshake(ctx, nc, local, nil, &l.cfg, true)
		if err != nil {
			return nil, err
		}
		c.onClose = release
		c.work = work
		return c, nil
	}
	l.loop = newAcceptLoop(ln, &l.cfg, &l.ctr, hs, func(c *Conn) { c.Close() })
	return l, nil
}

// Accept waits for the next connection whose handshake completed. It
// returns an error wrapping net.ErrClosed after Close, ctx's error when
// ctx ends first, and the OS listener's error if that listener was closed
// from outside.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	if l.loop.isClosed() {
		return nil, errListenerClosed
	}
	select {
	case c := <-l.loop.ready:
		return c, nil
	case <-l.loop.done:
		return nil, errListenerClosed
	case <-l.loop.stopped:
		if l.loop.isClosed() {
			return nil, errListenerClosed
		}
		// Handshakes started before the OS listener failed may still finish.
		select {
		case c := <-l.loop.ready:
			return c, nil
		default:
		}
		return nil, l.loop.stopErr()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting, closes the OS listener, aborts pending handshakes,
// closes finished connections not yet accepted, and waits for all of the
// Listener's goroutines. Connections already returned by Accept stay open.
func (l *Listener) Close() error {
	err := l.loop.close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Stats returns a snapshot of the Listener's counters. Refusals on
// accepted connections (oversize frames, ...) are included.
func (l *Listener) Stats() Stats { return l.ctr.snapshot() }

// Dial connects to addr on the named network (through cfg.Dialer when set)
// and runs the guarded handshake for a local socket of type local with the
// given identity (nil for none), under cfg's limits (nil means defaults).
// ctx bounds the connect and the handshake (which HandshakeTimeout bounds
// as well). GreetingTimeout does not apply: the wait for the server's
// greeting includes its accept latency.
func Dial(ctx context.Context, network, addr string, local SocketType, identity []byte, cfg *Config) (*Conn, error) {
	if err := checkListenArgs(local, cfg); err != nil {
		return nil, err
	}
	d := &net.Dialer{}
	if cfg != nil && cfg.Dialer != nil {
		d = cfg.Dialer
	}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return reportedHandshake(ctx, nc, local, identity, cfg, false)
}
