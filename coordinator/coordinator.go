package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// startupLogInterval is how often a coordinator waiting for its
// engines' subscriptions logs how many are still missing.
const startupLogInterval = 10 * time.Second

// defaultReadyInterval is Config.ReadyInterval's default: READY goes out
// at most once per 100 ms after start-up.
const defaultReadyInterval = 100 * time.Millisecond

// Errors returned by a [Coordinator].
var (
	// ErrClosed is returned by Run after Close, and by Run called on a
	// closed Coordinator.
	ErrClosed = errors.New("coordinator: closed")
	// ErrRunCalled is returned by a second call of Run: a Coordinator runs
	// once.
	ErrRunCalled = errors.New("coordinator: Run already called")
	// ErrStartupTimeout is matched (errors.Is) by the *StartupTimeoutError
	// Run returns when Config.StartupDeadline passes.
	ErrStartupTimeout = errors.New("coordinator: start-up deadline passed")
)

// StartupTimeoutError is returned by Run when Config.StartupDeadline passed
// before every engine subscribed on the back publish socket.
type StartupTimeoutError struct {
	// Deadline is Config.StartupDeadline.
	Deadline time.Duration
	// Expected is the engine count; Subscribed how many had subscribed.
	Expected, Subscribed int
}

// Error names the deadline and the count of missing engines.
func (e *StartupTimeoutError) Error() string {
	return fmt.Sprintf("coordinator: start-up deadline %v passed with %d of %d engines missing (%d subscribed)",
		e.Deadline, e.Expected-e.Subscribed, e.Expected, e.Subscribed)
}

// Is makes errors.Is(err, ErrStartupTimeout) true.
func (e *StartupTimeoutError) Is(target error) bool { return target == ErrStartupTimeout }

// The names of the three receive loops, as they appear in logs, Drop.Loop
// and errors.
const (
	LoopFront       = "coordinator-front"
	LoopBackOutput  = "coordinator-back-output"
	LoopBackPublish = "coordinator-back-publish"
)

const (
	idxFront = iota
	idxBackOutput
	idxBackPublish
	numLoops
)

var loopNames = [numLoops]string{LoopFront, LoopBackOutput, LoopBackPublish}

// Coordinator is a running vLLM-compatible DP coordinator: three bound
// sockets, a SafeLoop on each, and one goroutine that owns the state machine and
// selects over the loops and a publication timer. Create it with [New],
// start it with [Coordinator.Run], stop it by cancelling Run's context or
// with [Coordinator.Close]. Stats, the endpoint methods and Close
// are safe for concurrent use.
type Coordinator struct {
	cfg Config
	log *slog.Logger
	// scaleFrom is Config.ScaleFrom as a set of canonical IP strings (nil:
	// any peer).
	scaleFrom map[string]bool

	front, backOut, backPub *socket.Socket

	frontLoop   *loop.Loop[dpwire.FrontMsg]
	outLoop     *loop.Loop[enginecore.Header]
	pubLoop     *loop.Loop[[][]byte]
	outLimits   decodeguard.Limits
	startupEach time.Duration

	mu    sync.Mutex // guards state's mutation by Run and reads by Snapshot/Stats
	state *stateMachine

	// Drops by the state machine, per loop and reason (loop drops are in
	// the loops' own Stats; a message is counted in exactly one place).
	stateDrops [numLoops][len(decodeguard.Counts{})]atomic.Uint64
	// What Run sent.
	statsPublished, wavePublished, readySent, startWaveSent atomic.Uint64
	// readyCoalesced counts READY requests folded into another READY;
	// startWaveCoalesced repeated identical START_DP_WAVE broadcasts not
	// sent again within ReadyInterval; controlDropped control messages
	// (READY, START_DP_WAVE) the back publish socket dropped for a peer
	// whose queue was full.
	readyCoalesced, startWaveCoalesced, controlDropped atomic.Uint64
	// Owned by Run's goroutine: when READY and the last START_DP_WAVE
	// went out, whether a READY is owed, and the last START_DP_WAVE.
	lastReady, lastStartAt time.Time
	readyPending           bool
	lastStart              dpwire.StartDPWave
	// Unsubscriptions received on the back publish socket (ignored).
	backUnsubs atomic.Uint64
	// silent names the engines whose back connections time out.
	silent silence

	// Run-goroutine-only: rate limiting of state-drop log lines and
	// encode buffers.
	buf []byte

	limOnce sync.Once
	lim     *ratelog.Limiter // state-drop and start-up lines

	runMu     sync.Mutex
	runDone   chan struct{}
	runEnded  bool // Run has returned (or is closing the sockets)
	closed    bool
	closeCh   chan struct{}
	closeOnce sync.Once
}

// New binds the coordinator's three sockets and returns it, ready to Run.
// It fails on a bad Config (an empty endpoint, an engine count out of
// [1, 65536], invalid socket options) or when a socket cannot bind;
// nothing is left open then.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	scaleFrom, err := cfg.verify()
	if err != nil {
		return nil, err
	}
	state, err := newStateMachine(cfg.Engines, stateConfig{
		StatsInterval:           cfg.StatsInterval,
		IdleInterval:            cfg.IdleInterval,
		MaxEngines:              cfg.MaxEngines,
		Release:                 cfg.Release,
		DisableWaveCoordination: cfg.DisableWaveCoordination,
	})
	if err != nil {
		return nil, err
	}
	opts, err := cfg.socketOptions()
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		cfg:         cfg,
		log:         cfg.Logger,
		scaleFrom:   scaleFrom,
		state:       state,
		closeCh:     make(chan struct{}),
		startupEach: startupLogInterval,
	}
	if mm := opts.Guard.MaxMessageSize; mm > 0 {
		c.outLimits.MaxBytes = int(min(mm, int64(^uint(0)>>1)))
	}
	if err := c.bind(opts); err != nil {
		c.closeSockets()
		return nil, err
	}
	if err := c.makeLoops(); err != nil {
		c.closeSockets()
		return nil, err
	}
	return c, nil
}

// withEvents returns opts whose OnEvent reports to onSocketEvent(sock)
// before calling the user's.
func (c *Coordinator) withEvents(opts socket.Options, sock int) socket.Options {
	user := opts.OnEvent
	opts.OnEvent = func(e socket.Event) {
		c.onSocketEvent(sock, e)
		if user != nil {
			user(e)
		}
	}
	return opts
}

func (c *Coordinator) bind(opts socket.Options) error {
	var err error
	if c.front, err = socket.New("XPUB", opts); err != nil {
		return fmt.Errorf("coordinator: front publish socket: %w", err)
	}
	if c.backOut, err = socket.New("PULL", c.withEvents(opts, idxBackOutput)); err != nil {
		return fmt.Errorf("coordinator: back output socket: %w", err)
	}
	if c.backPub, err = socket.New("XPUB", c.withEvents(opts, idxBackPublish)); err != nil {
		return fmt.Errorf("coordinator: back publish socket: %w", err)
	}
	if err := c.front.Bind(c.cfg.Front); err != nil {
		return fmt.Errorf("coordinator: bind front publish: %w", err)
	}
	if err := c.backOut.Bind(c.cfg.BackOutput); err != nil {
		return fmt.Errorf("coordinator: bind back output: %w", err)
	}
	if err := c.backPub.Bind(c.cfg.BackPublish); err != nil {
		return fmt.Errorf("coordinator: bind back publish: %w", err)
	}
	return nil
}

var errOneFrame = decodeguard.NewError(decodeguard.ReasonEnvelope, "coordinator message must be a single frame")

func (c *Coordinator) makeLoops() error {
	var err error
	c.frontLoop, err = loop.New(c.front, loop.Config[dpwire.FrontMsg]{
		Name:        LoopFront,
		Logger:      c.log,
		LogInterval: c.cfg.LogInterval,
		OnDrop:      c.cfg.OnDrop,
		Decode: func(frames [][]byte, dst *dpwire.FrontMsg) error {
			if len(frames) != 1 {
				*dst = dpwire.FrontMsg{}
				return errOneFrame
			}
			m, err := dpwire.ParseFrontMessage(frames[0])
			*dst = m
			return err
		},
	})
	if err != nil {
		return err
	}
	c.outLoop, err = loop.New(c.backOut, loop.Config[enginecore.Header]{
		Name:        LoopBackOutput,
		Logger:      c.log,
		LogInterval: c.cfg.LogInterval,
		OnDrop:      c.cfg.OnDrop,
		Decode: func(frames [][]byte, dst *enginecore.Header) error {
			if len(frames) != 1 {
				*dst = enginecore.Header{}
				return errOneFrame
			}
			return enginecore.DecodeHeader(frames[0], &c.outLimits, dst)
		},
		// The stateless checks of State.OnEngineOutput run here, so they are
		// counted by the loop; only the engine-index checks, which need the
		// engine count, are left to the state machine.
		Validate: func(m *enginecore.Header) error {
			switch {
			case m.OutputsLen != 0:
				return errOutputs
			case m.HasUtilityOutput:
				return errUtility
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	c.pubLoop, err = loop.New(c.backPub, loop.Config[[][]byte]{
		Name:        LoopBackPublish,
		Logger:      c.log,
		LogInterval: c.cfg.LogInterval,
		OnDrop:      c.cfg.OnDrop,
		Decode:      loop.RawDecoder,
		Validate: func(frames *[][]byte) error {
			if len(*frames) != 1 {
				return errOneFrame
			}
			return dpwire.CheckBackMessage((*frames)[0])
		},
	})
	return err
}

// FrontEndpoint returns the front publish socket's bound endpoint, with the
// port actually chosen.
func (c *Coordinator) FrontEndpoint() string { return c.front.Endpoint() }

// BackOutputEndpoint returns the back output socket's bound endpoint.
func (c *Coordinator) BackOutputEndpoint() string { return c.backOut.Endpoint() }

// BackPublishEndpoint returns the back publish socket's bound endpoint.
func (c *Coordinator) BackPublishEndpoint() string { return c.backPub.Endpoint() }

// stateSnapshot returns a copy of the coordinator's state: each engine's counts,
// the current wave, whether the engines run, whether start-up is over and
// how many engines subscribed during it.
func (c *Coordinator) stateSnapshot() stateSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.stateSnapshot()
}

// Close stops Run, which then returns ErrClosed, and returns without
// waiting for it: a running Run closes the three sockets as it returns
// (whatever ended it), and Close closes them itself when Run is not
// running. Close never waits for the coordinator's goroutines, so it may
// be called from anywhere, Config.OnDrop included; Run's return says that
// they have ended. It is idempotent and safe to call concurrently with
// Run; Run called after Close returns ErrClosed at once.
func (c *Coordinator) Close() error {
	c.runMu.Lock()
	c.closed = true
	running := c.runDone != nil && !c.runEnded
	c.runMu.Unlock()
	c.closeOnce.Do(func() {
		close(c.closeCh)
		c.frontLoop.Close()
		c.outLoop.Close()
		c.pubLoop.Close()
	})
	if running {
		return nil // Run closes the sockets once its loops have returned
	}
	return c.closeSockets()
}

func (c *Coordinator) closeSockets() error {
	var errs []error
	for _, s := range []*socket.Socket{c.front, c.backOut, c.backPub} {
		if s != nil {
			if err := s.Close(); err != nil && !errors.Is(err, socket.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Run runs the coordinator: start-up (wait for one subscription per engine
// on the back publish socket, then send READY), then the main loop (stats
// and wave publications to the front-ends, front-end wake-ups and scale
// notices, engine outputs, re-subscriptions). Bad input on any socket is
// dropped and counted (see [Coordinator.Stats]); it never ends Run.
//
// Run returns nil when ctx is cancelled, ErrClosed after Close, a
// *StartupTimeoutError when Config.StartupDeadline passes during start-up,
// ErrRunCalled if Run was called before, and otherwise only on a failure
// that is not a peer's doing (a socket failing under it). Run closes the
// three sockets as it returns: the coordinator's goroutines, the sockets'
// included, have all ended when Run returns.
func (c *Coordinator) Run(parent context.Context) error {
	c.runMu.Lock()
	switch {
	case c.closed:
		c.runMu.Unlock()
		return ErrClosed
	case c.runDone != nil:
		c.runMu.Unlock()
		return ErrRunCalled
	}
	done := make(chan struct{})
	c.runDone = done
	c.runMu.Unlock()
	defer close(done)

	ctx, cancel := context.WithCancel(parent)
	chans := loopChans{
		front: make(chan loop.Delivery[dpwire.FrontMsg]),
		out:   make(chan loop.Delivery[enginecore.Header]),
		pub:   make(chan loop.Delivery[[][]byte]),
		errs:  make(chan loopEnd, numLoops),
	}
	var wg sync.WaitGroup
	wg.Add(numLoops)
	go func() { defer wg.Done(); chans.errs <- loopEnd{idxFront, c.frontLoop.Deliver(ctx, chans.front)} }()
	go func() { defer wg.Done(); chans.errs <- loopEnd{idxBackOutput, c.outLoop.Deliver(ctx, chans.out)} }()
	go func() { defer wg.Done(); chans.errs <- loopEnd{idxBackPublish, c.pubLoop.Deliver(ctx, chans.pub)} }()
	err := c.serve(ctx, &chans)
	cancel()
	wg.Wait()
	c.runMu.Lock()
	c.runEnded = true
	c.runMu.Unlock()
	// Run owns the sockets as net/http's Serve owns its listener: it closes
	// them as it returns, and waits for their goroutines (Close, which
	// never waits, leaves that to a running Run).
	for _, s := range []*socket.Socket{c.front, c.backOut, c.backPub} {
		if s != nil {
			_ = s.Shutdown(context.Background()) // no error but ctx's
		}
	}
	switch {
	case c.isClosed():
		return ErrClosed
	case parent.Err() != nil:
		return nil
	}
	return err
}

func (c *Coordinator) isClosed() bool {
	select {
	case <-c.closeCh:
		return true
	default:
		return false
	}
}

type loopEnd struct {
	idx int
	err error
}

type loopChans struct {
	front chan loop.Delivery[dpwire.FrontMsg]
	out   chan loop.Delivery[enginecore.Header]
	pub   chan loop.Delivery[[][]byte]
	errs  chan loopEnd
}

// serve is Run's select loop; it owns c.state (mutating it under c.mu).
func (c *Coordinator) serve(ctx context.Context, ch *loopChans) error {
	expected := c.cfg.Engines
	c.log.Info("coordinator: waiting for engines to subscribe",
		"engines", expected, "back_publish", c.BackPublishEndpoint())

	startupTick := time.NewTicker(c.startupEach)
	defer startupTick.Stop()
	startupTickC := startupTick.C
	var deadlineC <-chan time.Time
	if d := c.cfg.StartupDeadline; d > 0 {
		deadline := time.NewTimer(d)
		defer deadline.Stop()
		deadlineC = deadline.C
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	readyTimer := time.NewTimer(time.Hour)
	readyTimer.Stop()
	defer readyTimer.Stop()
	var (
		timerC  <-chan time.Time
		timerAt time.Time
		started bool
		readyC  <-chan time.Time
	)
	for {
		// Front-end messages and engine outputs wait (in their loops, then
		// in the sockets) until start-up is over, as vLLM polls those
		// sockets only then.
		var frontC chan loop.Delivery[dpwire.FrontMsg]
		var outC chan loop.Delivery[enginecore.Header]
		if started {
			frontC, outC = ch.front, ch.out
		}
		var err error
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closeCh:
			return ErrClosed
		case end := <-ch.errs:
			if end.err == nil || errors.Is(end.err, loop.ErrLoopClosed) {
				// Only cancellation or Close ends a loop this way.
				if c.isClosed() {
					return ErrClosed
				}
				return ctx.Err()
			}
			// "coordinator: back-output socket: loop: receive: ...", not
			// "coordinator: coordinator-back-output loop: loop: ...".
			return fmt.Errorf("coordinator: %s socket: %w", strings.TrimPrefix(loopNames[end.idx], "coordinator-"), end.err)
		case d := <-ch.pub:
			err = c.onBackPublish(ctx, d)
		case d := <-frontC:
			err = c.onFront(ctx, d)
		case d := <-outC:
			err = c.onBackOutput(ctx, d)
		case <-timerC:
			timerC = nil
			err = c.tick(ctx)
		case <-readyC:
			readyC = nil
			err = c.sendPendingReady(ctx)
		case <-startupTickC:
			c.mu.Lock()
			sub := c.state.stateSnapshot().Subscribed
			c.mu.Unlock()
			c.log.Warn("coordinator: still waiting for engines to subscribe",
				"missing", expected-sub, "subscribed", sub, "engines", expected)
		case <-deadlineC:
			c.mu.Lock()
			sub := c.state.stateSnapshot().Subscribed
			c.mu.Unlock()
			return &StartupTimeoutError{Deadline: c.cfg.StartupDeadline, Expected: expected, Subscribed: sub}
		}
		if err != nil {
			return err
		}
		if !started && c.state.Started() {
			started = true
			startupTick.Stop()
			startupTickC, deadlineC = nil, nil
			c.log.Info("coordinator: all engines subscribed, READY sent", "engines", c.state.Engines())
		}
		if c.readyPending && readyC == nil {
			readyTimer.Reset(max(0, time.Until(c.lastReady.Add(c.readyInterval()))))
			readyC = readyTimer.C
		}
		if started {
			// Re-arm the publication timer when the next publication time
			// moved (new stats shorten the wait) or the timer fired.
			if next := c.state.NextTick(); timerC == nil || !next.Equal(timerAt) {
				timerAt = next
				timer.Reset(max(0, time.Until(next)))
				timerC = timer.C
			}
		}
	}
}

func (c *Coordinator) onBackPublish(ctx context.Context, d loop.Delivery[[][]byte]) error {
	frame := (*d.Value)[0]
	c.mu.Lock()
	started := c.state.Started()
	a, err := c.state.OnBackMessage(frame)
	c.mu.Unlock()
	if err != nil { // not expected: the loop's Validate ran the same check
		c.stateDrop(idxBackPublish, d.Msg, err)
	} else if len(frame) == 1 && frame[0] == 0x00 {
		// An engine's unsubscription (a departed subscriber): ignored, as
		// vLLM does after start-up (during it, vLLM returned). It does not
		// take back a start-up subscription: the XPUB reports one only when
		// no other subscriber holds the topic.
		c.backUnsubs.Add(1)
		if !started {
			c.logLim().Warn("unsubscribe", "coordinator: ignored an unsubscription on the back publish socket during start-up",
				slog.String(ratelog.KeyComponent, LoopBackPublish),
				slog.String(ratelog.KeyPeer, ratelog.Escape(d.Msg.Peer.String(), 256)),
				slog.Uint64(ratelog.KeyCount, c.backUnsubs.Load()))
		}
	}
	d.Done()
	return c.act(ctx, &a)
}

func (c *Coordinator) logInterval() time.Duration {
	if c.cfg.LogInterval > 0 {
		return c.cfg.LogInterval
	}
	return time.Second
}

// errScaleFrom refuses a SCALE_ELASTIC_EP notice from a peer not in
// Config.ScaleFrom.
var errScaleFrom = decodeguard.NewError(decodeguard.ReasonPolicy, "SCALE_ELASTIC_EP from a front-end not in Config.ScaleFrom")

// scaleAllowed reports whether peer may send SCALE_ELASTIC_EP.
func (c *Coordinator) scaleAllowed(peer *socket.Peer) bool {
	if c.scaleFrom == nil {
		return true
	}
	if peer == nil {
		return false
	}
	host, _, err := net.SplitHostPort(peer.String())
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && c.scaleFrom[ip.Unmap().String()]
}

func (c *Coordinator) onFront(ctx context.Context, d loop.Delivery[dpwire.FrontMsg]) error {
	if d.Value.Kind == dpwire.FrontScale && !c.scaleAllowed(d.Msg.Peer) {
		c.stateDrop(idxFront, d.Msg, errScaleFrom)
		d.Done()
		return nil
	}
	c.mu.Lock()
	a, err := c.state.OnFrontMessage(*d.Value)
	c.mu.Unlock()
	if err != nil {
		c.stateDrop(idxFront, d.Msg, err)
	}
	d.Done()
	return c.act(ctx, &a)
}

func (c *Coordinator) onBackOutput(ctx context.Context, d loop.Delivery[enginecore.Header]) error {
	c.mu.Lock()
	a, err := c.state.OnEngineOutput(d.Value)
	c.mu.Unlock()
	if err != nil {
		c.stateDrop(idxBackOutput, d.Msg, err)
	} else {
		c.silent.learn(d.Value.EngineIndex, d.Msg.Peer)
	}
	d.Done()
	return c.act(ctx, &a)
}

// dropPrefix is how many leading bytes of a dropped message's last frame a
// state-drop line shows, as the loops' lines do.
const dropPrefix = 32

// stateDrop counts, reports and logs (rate-limited) a message the state
// machine refused. It runs on Run's goroutine, before the delivery is
// released (the prefix aliases the frame).
func (c *Coordinator) stateDrop(idx int, msg socket.Msg, err error) {
	r := decodeguard.ReasonOf(err)
	if !r.Valid() {
		r = decodeguard.ReasonValidate
	}
	c.stateDrops[idx][r].Add(1)
	now := time.Now()
	d := loop.Drop{Loop: loopNames[idx], Reason: r, Stage: "handler", Peer: msg.Peer,
		Frames: len(msg.Frames), Err: err, Time: now}
	last, prefixHex := 0, ""
	for _, f := range msg.Frames {
		d.Length += len(f)
	}
	if n := len(msg.Frames); n > 0 {
		f := msg.Frames[n-1]
		p := min(len(f), dropPrefix)
		d.Prefix, last = f[:p:p], len(f)
		prefixHex = ratelog.PrefixHex(f, dropPrefix)
	}
	if c.cfg.OnDrop != nil {
		c.cfg.OnDrop(d)
	}
	c.logLim().Warn(loopNames[idx]+"/"+r.String(), "coordinator: dropped message",
		slog.String(ratelog.KeyComponent, loopNames[idx]), slog.String(ratelog.KeyReason, r.String()),
		slog.String("stage", "state"), slog.String(ratelog.KeyPeer, ratelog.Escape(msg.Peer.String(), 256)),
		slog.Int("frames", d.Frames), slog.Int("len", d.Length), slog.Int("last_frame_len", last),
		slog.String(ratelog.KeyPrefixHex, prefixHex), slog.String(ratelog.KeyErr, ratelog.Escape(err.Error(), 256)))
}

// logLim returns the coordinator's limiter for its own warning lines (state
// drops, start-up unsubscriptions), created on first use.
func (c *Coordinator) logLim() *ratelog.Limiter {
	c.limOnce.Do(func() { c.lim = ratelog.New(ratelog.Config{Logger: c.log, Interval: c.logInterval()}) })
	return c.lim
}
