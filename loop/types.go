package loop

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/socket"
)

// This file holds what a Loop hands out: deliveries, drops, errors and
// stats.

// The pipeline stages, in order: the values of Drop.Stage and Error.Stage.
const (
	stageReceive  = "receive"  // the Receiver's Recv
	stageEnvelope = "envelope" // envelope.Parse (Config.Envelope)
	stageDecode   = "decode"   // Config.Decode
	stageValidate = "validate" // Config.Validate
	stageHandler  = "handler"  // Config.Handler, or the Deliver consumer
)

// Error is a failure that ended, or was offered to Config.OnError by, a
// Loop: which loop, at which stage, for a message from which peer, and the
// cause. Its text never contains raw peer bytes from this package; the
// cause's text is escaped and capped.
type Error struct {
	Loop string
	// Stage is where the error arose: "receive", "envelope", "decode",
	// "validate" or "handler".
	Stage string
	// Peer is the sending peer's address ("" if unknown).
	Peer string
	Err  error
}

// Error implements error.
func (e *Error) Error() string {
	s := "loop " + e.Loop + ": " + e.Stage
	if e.Loop == "" || e.Loop == "loop" {
		s = "loop: " + e.Stage // not "loop loop:"
	}
	if e.Peer != "" {
		s += " (peer " + ratelog.Escape(e.Peer, 128) + ")"
	}
	// The cause's own "loop: " prefix (errReceiverClosed and the like)
	// would repeat the one above.
	return s + ": " + strings.TrimPrefix(errText(e.Err), "loop: ")
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// handlerPanicError is the error a handler panic becomes under
// Config.RecoverHandlerPanics.
type handlerPanicError struct {
	Value any    // what the handler passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

// Error implements error.
func (p *handlerPanicError) Error() string {
	return "handler panicked: " + ratelog.Escape(anyText(p.Value), maxErrText)
}

// Unwrap returns the panic value if it is an error.
func (p *handlerPanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

func anyText(v any) string {
	switch v := v.(type) {
	case error:
		return v.Error()
	case string:
		return v
	}
	return fmt.Sprint(v)
}

// Delivery is one valid message, decoded. Everything in it is valid only
// until the handler returns (Run), Done is called (Deliver) or the next
// call (Next): see the package documentation on aliasing.
type Delivery[T any] struct {
	// Msg is the message as received: all its frames, and the peer
	// (Msg.Peer, nil if the receiver does not say).
	Msg socket.Msg
	// Envelope is the parsed routing envelope when Config.Envelope is set
	// (reply with Envelope.Reply), nil otherwise.
	Envelope *envelope.Envelope
	// Value is the decoded value, owned and reused by the Loop.
	Value *T

	ack *ack
	seq uint64
}

// Done tells a loop running [Loop.Deliver] that the consumer has finished
// with this delivery, so the loop may receive the next message (which
// reuses the frames and the value). Done is safe to call more than once and
// on deliveries from Run or Next, where it does nothing.
func (d Delivery[T]) Done() {
	if d.ack != nil {
		d.ack.done(d.seq)
	}
}

// ack is the hand-back of Deliver: the consumer raises done to the
// delivery's sequence number and wakes the loop.
type ack struct {
	seq  uint64 // last sequence number sent; used by the loop goroutine only
	acks atomic.Uint64
	wake chan struct{}
}

func (a *ack) done(seq uint64) {
	for {
		cur := a.acks.Load()
		if cur >= seq || a.acks.CompareAndSwap(cur, seq) {
			break
		}
	}
	select {
	case a.wake <- struct{}{}:
	default: // a wake-up is already pending; the loop rereads acks
	}
}

func (a *ack) wait(ctx context.Context, seq uint64) error {
	for a.acks.Load() < seq {
		select {
		case <-a.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Drop describes one dropped message, as given to Config.OnDrop.
type Drop struct {
	// Loop is the loop's Config.Name.
	Loop string
	// Reason is why the message was dropped.
	Reason decodeguard.Reason
	// Stage is where it was dropped: "receive", "envelope", "decode",
	// "validate" or "handler".
	Stage string
	// Peer is the sending peer (nil if the receiver does not say).
	Peer *socket.Peer
	// Frames is the message's frame count, Length its total size in bytes.
	Frames int
	Length int
	// Prefix is at most 32 leading bytes of the message's last frame. It
	// aliases the frame: valid only during the OnDrop call, and raw peer
	// bytes: log it as hex (encoding/hex), never as text.
	Prefix []byte
	// Err is the classified error, a *decodeguard.Error in its chain.
	Err error
	// Time is when the drop happened (Config.Now).
	Time time.Time

	lastLen int
}

// Stats is a snapshot of a Loop's counters. It marshals to JSON as an
// object of named counters (Dropped and Refused as objects keyed by reason
// name), the project's one stats vocabulary.
type Stats struct {
	// Received counts messages the Receiver returned.
	Received uint64 `json:"received"`
	// Delivered counts messages that passed every check and were handed to
	// the handler, the Deliver channel or Next's caller.
	Delivered uint64 `json:"delivered"`
	// Dropped counts drops by reason (index decodeguard.Reason); it
	// includes messages the Receiver refused itself and handler drops.
	Dropped decodeguard.Counts `json:"dropped"`
	// Refused counts, by reason, what the socket under the loop refused
	// before a message reached the loop: connections that failed their
	// handshake or broke a policy, connections closed for an oversize or
	// malformed message (its Stats().Violations). It is filled only when
	// the Receiver has Stats() socket.Stats (a *socket.Socket does, see
	// Receiver); for a zmq4 socket on the guarded
	// transport, the refusals are in the stats zmtpguard.RegisterTransport
	// returned.
	Refused decodeguard.Counts `json:"refused"`
	// HandlerErrors counts unclassified handler errors and handler panics.
	HandlerErrors uint64 `json:"handler_errors"`
	// LastDrop is the time of the latest drop, the zero Time if none.
	LastDrop time.Time `json:"last_drop,omitzero"`
}
