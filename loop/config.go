package loop

import (
	"context"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/envelope"
)

// Config configures a Loop. Decode is required, and Handler for Run.
type Config[T any] struct {
	// Name identifies the loop in logs, errors and Drop. Empty means
	// "loop".
	Name string
	// Logger receives the drop lines; nil means slog.Default(). Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
	// LogInterval is the shortest time between two summary lines of one
	// reason. Zero means 1 s; a negative value is an error.
	LogInterval time.Duration

	// Envelope, when set, makes this a ROUTER loop: every message is
	// checked by envelope.Parse with these options, the decoder sees the
	// body frames, and Delivery.Envelope carries the identity to reply to.
	Envelope *envelope.Options
	// Decode decodes the body frames into the loop's reused value. See
	// MsgpDecoder, UntypedDecoder and RawDecoder.
	Decode Decoder[T]
	// MaxMessageSize is the largest message, all frames together, that
	// reaches Decode; a longer one is dropped as decodeguard.ReasonOversize.
	// Zero means the Receiver's own limit when it is a *socket.Socket (its
	// Options().Guard.MaxMessageSize: one size from the socket to the
	// decoder), else 1 MiB. New refuses a
	// value above a socket's limit, which would never see such a message.
	// The helper decoders take this limit when their Limits.MaxBytes is 0.
	MaxMessageSize int64
	// Validate, if set, checks a decoded value. An error that is not
	// already classified is counted as decodeguard.ReasonValidate.
	Validate func(*T) error
	// Handler is called by Run for each valid message, in Run's goroutine.
	// A nil return goes on; a classified error drops the message under its
	// reason; any other error ends Run (see OnError).
	//
	// The Handler, OnDrop, OnError, Validate and the Decoder all run in
	// the goroutine of Run (or Deliver, or Next), holding no lock of the
	// Loop: each may call the Loop's Stats, Name and Close (Close never
	// waits; Run then returns ErrLoopClosed once the callback has
	// returned). Run, Deliver or Next called on the same Loop from inside
	// returns errBusy; none of them may wait for Run to return (Run waits
	// for them).
	Handler func(ctx context.Context, d Delivery[T]) error

	// OnDrop, if set, is called synchronously for every drop, after the
	// counters are updated: feed metrics from it. It must not block. It may
	// call Stats and Close (see Handler).
	OnDrop func(Drop)
	// OnError, if set, is called with every error that would end Run (an
	// *Error), except the end of the context, Close and a closed receiver
	// (net.ErrClosed or socket.ErrClosed). Returning nil drops that message
	// and goes on; returning an error ends Run with it. Beware of returning
	// nil for a receive error that repeats: the loop would spin on it. It
	// may call Stats and Close (see Handler).
	OnError func(error) error
	// RecoverHandlerPanics turns a handler panic into a handler error
	// (its text "handler panicked: " and the panic value, escaped; it
	// unwraps to the value when that is an error), treated as any handler
	// error, instead of letting the panic propagate out of Run.
	RecoverHandlerPanics bool
	// PropagateDecoderPanics lets a panic in Decode or Validate propagate
	// instead of being recovered and counted as
	// decodeguard.ReasonDecoderPanic. (The helper decoders recover panics
	// of msgp code themselves either way.)
	PropagateDecoderPanics bool

	// Now is the clock for drop times and log rate limiting; nil means
	// time.Now. Tests inject a fake clock here.
	Now func() time.Time
}
