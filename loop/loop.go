package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/socket"
)

// ErrLoopClosed is returned by Run, Deliver and Next after [Loop.Close], like
// net/http's ErrServerClosed.
var ErrLoopClosed = errors.New("loop: closed")

// errBusy is returned by Run, Deliver and Next when one of them is already
// running on the same Loop: a Loop has a single receiving goroutine.
var errBusy = errors.New("loop: Run, Deliver or Next already in progress")

// errStopped is the internal signal that the context ended.
var errStopped = errors.New("loop: context done")

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
	dropped       [len(decodeguard.Counts{})]atomic.Uint64
	lastDrop      atomic.Int64

	phase uint8  // phaseIdle, phaseDecode or phaseHandler; loop goroutine only
	stage string // stageDecode or stageValidate while phase is phaseDecode

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
	if cfg.LogInterval < 0 {
		return nil, fmt.Errorf("loop %s: Config.LogInterval %v is negative", cfg.Name, cfg.LogInterval)
	}
	check := true
	if s, ok := r.(sizeLimited); ok {
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
		cfg.MaxMessageSize = defaultMaxMessageSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogInterval == 0 {
		cfg.LogInterval = defaultLogInterval
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

// name returns the loop's name.
func (l *Loop[T]) name() string { return l.cfg.Name }

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
	if rc, ok := l.recv.(refusalCounting); ok {
		s.Refused = rc.Stats().Refused
	}
	return s
}

// Close stops a running Run or Deliver, which return ErrLoopClosed once the
// in-flight handler has returned, and makes every later Run, Deliver and
// Next return ErrLoopClosed. It does not close the Receiver (but see
// socket.ZMQ4Receiver, which must close its socket to stop) and does not interrupt
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
		return Delivery[T]{}, errBusy
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
		return errBusy
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
			if err = l.reject(stageDecode, msg, errTooLong); err != nil {
				normal = true
				return err
			}
			continue
		}
		if envOpts != nil {
			env, eerr := envelope.Parse(msg.Frames, envOpts)
			if eerr != nil {
				if err = l.reject(stageEnvelope, msg, eerr); err != nil {
					normal = true
					return err
				}
				continue
			}
			l.env = env
			d.Envelope, body = &l.env, env.Body
		}

		l.phase, l.stage = phaseDecode, stageDecode
		derr := decode(body, value)
		if derr == nil && validate != nil {
			l.stage = stageValidate
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
// propagates, unless RecoverHandlerPanics makes it a *handlerPanicError that
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
			Err:    &msgpscan.PanicError{Value: r, Stack: debug.Stack()},
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
		err := l.fail(stageHandler, d.Msg.Peer, &handlerPanicError{Value: r, Stack: debug.Stack()})
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
		return &Error{Loop: l.cfg.Name, Stage: stageReceive, Err: err}
	}
	return l.reject(stageReceive, msg, err)
}

// handlerFailed applies the policy to a handler's error: nil to go on,
// errStopped, or an error that ends the loop.
func (l *Loop[T]) handlerFailed(ctx context.Context, d *Delivery[T], err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return errStopped
	}
	if r := reasonOf(err); r != decodeguard.ReasonNone {
		l.drop(r, stageHandler, d.Msg, err)
		return nil
	}
	l.handlerErrors.Add(1)
	return l.fail(stageHandler, d.Msg.Peer, err)
}

// reject applies the drop policy to an error at stage: bad input is dropped
// (nil), anything else goes to fail.
func (l *Loop[T]) reject(stage string, msg socket.Msg, err error) error {
	if r := reasonOf(err); r != decodeguard.ReasonNone {
		l.drop(r, stage, msg, err)
		return nil
	}
	return l.fail(stage, msg.Peer, err)
}

// defaultMaxMessageSize is what a zero Config.MaxMessageSize means when the
// Receiver is not a *socket.Socket.
const defaultMaxMessageSize = 1 << 20

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
func (l *Loop[T]) fail(stage string, peer *socket.Peer, err error) error {
	e := &Error{Loop: l.cfg.Name, Stage: stage, Peer: peer.String(), Err: err}
	if l.cfg.OnError != nil {
		return l.cfg.OnError(e)
	}
	return e
}

// drop counts, reports and logs one dropped message.
func (l *Loop[T]) drop(r decodeguard.Reason, stage string, msg socket.Msg, err error) {
	if r < decodeguard.Reason(len(decodeguard.Counts{})) {
		l.dropped[r].Add(1)
	}
	if stage == stageEnvelope || stage == stageDecode || stage == stageValidate {
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
		p := min(len(last), logPrefix)
		d.lastLen, d.Prefix = len(last), last[:p:p]
	}
	if l.cfg.OnDrop != nil {
		l.cfg.OnDrop(d)
	}
	l.log.drop(&d)
}
