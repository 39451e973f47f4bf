package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/socket"
)

// ErrLoopClosed is returned by Run, Deliver and Next after [Loop.Close], like
// net/http's ErrServerClosed.
var ErrLoopClosed = errors.New("loop: closed")

// ErrBusy is returned by Run, Deliver and Next when one of them is already
// running on the same Loop: a Loop has a single receiving goroutine.
var ErrBusy = errors.New("loop: Run, Deliver or Next already in progress")

// errStopped is the internal signal that the context ended.
var errStopped = errors.New("loop: context done")

// Stage is where in the pipeline a message was dropped or an error arose.
type Stage uint8

// The pipeline stages, in order.
const (
	StageReceive  Stage = iota + 1 // the Receiver's Recv
	StageEnvelope                  // envelope.Parse (Config.Envelope)
	StageDecode                    // Config.Decode
	StageValidate                  // Config.Validate
	StageHandler                   // Config.Handler, or the Deliver consumer
)

var stageNames = [...]string{"", "receive", "envelope", "decode", "validate", "handler"}

// String returns the stage's lower-case name.
func (s Stage) String() string {
	if int(s) < len(stageNames) && s != 0 {
		return stageNames[s]
	}
	return "unknown"
}

// Error is a failure that ended, or was offered to Config.OnError by, a
// Loop: which loop, at which stage, for a message from which peer, and the
// cause. Its text never contains raw peer bytes from this package; the
// cause's text is escaped and capped.
type Error struct {
	Loop  string
	Stage Stage
	// Peer is the sending peer's address ("" if unknown).
	Peer string
	Err  error
}

// Error implements error.
func (e *Error) Error() string {
	s := "loop " + e.Loop + ": " + e.Stage.String()
	if e.Loop == "" || e.Loop == "loop" {
		s = "loop: " + e.Stage.String() // not "loop loop:"
	}
	if e.Peer != "" {
		s += " (peer " + decodeguard.EscapeText(e.Peer, 128) + ")"
	}
	// The cause's own "loop: " prefix (ErrReceiverClosed and the like)
	// would repeat the one above.
	return s + ": " + strings.TrimPrefix(errText(e.Err), "loop: ")
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// HandlerPanicError is the error a handler panic becomes under
// Config.RecoverHandlerPanics.
type HandlerPanicError struct {
	Value any    // what the handler passed to panic
	Stack []byte // the handler goroutine's stack at the panic
}

// Error implements error.
func (p *HandlerPanicError) Error() string {
	return "handler panicked: " + decodeguard.EscapeText(anyText(p.Value), maxErrText)
}

// Unwrap returns the panic value if it is an error.
func (p *HandlerPanicError) Unwrap() error {
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
	// Msg is the message as received: all its frames, and the peer.
	Msg socket.Msg
	// Envelope is the parsed routing envelope when Config.Envelope is set
	// (reply with Envelope.Reply), nil otherwise.
	Envelope *envelope.Envelope
	// Value is the decoded value, owned and reused by the Loop.
	Value *T

	ack *ack
	seq uint64
}

// Body returns the frames the decoder saw: Envelope.Body when
// Config.Envelope is set, else Msg.Frames.
func (d Delivery[T]) Body() [][]byte {
	if d.Envelope != nil {
		return d.Envelope.Body
	}
	return d.Msg.Frames
}

// Peer returns the peer the message came from (nil if the receiver does not
// say).
func (d Delivery[T]) Peer() *socket.Peer { return d.Msg.Peer }

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
	// Stage is where it was dropped.
	Stage Stage
	// Peer is the sending peer (nil if the receiver does not say).
	Peer *socket.Peer
	// Frames is the message's frame count, Length its total size in bytes.
	Frames int
	Length int
	// Prefix is at most LogPrefix leading bytes of the message's last
	// frame. It aliases the frame: valid only during the OnDrop call, and
	// raw peer bytes — render it with Hex before logging it.
	Prefix []byte
	// Err is the classified error, a *decodeguard.Error in its chain.
	Err error
	// Time is when the drop happened (Config.Now).
	Time time.Time

	lastLen int
}

// Hex returns Prefix as lower-case hex, followed by "…" when the last frame
// was longer than the prefix: safe to log.
func (d Drop) Hex() string {
	s := make([]byte, 0, 2*LogPrefix+len("…"))
	const digits = "0123456789abcdef"
	for _, c := range d.Prefix {
		s = append(s, digits[c>>4], digits[c&0xf])
	}
	if d.lastLen > len(d.Prefix) {
		s = append(s, "…"...)
	}
	return string(s)
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
	// the Receiver is a *socket.Socket; for a zmq4 socket on the guarded
	// transport, the refusals are in that zmtpguard.Transport's Stats.
	Refused decodeguard.Counts `json:"refused"`
	// HandlerErrors counts unclassified handler errors and handler panics.
	HandlerErrors uint64 `json:"handler_errors"`
	// LastDrop is the time of the latest drop, the zero Time if none.
	LastDrop time.Time `json:"last_drop,omitzero"`
}

// TotalDropped returns the sum of Dropped.
func (s Stats) TotalDropped() uint64 {
	var n uint64
	for _, c := range s.Dropped {
		n += c
	}
	return n
}

// Config configures a Loop. Decode is required, and Handler for Run.
type Config[T any] struct {
	// Name identifies the loop in logs, errors and Drop (default "loop").
	Name string
	// Logger receives the drop lines; nil means slog.Default(). Pass
	// slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
	// LogInterval is the shortest time between two summary lines of one
	// reason (default DefaultLogInterval, 1 s).
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
	// decoder), else decodeguard.DefaultMaxBytes (1 MiB). New refuses a
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
	// returns ErrBusy; none of them may wait for Run to return (Run waits
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
	// RecoverHandlerPanics turns a handler panic into a
	// *HandlerPanicError treated as a handler error, instead of letting it
	// propagate out of Run.
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

// Loop is a SafeLoop: the resilient receive loop over one Receiver. Create
// it with [New]. Stats and Close may be called from any goroutine; Run,
// Deliver and Next from one goroutine at a time.
type Loop[T any] struct {
	recv Receiver
	cfg  Config[T]
	now  func() time.Time
	// maxBytes is the size the loop checks itself; 0 when the Receiver
	// already enforces cfg.MaxMessageSize (a socket's own limit).
	maxBytes int
	log      *rateLog

	value T
	env   envelope.Envelope // the current message's envelope (ROUTER loops)
	acks  ack

	// The happy path updates one counter, delivered; Received is derived
	// (delivered + messages dropped before the handler), because every
	// locked instruction per message costs measurable throughput.
	delivered     atomic.Uint64
	preHandler    atomic.Uint64 // drops at the envelope, decode and validate stages
	handlerErrors atomic.Uint64
	dropped       [decodeguard.NumReasons]atomic.Uint64
	lastDrop      atomic.Int64

	phase uint8 // phaseIdle, phaseDecode or phaseHandler; loop goroutine only
	stage Stage // StageDecode or StageValidate while phase is phaseDecode

	busy   atomic.Bool
	closed atomic.Bool
	mu     sync.Mutex
	cancel context.CancelFunc
}

// New returns a Loop that receives from r. It fails when r or cfg.Decode is
// nil or cfg.Envelope is invalid.
func New[T any](r Receiver, cfg Config[T]) (*Loop[T], error) {
	if r == nil {
		return nil, errors.New("loop: nil Receiver")
	}
	if cfg.Decode == nil {
		return nil, errors.New("loop: Config.Decode is nil")
	}
	if cfg.Envelope != nil {
		if _, err := envelope.Parse(nil, cfg.Envelope); errors.Is(err, envelope.ErrInvalidOptions) {
			return nil, err
		}
	}
	if cfg.Name == "" {
		cfg.Name = "loop"
	}
	if cfg.MaxMessageSize < 0 {
		return nil, fmt.Errorf("loop %s: Config.MaxMessageSize %d is negative", cfg.Name, cfg.MaxMessageSize)
	}
	check := true
	if s, ok := r.(*socket.Socket); ok {
		sockMax := s.Options().Guard.MaxMessageSize
		switch {
		case cfg.MaxMessageSize == 0 || cfg.MaxMessageSize == sockMax:
			cfg.MaxMessageSize, check = sockMax, false
		case cfg.MaxMessageSize > sockMax:
			return nil, fmt.Errorf("loop %s: Config.MaxMessageSize %d is over the socket's MaxMessageSize %d (raise socket.Options.Guard.MaxMessageSize)",
				cfg.Name, cfg.MaxMessageSize, sockMax)
		}
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = decodeguard.DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	l := &Loop[T]{recv: r, cfg: cfg, now: cfg.Now}
	if check {
		l.maxBytes = int(min(cfg.MaxMessageSize, int64(math.MaxInt)))
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.log = newRateLog(cfg.Logger, cfg.Name, cfg.LogInterval)
	l.acks.wake = make(chan struct{}, 1)
	return l, nil
}

// Name returns the loop's name.
func (l *Loop[T]) Name() string { return l.cfg.Name }

// Stats returns a snapshot of the loop's counters.
func (l *Loop[T]) Stats() Stats {
	pre := l.preHandler.Load() // before delivered: Received never runs ahead of the drops
	s := Stats{
		Delivered:     l.delivered.Load(),
		HandlerErrors: l.handlerErrors.Load(),
	}
	s.Received = s.Delivered + pre
	for r := range s.Dropped {
		s.Dropped[r] = l.dropped[r].Load()
	}
	if ns := l.lastDrop.Load(); ns != 0 {
		s.LastDrop = time.Unix(0, ns)
	}
	if sock, ok := l.recv.(*socket.Socket); ok {
		s.Refused = sock.Stats().Refused
	}
	return s
}

// Close stops a running Run or Deliver, which return ErrLoopClosed once the
// in-flight handler has returned, and makes every later Run, Deliver and
// Next return ErrLoopClosed. It does not close the Receiver (but see
// ZMQ4Receiver, which must close its socket to stop) and does not interrupt
// a Next blocked in Recv: cancel Next's context for that. Close always
// returns nil.
func (l *Loop[T]) Close() error {
	l.mu.Lock()
	l.closed.Store(true)
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return nil
}

// Run receives and handles messages until ctx is cancelled (it returns nil),
// Close is called (ErrLoopClosed), or an error that is not bad input
// arises (an *Error, unless Config.OnError decides otherwise). Bad input is
// dropped and counted. Run returns only after the in-flight handler has
// returned; a handler panic propagates unless Config.RecoverHandlerPanics.
func (l *Loop[T]) Run(ctx context.Context) error {
	if l.cfg.Handler == nil {
		return errors.New("loop: Run needs Config.Handler")
	}
	return l.serve(ctx, l.cfg.Handler)
}

// Deliver is Run with a channel as the handler: each valid message is sent
// on ch, and the loop waits for the consumer to call Delivery.Done before it
// receives the next message (the next receive reuses the frames and the
// value). A single consumer goroutine can thus select over several loops'
// channels and a timer, while each loop applies its own drop policy in its
// own goroutine. Config.Handler is not used.
//
// If ctx ends or Close is called while the consumer holds a delivery,
// Deliver returns without waiting for Done; it receives nothing more, so
// the delivery stays intact until Run, Deliver or Next is called again.
// Deliver returns like Run.
func (l *Loop[T]) Deliver(ctx context.Context, ch chan<- Delivery[T]) error {
	if ch == nil {
		return errors.New("loop: Deliver needs a channel")
	}
	return l.serve(ctx, func(ctx context.Context, d Delivery[T]) error {
		l.acks.seq++
		d.ack, d.seq = &l.acks, l.acks.seq
		select {
		case ch <- d:
		case <-ctx.Done():
			return ctx.Err()
		}
		return l.acks.wait(ctx, d.seq)
	})
}

// Next receives until a message passes every check and returns it, dropping
// and counting bad input on the way. The delivery is valid until the next
// call. Next returns ctx's error when ctx ends, ErrLoopClosed after Close,
// and otherwise an error as Run would end with. Config.Handler is not used.
func (l *Loop[T]) Next(ctx context.Context) (Delivery[T], error) {
	if !l.busy.CompareAndSwap(false, true) {
		return Delivery[T]{}, ErrBusy
	}
	defer l.busy.Store(false)
	if l.closed.Load() {
		return Delivery[T]{}, ErrLoopClosed
	}
	var d Delivery[T]
	err := errRecovered
	for err == errRecovered {
		err = l.pump(ctx, nil, &d)
	}
	if err == errStopped {
		if l.closed.Load() {
			return Delivery[T]{}, ErrLoopClosed
		}
		return Delivery[T]{}, ctx.Err()
	}
	if err != nil {
		return Delivery[T]{}, err
	}
	return d, nil
}

// serve is Run and Deliver.
func (l *Loop[T]) serve(parent context.Context, h func(context.Context, Delivery[T]) error) error {
	if !l.busy.CompareAndSwap(false, true) {
		return ErrBusy
	}
	defer l.busy.Store(false)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	l.mu.Lock()
	if l.closed.Load() {
		l.mu.Unlock()
		return ErrLoopClosed
	}
	l.cancel = cancel
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.cancel = nil
		l.mu.Unlock()
		l.log.flush(l.now())
	}()

	var d Delivery[T]
	for {
		err := l.pump(ctx, h, &d)
		switch {
		case err == nil, err == errRecovered:
		case err == errStopped && l.closed.Load():
			return ErrLoopClosed
		case err == errStopped:
			return nil
		default:
			return err
		}
	}
}

// The phases of the loop goroutine, for the panic boundary: a panic is
// attributed to the decode stage or the handler by the phase it leaves
// behind. Only the loop goroutine reads or writes Loop.phase.
const (
	phaseIdle    uint8 = iota // the loop's own code, the Receiver, OnDrop
	phaseDecode               // Config.Decode or Config.Validate
	phaseHandler              // the handler
)

// errRecovered is the internal signal that settle recovered a panic and the
// loop goes on.
var errRecovered = errors.New("loop: recovered")

// pump is the loop proper: receive, envelope, decode, validate, deliver,
// until an error; with a nil h (Next) it returns nil after the first
// delivery, left in d. It is also the per-message panic boundary: rather
// than deferring a recover for every message, it defers settle once and is
// re-entered after a recovered panic, which costs nothing on the happy
// path. Everything is in one function because each call and indirection
// here is a visible share of a ~130 ns decode (see BENCHMARKS.md).
func (l *Loop[T]) pump(ctx context.Context, h func(context.Context, Delivery[T]) error, d *Delivery[T]) (err error) {
	normal := false
	defer l.settle(d, &err, &normal)
	decode, validate, envOpts := l.cfg.Decode, l.cfg.Validate, l.cfg.Envelope
	value := &l.value
	d.Value = value
	for {
		msg, rerr := l.recv.Recv(ctx)
		if rerr != nil {
			if err = l.recvFailed(ctx, msg, rerr); err != nil {
				normal = true
				return err
			}
			continue
		}
		d.Msg = msg
		body := msg.Frames
		if l.maxBytes > 0 && tooLong(msg.Frames, l.maxBytes) {
			if err = l.reject(StageDecode, msg, errTooLong); err != nil {
				normal = true
				return err
			}
			continue
		}
		if envOpts != nil {
			env, eerr := envelope.Parse(msg.Frames, envOpts)
			if eerr != nil {
				if err = l.reject(StageEnvelope, msg, eerr); err != nil {
					normal = true
					return err
				}
				continue
			}
			l.env = env
			d.Envelope, body = &l.env, env.Body
		}

		l.phase, l.stage = phaseDecode, StageDecode
		derr := decode(body, value)
		if derr == nil && validate != nil {
			l.stage = StageValidate
			if derr = validate(value); derr != nil && reasonOf(derr) == decodeguard.ReasonNone {
				derr = &decodeguard.Error{Reason: decodeguard.ReasonValidate, Detail: "validation failed", Offset: -1, Err: derr}
			}
		}
		l.phase = phaseIdle
		if derr != nil {
			if err = l.reject(l.stage, msg, derr); err != nil {
				normal = true
				return err
			}
			continue
		}

		l.delivered.Add(1)
		if h == nil {
			normal = true
			return nil
		}
		l.phase = phaseHandler
		herr := h(ctx, *d)
		l.phase = phaseIdle
		if herr != nil {
			if err = l.handlerFailed(ctx, d, herr); err != nil {
				normal = true
				return err
			}
		}
	}
}

// settle is deferred by pump. On a normal return it does nothing.
// Otherwise the goroutine is panicking (or exiting) and settle applies the
// panic policy of the phase it happened in: a decode-stage panic becomes a
// ReasonDecoderPanic drop and *errp = errRecovered, unless
// PropagateDecoderPanics; a handler panic is counted as a handler error and
// propagates, unless RecoverHandlerPanics makes it a *HandlerPanicError that
// goes through OnError like any handler error. Panics anywhere else
// propagate. settle must be the deferred function itself, so that its
// recover calls stop the panic.
func (l *Loop[T]) settle(d *Delivery[T], errp *error, normal *bool) {
	if *normal {
		return
	}
	phase := l.phase
	l.phase = phaseIdle
	switch phase {
	case phaseDecode:
		if l.cfg.PropagateDecoderPanics {
			return
		}
		r := recover()
		if r == nil {
			return // runtime.Goexit
		}
		err := &decodeguard.Error{
			Reason: decodeguard.ReasonDecoderPanic,
			Detail: "decoder panicked",
			Offset: -1,
			Err:    &decodeguard.PanicError{Value: r, Stack: debug.Stack()},
		}
		l.drop(decodeguard.ReasonDecoderPanic, l.stage, d.Msg, err)
		*errp = errRecovered
	case phaseHandler:
		l.handlerErrors.Add(1)
		if !l.cfg.RecoverHandlerPanics {
			return
		}
		r := recover()
		if r == nil {
			return // runtime.Goexit
		}
		err := l.fail(StageHandler, d.Msg.Peer, &HandlerPanicError{Value: r, Stack: debug.Stack()})
		if err == nil {
			err = errRecovered
		}
		*errp = err
	}
}

// stopped returns errStopped when the loop must stop (context done or loop
// closed), nil otherwise.
func (l *Loop[T]) stopped(ctx context.Context) error {
	if ctx.Err() != nil || l.closed.Load() {
		return errStopped
	}
	return nil
}

// recvFailed applies the policy to a receive error: nil to go on,
// errStopped, or an error that ends the loop.
func (l *Loop[T]) recvFailed(ctx context.Context, msg socket.Msg, err error) error {
	if serr := l.stopped(ctx); serr != nil {
		return serr
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, socket.ErrClosed) {
		return &Error{Loop: l.cfg.Name, Stage: StageReceive, Err: err}
	}
	return l.reject(StageReceive, msg, err)
}

// handlerFailed applies the policy to a handler's error: nil to go on,
// errStopped, or an error that ends the loop.
func (l *Loop[T]) handlerFailed(ctx context.Context, d *Delivery[T], err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return errStopped
	}
	if r := reasonOf(err); r != decodeguard.ReasonNone {
		l.drop(r, StageHandler, d.Msg, err)
		return nil
	}
	l.handlerErrors.Add(1)
	return l.fail(StageHandler, d.Msg.Peer, err)
}

// reject applies the drop policy to an error at stage: bad input is dropped
// (nil), anything else goes to fail.
func (l *Loop[T]) reject(stage Stage, msg socket.Msg, err error) error {
	if r := reasonOf(err); r != decodeguard.ReasonNone {
		l.drop(r, stage, msg, err)
		return nil
	}
	return l.fail(stage, msg.Peer, err)
}

// errTooLong is the shared drop error of a message over MaxMessageSize.
var errTooLong = &decodeguard.Error{Reason: decodeguard.ReasonOversize,
	Detail: "message longer than Config.MaxMessageSize", Offset: -1}

// tooLong reports whether the frames hold more than max bytes.
func tooLong(frames [][]byte, max int) bool {
	n := 0
	for _, f := range frames {
		if n += len(f); n > max {
			return true
		}
	}
	return false
}

// reasonOf is decodeguard.ReasonOf with a fast path for a bare
// *decodeguard.Error, the common case, that does not allocate: errors.As
// makes its target escape, and a flood of junk goes through here.
func reasonOf(err error) decodeguard.Reason {
	if e, ok := err.(*decodeguard.Error); ok && e.Reason.Valid() {
		return e.Reason
	}
	return decodeguard.ReasonOf(err)
}

// fail wraps an error that is not bad input and lets OnError decide.
func (l *Loop[T]) fail(stage Stage, peer *socket.Peer, err error) error {
	e := &Error{Loop: l.cfg.Name, Stage: stage, Peer: peer.String(), Err: err}
	if l.cfg.OnError != nil {
		return l.cfg.OnError(e)
	}
	return e
}

// drop counts, reports and logs one dropped message.
func (l *Loop[T]) drop(r decodeguard.Reason, stage Stage, msg socket.Msg, err error) {
	if r < decodeguard.Reason(decodeguard.NumReasons) {
		l.dropped[r].Add(1)
	}
	if stage == StageEnvelope || stage == StageDecode || stage == StageValidate {
		l.preHandler.Add(1)
	}
	now := l.now()
	l.lastDrop.Store(now.UnixNano())
	d := Drop{Loop: l.cfg.Name, Reason: r, Stage: stage, Peer: msg.Peer,
		Frames: len(msg.Frames), Err: err, Time: now}
	for _, f := range msg.Frames {
		d.Length += len(f)
	}
	if n := len(msg.Frames); n > 0 {
		last := msg.Frames[n-1]
		p := min(len(last), LogPrefix)
		d.lastLen, d.Prefix = len(last), last[:p:p]
	}
	if l.cfg.OnDrop != nil {
		l.cfg.OnDrop(d)
	}
	l.log.drop(&d)
}
