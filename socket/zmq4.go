package socket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// The zmq4 bridge, receiving side: a go-zeromq/zmq4 socket read as a
// receiver (zmtpguard's transport*.go is the other half, under zmq4).

// errReceiverClosed is returned by a zmq4Receiver once it, or the zmq4
// socket under it, is closed. It wraps net.ErrClosed.
var errReceiverClosed = fmt.Errorf("socket: zmq4 receiver closed: %w", net.ErrClosed)

// zmq4Receiver reads from a go-zeromq/zmq4 socket; see [FromZMQ4]. Its
// methods are safe for concurrent use.
type zmq4Receiver struct {
	s zmq4.Socket

	mu        sync.Mutex
	closed    bool
	inRecv    bool            // a Recv is blocked in zmq4
	recvDone  <-chan struct{} // the Done channel of that Recv's context
	watchDone <-chan struct{}
	stopWatch func() bool
	closeErr  error
	closeOnce sync.Once

	disconnects atomic.Uint64
}

// disconnectCount returns how many times a peer of the zmq4 socket closed its
// connection cleanly (zmq4 reported io.EOF). Those are not drops.
func (r *zmq4Receiver) disconnectCount() uint64 { return r.disconnects.Load() }

// FromZMQ4 returns a receiver that reads from the zmq4 socket s, for
// loop.New (it has loop.Receiver's Recv) or for reading directly. Its
// methods are safe for concurrent use; Close closes s and makes every later
// Recv return an error matching net.ErrClosed. It is the bridge from zmq4's socket layer, with the guarded
// transport of zmtpguard.RegisterTransport under it, to the rest of
// zmqguard: package loop itself does not import zmq4.
//
// zmq4's Recv takes no context and has no timeout: the only way to unblock
// it is to close the socket. So when the context of a Recv is cancelled
// while that Recv is blocked in zmq4, the receiver closes the zmq4
// socket, and returns an error matching net.ErrClosed for good afterwards. A context
// cancelled while no Recv is in progress closes nothing. Cancelling a
// running Loop's context, or calling Loop.Close, thus closes a zmq4 socket
// under it: do not reuse the socket afterwards, and do not give Recv a
// short-lived context (such as a per-call timeout) unless closing the
// socket is what you want. (It watches one context at a time through
// context.AfterFunc, registered once per context rather than per message.)
//
// zmq4 reports neither the sending peer nor a per-message error for
// malformed input, so messages carry a nil Peer, and a ROUTER's identity is
// Frames[0].
//
// zmq4 reports every connection's read error through the socket's Recv:
// a peer that disconnects (EOF), a TCP reset, a frame the guarded
// transport refused. Those end one connection, not the socket, so the
// adapter never returns them as fatal: after a clean disconnect (io.EOF)
// Recv goes on receiving (it is not a drop); any
// other per-connection error is returned as a *decodeguard.Error with
// decodeguard.ReasonTransport, which a Loop counts as a drop (zmq4 closes
// that connection; the others keep delivering). After Close, zmq4 sockets either fail Recv with a context
// error or (XPUB) return an empty message with no error; both read as
// net.ErrClosed here. The adapter starts no goroutine except the short
// one context.AfterFunc runs when a watched context ends.
//
// zmq4's own socket layer is not hardened (see docs/zmq4-findings.md in the
// repository): a frame header claiming 2^40 bytes still reaches zmq4's
// allocator unless the socket listens on a guarded transport. Bind it on
// the "zmqguard://" scheme after zmtpguard.RegisterTransport, or switch to
// this package's Socket (docs/migrating-from-zmq4.md shows both).
func FromZMQ4(s zmq4.Socket) interface {
	Recv(ctx context.Context) (Msg, error)
	Close() error
} {
	return &zmq4Receiver{s: s}
}

// Recv receives the next message from the zmq4 socket. It returns ctx's
// error if ctx is done, and closes the socket if ctx is cancelled while Recv
// is blocked.
func (r *zmq4Receiver) Recv(ctx context.Context) (Msg, error) {
	for {
		m, err := r.recvOnce(ctx)
		if errors.Is(err, errDisconnect) {
			r.disconnects.Add(1)
			continue
		}
		return m, err
	}
}

// errDisconnect is recvOnce's signal that one peer disconnected cleanly.
var errDisconnect = errors.New("socket: zmq4 peer disconnected")

func (r *zmq4Receiver) recvOnce(ctx context.Context) (Msg, error) {
	r.mu.Lock()
	if err := ctx.Err(); err != nil {
		r.mu.Unlock()
		return Msg{}, err
	}
	if r.closed {
		r.mu.Unlock()
		return Msg{}, errReceiverClosed
	}
	if d := ctx.Done(); d != nil && d != r.watchDone {
		if r.stopWatch != nil {
			r.stopWatch()
		}
		r.watchDone = d
		r.stopWatch = context.AfterFunc(ctx, func() { r.cancelled(d) })
	}
	r.inRecv, r.recvDone = true, ctx.Done()
	r.mu.Unlock()

	m, err := r.s.Recv()

	r.mu.Lock()
	r.inRecv, r.recvDone = false, nil
	closed := r.closed
	r.mu.Unlock()
	if err == nil && len(m.Frames) > 0 {
		return Msg{Frames: m.Frames}, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The watcher is closing the socket: wait until it has, so that
		// no goroutine of ours outlives the caller's shutdown.
		if closed {
			_ = r.Close()
		}
		return Msg{}, cerr
	}
	switch {
	case closed, err == nil, errors.Is(err, context.Canceled):
		// zmq4 fails Recv with its own context's error after Close, and
		// some socket types return (Msg{}, nil) forever instead.
		return Msg{}, errReceiverClosed
	case errors.Is(err, io.EOF):
		return Msg{}, errDisconnect
	}
	// One connection failed (reset, truncated frame, a violation of the
	// guarded transport): zmq4 drops that connection and keeps the others.
	return Msg{}, &decodeguard.Error{
		Reason: decodeguard.ReasonTransport,
		Detail: "zmq4 connection failed",
		Offset: -1,
		Err:    err,
	}
}

// cancelled runs when the watched context whose Done channel is d ends:
// it closes the socket if a Recv with that context is blocked in zmq4 (not
// if another context's Recv is: the callback runs asynchronously).
func (r *zmq4Receiver) cancelled(d <-chan struct{}) {
	r.mu.Lock()
	if r.watchDone == d {
		r.watchDone, r.stopWatch = nil, nil
	}
	interrupt := r.inRecv && r.recvDone == d
	if interrupt {
		r.closed = true
	}
	r.mu.Unlock()
	if interrupt {
		_ = r.Close()
	}
}

// Close closes the zmq4 socket and makes every later Recv return an error
// matching net.ErrClosed. It is safe to call more than once and concurrently
// with Recv, which it unblocks.
func (r *zmq4Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	stop := r.stopWatch
	r.stopWatch, r.watchDone = nil, nil
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	r.closeOnce.Do(func() { r.closeErr = r.s.Close() })
	return r.closeErr
}
