package loop

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
	"github.com/zmqguard/zmqguard/socket"
)

// Receiver is what a Loop receives from: zmqguard's *socket.Socket
// satisfies it, [FromZMQ4] adapts any zmq4.Socket, and tests can feed a
// Loop from a channel.
//
// Recv blocks until a message arrives or ctx ends. It returns ctx's error
// when ctx ends, an error matching net.ErrClosed or socket.ErrClosed once
// the receiver is closed (the Loop then stops), a classified *decodeguard.Error when the receiver
// itself refused a message or lost one peer's connection (counted as a
// drop), or another error, which surfaces from Run. The frames of the returned message may be reused by
// the next Recv.
type Receiver interface {
	Recv(ctx context.Context) (socket.Msg, error)
}

// errReceiverClosed is returned by a zmq4Receiver once it, or the zmq4
// socket under it, is closed. It wraps net.ErrClosed.
var errReceiverClosed = fmt.Errorf("loop: receiver closed: %w", net.ErrClosed)

// zmq4Receiver adapts a zmq4.Socket to [Receiver]; see [FromZMQ4].
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

// disconnects returns how many times a peer of the zmq4 socket closed its
// connection cleanly (zmq4 reported io.EOF). Those are not drops.
func (r *zmq4Receiver) disconnectCount() uint64 { return r.disconnects.Load() }

// FromZMQ4 returns a Receiver that reads from the zmq4 socket s. The
// Receiver is also an io.Closer whose Close closes s.
//
// zmq4's Recv takes no context and has no timeout: the only way to unblock
// it is to close the socket. So when the context of a Recv is cancelled
// while that Recv is blocked in zmq4, the Receiver closes the zmq4
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
// adapter never returns them as fatal: a clean disconnect (io.EOF) is
// counted (not as a drop) and Recv goes on receiving; any
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
// zmqguard's socket package (docs/migrating-from-zmq4.md shows both).
func FromZMQ4(s zmq4.Socket) Receiver {
	return &zmq4Receiver{s: s}
}

// Recv receives the next message from the zmq4 socket. It returns ctx's
// error if ctx is done, and closes the socket if ctx is cancelled while Recv
// is blocked.
func (r *zmq4Receiver) Recv(ctx context.Context) (socket.Msg, error) {
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
var errDisconnect = errors.New("loop: zmq4 peer disconnected")

func (r *zmq4Receiver) recvOnce(ctx context.Context) (socket.Msg, error) {
	r.mu.Lock()
	if err := ctx.Err(); err != nil {
		r.mu.Unlock()
		return socket.Msg{}, err
	}
	if r.closed {
		r.mu.Unlock()
		return socket.Msg{}, errReceiverClosed
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
		return socket.Msg{Frames: m.Frames}, nil
	}
	if cerr := ctx.Err(); cerr != nil {
		// The watcher is closing the socket: wait until it has, so that
		// no goroutine of ours outlives the caller's shutdown.
		if closed {
			_ = r.Close()
		}
		return socket.Msg{}, cerr
	}
	switch {
	case closed, err == nil, errors.Is(err, context.Canceled):
		// zmq4 fails Recv with its own context's error after Close, and
		// some socket types return (Msg{}, nil) forever instead.
		return socket.Msg{}, errReceiverClosed
	case errors.Is(err, io.EOF):
		return socket.Msg{}, errDisconnect
	}
	// One connection failed (reset, truncated frame, a violation of the
	// guarded transport): zmq4 drops that connection and keeps the others.
	return socket.Msg{}, &decodeguard.Error{
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

// Close closes the zmq4 socket and makes every later Recv return
// [errReceiverClosed]. It is safe to call more than once and concurrently
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
