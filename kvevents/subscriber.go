package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// Errors.
var (
	// ErrClosed is returned by a Subscriber or Publisher used after Close
	// (or after Run returned).
	ErrClosed = errors.New("kvevents: closed")
	// errDuplicateSource is returned by Add for a name already followed.
	errDuplicateSource = errors.New("kvevents: a source with that name is already followed")
	// errUnknownSource is returned by Remove for a name not followed.
	errUnknownSource = errors.New("kvevents: no source with that name")
	// errRunning is returned by a second concurrent Run.
	errRunning = errors.New("kvevents: Run already called")
)

// The kinds of Update, the values of [Update.Kind].
const (
	// UpdateBatch delivers one batch, in order, exactly once.
	UpdateBatch = "batch"
	// UpdateReset: the source's publisher restarted (its sequence went
	// back, jumped more than 2^32 ahead, or a continuity proof found
	// another run), or Subscriber.Resync was called; what the index holds
	// for this source is stale. Seq is the first sequence number seen of
	// the new run (0 after Resync).
	UpdateReset = "reset"
	// UpdateLost: the batches [From, To) could not be recovered, or, after
	// a new connection, continuity with the last delivered batch could not
	// be proven: then From == To is possible (no batch known missing).
	// Either way the source's entries are no longer certain.
	UpdateLost = "lost"
	// UpdateDeparted: the source's engine has left the fleet (issue 36):
	// it was removed (Subscriber.Remove, or a discovery that no longer
	// lists it), or its connection has been gone for Config.EngineTTL.
	// Nothing it published is held any more; the index drops its entries.
	// It is the source's last update; if the engine comes back it is a new
	// run (continuity rules apply from nothing).
	UpdateDeparted = "departed"
)

// Update is what a Handler receives: a batch, a restart or a lost range.
type Update struct {
	// Kind is UpdateBatch, UpdateReset, UpdateLost or UpdateDeparted.
	Kind   string
	Source string
	// Batch is the delivered batch (UpdateBatch). Valid only until the
	// Handler returns.
	Batch *Batch
	// Seq is the batch's sequence number (UpdateBatch) or the first one of
	// the restarted publisher (UpdateReset).
	Seq uint64
	// From and To bound a lost range (UpdateLost), To exclusive.
	From, To uint64
}

// Subscriber follows many KV-event publishers at once. Create it with
// NewSubscriber, add sources with Add (before or during Run), and call Run.
type Subscriber struct {
	cfg   Config
	slots *replaySlots
	log   *rateLog
	// buffered is the bytes of live batches buffered by all sources;
	// nsources the sources followed (for each one's share of
	// MemoryBudget).
	buffered atomic.Int64
	nsources atomic.Int64

	mu      sync.Mutex
	sources map[string]*source
	// removing holds the removed sources whose stop is still under way in
	// its own goroutine; Run waits for them.
	removing map[*source]struct{}
	// departing counts the goroutines delivering a removed source's
	// UpdateDeparted (Remove); shutdown waits for them.
	departing sync.WaitGroup
	// gates holds, by name, a removed source's gate: closed once its stop
	// and its UpdateDeparted are done. A source added under that name
	// meanwhile waits for it before its first delivery (source.lock), so
	// the Handler's calls for one name stay one at a time, in order.
	gates   map[string]chan struct{}
	running bool
	closed  bool
	ctx     context.Context
	cancel  context.CancelFunc
	err     error
}

// NewSubscriber returns a Subscriber; it starts nothing until Add or Run.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{cfg: cfg, slots: newReplaySlots(cfg.MaxReplays, cfg.ReplaySlice),
		log: newRateLog(cfg.Logger, cfg.LogInterval), sources: make(map[string]*source), removing: make(map[*source]struct{}), gates: map[string]chan struct{}{},
		ctx: ctx, cancel: cancel}, nil
}

// Add starts following src. Its sockets connect (or bind) at once; its
// batches are delivered once Run runs. The name must be new.
func (s *Subscriber) Add(src Source) error {
	if src.Name == "" {
		src.Name = src.Live
	}
	if src.Live == "" {
		return errors.New("kvevents: Source.Live is required")
	}
	if err := checkEngine(src.Engine); err != nil {
		return err
	}
	if err := checkFanIn(src); err != nil {
		return err
	}
	if err := s.cfg.checkExposed(src); err != nil {
		return err
	}
	if r := src.Resume; r != nil {
		if r.Seq >= replayErrorSeq {
			return fmt.Errorf("kvevents: source %s: Source.Resume.Seq %d is a replay marker, not a batch", ratelog.Escape(src.Name, 128), r.Seq)
		}
		p := *r
		src.Resume = &p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.sources[src.Name]; ok {
		return fmt.Errorf("%w: %s", errDuplicateSource, ratelog.Escape(src.Name, 128))
	}
	so, err := newSource(s, src)
	if err != nil {
		return err
	}
	if g := s.gates[src.Name]; g != nil {
		so.gates = append(so.gates, g) // the source removed under this name departs first
		if so.fan != nil {
			so.fan.gates = so.gates // its engines deliver for it
		}
	}
	s.sources[src.Name] = so
	s.nsources.Add(1)
	if s.running {
		so.start()
	}
	return nil
}

// Remove stops following the named source: its context is cancelled (a
// Handler blocked on it returns), its sockets are closed, and no Handler
// call for it begins after Remove has returned (one already under way may
// still be running). Remove does not wait: the source's goroutines end in
// the background, once that call has returned (Run waits for them before
// it returns). Remove may thus be called from anywhere, a Handler of this
// source or another included.
//
// The source's last update is an UpdateDeparted (for a fan-in source, one
// per engine it followed), delivered once its other calls have returned, on
// a goroutine of the Subscriber's, never the caller's (so Remove may be
// called holding locks the Handler takes), with the Subscriber's ctx; none
// while the Subscriber closes (Run waits for one under way), and none for a
// source that never delivered anything. A source added again under the
// same name meanwhile delivers nothing before that UpdateDeparted has
// returned (for a fan-in source, its engines wait for those of the one
// removed).
func (s *Subscriber) Remove(name string) error {
	s.mu.Lock()
	so, ok := s.sources[name]
	delete(s.sources, name)
	if ok {
		s.nsources.Add(-1)
		s.removing[so] = struct{}{}
	}
	depart := ok && !s.closed
	if depart {
		s.departing.Add(1)
	}
	var gate chan struct{}
	if ok {
		gate = make(chan struct{})
		s.gates[name] = gate
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", errUnknownSource, ratelog.Escape(name, 128))
	}
	so.removed.Store(true)
	so.cancel()
	go func() {
		defer func() {
			// A source added under this name meanwhile may deliver now.
			s.mu.Lock()
			if s.gates[name] == gate {
				delete(s.gates, name)
			}
			s.mu.Unlock()
			close(gate)
		}()
		so.stop()
		s.mu.Lock()
		delete(s.removing, so)
		s.mu.Unlock()
		if depart {
			defer s.departing.Done()
			so.departRemoved()
		}
	}()
	return nil
}

// Resync forgets where the named source stands: the Handler's next update
// for it is an UpdateReset (Seq 0), then delivery starts again from the
// oldest batch the publisher still holds (a replay from sequence 0) or,
// for a source without a replay endpoint, from the next live batch. Use it
// when what was applied for the source is gone (a lost shared index).
//
// Resync does not wait: the reset is delivered on the source's own
// goroutines (at once, even if no batch comes), never on the caller's, so
// it may be called from any goroutine, a Handler included. Calls before
// the reset is delivered make one reset; a call before Run is performed
// when Run starts. It returns an error naming the source when no source
// has that name, and ErrClosed after Close. For a fan-in source it resyncs
// each engine it follows.
func (s *Subscriber) Resync(name string) error {
	s.mu.Lock()
	so, closed := s.sources[name], s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if so == nil {
		return fmt.Errorf("%w: %s", errUnknownSource, ratelog.Escape(name, 128))
	}
	if so.fan != nil {
		// A fan-in source: each of its engines.
		for _, e := range so.fan.engines() {
			e.requestResync()
		}
		return nil
	}
	so.requestResync()
	return nil
}

// Logger returns the logger the Subscriber writes to (Config.Logger, or
// slog.Default() when that was nil), for code that acts on its behalf
// (discovery.Follow logs its joins and leaves there).
func (s *Subscriber) Logger() *slog.Logger { return s.cfg.Logger }

// Endpoint returns the endpoint a Bind or FanIn source actually listens on (the port
// chosen for ":0"), or its Live endpoint when dialed; "" for an unknown name.
func (s *Subscriber) Endpoint(name string) string {
	s.mu.Lock()
	so := s.sources[name]
	s.mu.Unlock()
	if so == nil {
		return ""
	}
	if so.src.Bind || so.src.FanIn {
		return so.sock.Endpoint()
	}
	return so.src.Live
}

// Run delivers updates until ctx ends (it returns nil), Close is called
// (ErrClosed), or a Handler returns an error (Run returns it). On return
// every source is stopped and closed; a Subscriber runs once.
func (s *Subscriber) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if s.running {
		s.mu.Unlock()
		return errRunning
	}
	s.running = true
	stop := context.AfterFunc(ctx, s.cancel)
	for _, so := range s.sources {
		so.start()
	}
	s.mu.Unlock()
	<-s.ctx.Done()
	stop()
	// Stats after Run keep saying which sources were connected when it
	// ended, not that closing disconnected them.
	s.mu.Lock()
	for _, so := range s.sources {
		so.freeze()
	}
	s.mu.Unlock()
	s.shutdown()
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrClosed
}

// Close stops Run and every source and returns without waiting for them:
// no Handler call begins once Close has returned (one already under way may
// still be running), every source's context is cancelled, and Run, told to return, stops the sources and returns
// ErrClosed once their goroutines (and a Handler call under way) have
// ended. Without a running Run, Close closes the sources' sockets itself
// (no goroutine of theirs was started). Close never waits for a Handler,
// so it may be called from anywhere, a Handler included. It is idempotent.
func (s *Subscriber) Close() error {
	s.cancel()
	list := s.closeAll()
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if running {
		return nil // Run stops the sources and waits for them
	}
	for _, so := range list {
		// Never started: stop waits for no goroutine of the source.
		so.stop()
	}
	return nil
}

// closeAll marks the Subscriber closed and returns every source, removed
// ones still stopping included, each marked removed.
func (s *Subscriber) closeAll() []*source {
	s.mu.Lock()
	s.closed = true
	list := make([]*source, 0, len(s.sources)+len(s.removing))
	for _, so := range s.sources {
		list = append(list, so)
	}
	for so := range s.removing {
		list = append(list, so)
	}
	s.mu.Unlock()
	for _, so := range list {
		so.removed.Store(true)
		so.cancel()
	}
	return list
}

// shutdown (Run's, never a callback's) stops every source and waits for
// them all, their sockets' goroutines included.
func (s *Subscriber) shutdown() {
	list := s.closeAll()
	var wg sync.WaitGroup
	for _, so := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			so.stop()
			if so.sock != nil { // a fan-in engine has none of its own
				_ = so.sock.Shutdown(context.Background()) // closed by stop: ends once its goroutines have
			}
		}()
	}
	wg.Wait()
	s.departing.Wait()
}

// fail records the first fatal error and ends Run.
func (s *Subscriber) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.cancel()
}
