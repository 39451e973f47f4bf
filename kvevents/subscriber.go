package kvevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/internal/reentry"
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

// callHandler is the one place Config.Handler is called: Remove and Close look
// for it on their caller's stack (reentry.Within) to know that they run
// inside a Handler and must not wait for it.
//
//go:noinline
func callHandler(h func(context.Context, Update) error, ctx context.Context, u Update) error {
	return h(ctx, u)
}

var handlerMarker = reentry.NewMarker(callHandler)

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
	// removing holds the sources removed from inside a Handler whose
	// stop is still under way in its own goroutine; Run and Close wait for
	// them.
	removing map[*source]struct{}
	running  bool
	closed   bool
	ctx      context.Context
	cancel   context.CancelFunc
	err      error
}

// NewSubscriber returns a Subscriber; it starts nothing until Add or Run.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{cfg: cfg, slots: newReplaySlots(cfg.MaxReplays, cfg.ReplaySlice),
		log: newRateLog(cfg.Logger, cfg.LogInterval), sources: make(map[string]*source), removing: make(map[*source]struct{}),
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
	s.sources[src.Name] = so
	s.nsources.Add(1)
	if s.running {
		so.start()
	}
	return nil
}

// Remove stops following the named source and closes its sockets; it
// returns once the source's goroutines (and an in-flight Handler call for
// it) have finished.
//
// Called from inside a Handler (of this source or another), Remove does not
// wait, since the Handler that called it is one of the calls it would wait
// for: it marks the source removed, so that no further Handler call for it
// begins on its own goroutines, and returns; the source's context is
// cancelled, its sockets closed and its goroutines ended in the background
// once its in-flight call has returned (Run and Close wait for that). For
// the caller's own source nothing more is delivered after Remove returns;
// for another source, a call that had already begun may still be running.
//
// Once the source is stopped, the Handler gets an UpdateDeparted for it
// (issue 36): the source's last Handler call, after its last update, on
// Remove's goroutine (or, called from inside a Handler, on the background
// goroutine that stops the source), so that an index drops the engine's
// entries; its ctx is the Subscriber's (the source's own is cancelled). It is not delivered when Run has not started or the Subscriber
// is closing (Close and the end of Run stop sources without retiring
// them); a Handler error returned for it ends Run as any other.
func (s *Subscriber) Remove(name string) error {
	inside := reentry.Within(handlerMarker)
	s.mu.Lock()
	so, ok := s.sources[name]
	delete(s.sources, name)
	if ok {
		s.nsources.Add(-1)
	}
	if ok && inside {
		s.removing[so] = struct{}{}
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", errUnknownSource, ratelog.Escape(name, 128))
	}
	so.removed.Store(true)
	so.cancel()
	if inside {
		go func() {
			so.stop()
			s.departed(so)
			s.mu.Lock()
			delete(s.removing, so)
			s.mu.Unlock()
		}()
		return nil
	}
	so.stop()
	s.departed(so)
	return nil
}

// departed delivers a removed source's UpdateDeparted, after its stop
// (no other Handler call for it can be running), while Run runs.
func (s *Subscriber) departed(so *source) {
	s.mu.Lock()
	run := s.running && !s.closed
	s.mu.Unlock()
	ctx := s.ctx
	if !run || ctx.Err() != nil {
		return
	}
	err := callHandler(s.cfg.Handler, ctx, Update{Kind: UpdateDeparted, Source: so.src.Name})
	if err != nil && (!errors.Is(err, context.Canceled) || ctx.Err() == nil) {
		s.fail(err)
	}
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
// has that name, and ErrClosed after Close.
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
	so.requestResync()
	return nil
}

// Endpoint returns the endpoint a Bind source actually listens on (the port
// chosen for ":0"), or its Live endpoint when dialed; "" for an unknown name.
func (s *Subscriber) Endpoint(name string) string {
	s.mu.Lock()
	so := s.sources[name]
	s.mu.Unlock()
	if so == nil {
		return ""
	}
	if so.src.Bind {
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

// Close stops Run and every source, and returns once their goroutines have
// ended. It is idempotent.
//
// Called from inside a Handler, Close does not wait (it would wait for the
// Handler that called it): every source is marked stopped, so that no
// further Handler call begins on the sources' goroutines, Run is told to
// return, and the sources are stopped in the background; Run returns
// ErrClosed once they have all ended.
func (s *Subscriber) Close() error {
	s.cancel()
	if reentry.Within(handlerMarker) {
		s.shutdownNoWait()
		return nil
	}
	s.shutdown()
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

// shutdown stops every source and waits for them all.
func (s *Subscriber) shutdown() {
	list := s.closeAll()
	var wg sync.WaitGroup
	for _, so := range list {
		wg.Add(1)
		go func() { defer wg.Done(); so.stop() }()
	}
	wg.Wait()
}

// shutdownNoWait is shutdown from inside a Handler: the sources stop in the
// background (their stopOnce makes a later shutdown, Run's, wait for them).
func (s *Subscriber) shutdownNoWait() {
	for _, so := range s.closeAll() {
		go so.stop()
	}
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
