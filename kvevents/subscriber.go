package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/reentry"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Defaults for Config.
const (
	// DefaultReplayTimeout is how long a replay may stay silent (no reply
	// message at all) before it is given up.
	DefaultReplayTimeout = 10 * time.Second
	// DefaultReplayDeadline bounds a whole replay, however chatty the
	// replay server is.
	DefaultReplayDeadline = 60 * time.Second
	// DefaultMaxReplays caps the replays running at once across all sources.
	DefaultMaxReplays = 16
	// DefaultReplayBackoff is the first pause before a source's next replay
	// after one failed; it doubles per failure up to DefaultReplayBackoffMax.
	DefaultReplayBackoff    = 500 * time.Millisecond
	DefaultReplayBackoffMax = 30 * time.Second
	// DefaultMaxBuffered bounds the live batches one source buffers while
	// its replay runs; DefaultMaxBufferedBytes bounds their payload bytes.
	DefaultMaxBuffered      = 4096
	DefaultMaxBufferedBytes = 64 << 20 // one batch of DefaultMaxPayload
	// ReplayAhead is how far past the highest live sequence number seen a
	// replayed batch may be; one further ahead is refused.
	ReplayAhead = 1024
	// MaxLostRanges is how many recent lost ranges SourceStats keeps.
	MaxLostRanges = 16
	// endSeq is the replay end marker's sequence number (-1 as 8 bytes).
	endSeq = ^uint64(0)
)

// Errors.
var (
	// ErrClosed is returned by a Subscriber or Publisher used after Close
	// (or after Run returned).
	ErrClosed = errors.New("kvevents: closed")
	// ErrDuplicateSource is returned by Add for a name already followed.
	ErrDuplicateSource = errors.New("kvevents: a source with that name is already followed")
	// ErrUnknownSource is returned by Remove for a name not followed.
	ErrUnknownSource = errors.New("kvevents: no source with that name")
	// ErrRunning is returned by a second concurrent Run.
	ErrRunning = errors.New("kvevents: Run already called")
)

// Source is one publisher to follow: one engine, or one DP rank of an engine
// (each rank publishes on its own port, see OffsetPort).
type Source struct {
	// Name identifies the source in updates and stats (default: Live).
	Name string
	// Live is the publisher's live endpoint ("tcp://host:5557"). It is
	// dialed, unless Bind is set.
	Live string
	// Bind makes the Subscriber bind Live and let the publisher connect
	// (vLLM connects its PUB when its endpoint names a host, not "*").
	Bind bool
	// Replay is the publisher's replay endpoint (its ROUTER, always bound
	// by the publisher), or "" if it has none: gaps are then reported lost
	// at once.
	Replay string
}

// UpdateKind says what an Update reports.
type UpdateKind uint8

// The update kinds.
const (
	// UpdateBatch delivers one batch, in order, exactly once.
	UpdateBatch UpdateKind = iota + 1
	// UpdateReset: the source's sequence went back, so its publisher
	// restarted; what the index holds for this source is stale. Seq is the
	// first sequence number of the new run.
	UpdateReset
	// UpdateLost: the batches [From, To) could not be recovered.
	UpdateLost
)

// String returns the kind's lower-case name.
func (k UpdateKind) String() string {
	switch k {
	case UpdateBatch:
		return "batch"
	case UpdateReset:
		return "reset"
	case UpdateLost:
		return "lost"
	}
	return "unknown"
}

// Update is what a Handler receives: a batch, a restart or a lost range.
type Update struct {
	Kind   UpdateKind
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

// Handler receives updates. For one source it is called in sequence order,
// never concurrently; for different sources it is called concurrently, from
// the sources' own goroutines. It must return promptly (it holds up only
// its own source). A non-nil error ends Run with it.
//
// What a Handler may call on its Subscriber: Stats, Endpoint and Add, as
// anywhere; Remove, of its own source or any other, and Close, which then
// do not wait for Handler calls to return (the caller's own call is one of
// them): see [Subscriber.Remove] and [Subscriber.Close]. None of them
// deadlocks from a Handler. The Handler's ctx is cancelled as soon as its
// source is removed or the Subscriber closes (or Run's ctx ends). A Handler
// must not wait for another goroutine that calls Remove or Close (that
// goroutine is not recognised as being inside the Handler, and waits for
// it).
type Handler func(ctx context.Context, u Update) error

// callHandler is the one place a Handler is called: Remove and Close look
// for it on their caller's stack (reentry.Within) to know that they run
// inside a Handler and must not wait for it.
//
//go:noinline
func callHandler(h Handler, ctx context.Context, u Update) error { return h(ctx, u) }

var handlerMarker = reentry.NewMarker(callHandler)

// Config configures a Subscriber. Handler is required; zero fields take the
// defaults.
type Config struct {
	// Release is the vLLM release the fleet runs (zero value: vllm.Latest).
	// The Subscriber accepts both event forms and both replay framings
	// whatever it says; it is kept for stats and future rules.
	Release vllm.Release
	// Handler receives every update.
	Handler Handler
	// Topic is the subscription prefix sent to every publisher ("" = all),
	// and replayed batches must carry a topic it prefixes.
	Topic string
	// FromStart makes a source joined mid-stream replay from sequence 0;
	// by default delivery starts at the first batch seen.
	FromStart bool
	// ReplayTimeout is the longest a replay may stay silent
	// (DefaultReplayTimeout); ReplayDeadline bounds it as a whole
	// (DefaultReplayDeadline).
	ReplayTimeout  time.Duration
	ReplayDeadline time.Duration
	// MaxReplays caps concurrent replays across sources (DefaultMaxReplays).
	MaxReplays int
	// ReplayBackoff and ReplayBackoffMax pace a source's replays after
	// failures.
	ReplayBackoff, ReplayBackoffMax time.Duration
	// MaxBuffered and MaxBufferedBytes bound the live batches one source
	// holds while it replays; past them a live batch is not buffered
	// (counted in BufferOverflows) and is recovered from the replay or
	// reported lost.
	MaxBuffered, MaxBufferedBytes int
	// Limits bounds each payload (size before decode, event count).
	Limits Limits
	// Socket is the options of every source's SUB and replay DEALER
	// (transport limits, reconnect pacing). MaxMessageSize is raised to
	// hold Limits.MaxPayload when left smaller, and a positive MemoryBudget
	// then to at least twice it (the socket's default rule, so that
	// socket.DefaultOptions() works as given); a zero write buffer is set
	// small (4 KiB), since a subscriber writes only subscriptions and
	// replay requests.
	Socket socket.Options
	// Logger receives rate-limited lines about drops, gaps, lost ranges
	// and resets (nil: slog.Default()). Peer bytes appear only as hex.
	Logger *slog.Logger
	// LogInterval is the shortest time between two lines of one kind
	// (default 1 s).
	LogInterval time.Duration
}

func (c *Config) fill() error {
	if c.Handler == nil {
		return errors.New("kvevents: Config.Handler is required")
	}
	if c.ReplayTimeout < 0 || c.ReplayDeadline < 0 || c.MaxReplays < 0 || c.MaxBuffered < 0 || c.MaxBufferedBytes < 0 {
		return errors.New("kvevents: negative limit in Config")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ReplayTimeout, DefaultReplayTimeout)
	def(&c.ReplayDeadline, DefaultReplayDeadline)
	def(&c.ReplayBackoff, DefaultReplayBackoff)
	def(&c.ReplayBackoffMax, DefaultReplayBackoffMax)
	def(&c.LogInterval, time.Second)
	if c.MaxReplays == 0 {
		c.MaxReplays = DefaultMaxReplays
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = DefaultMaxBuffered
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	c.Limits = c.Limits.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if need := int64(c.Limits.MaxPayload) + 64<<10; c.Socket.Guard.MaxMessageSize < need {
		c.Socket.Guard.MaxMessageSize = need
		// The socket's own rule for its default budget: twice the
		// largest message (a budget below it would refuse the options).
		if b := c.Socket.MemoryBudget; b > 0 && b < 2*need {
			c.Socket.MemoryBudget = 2 * need
		}
	}
	if c.Socket.Guard.WriteBufferSize == 0 {
		c.Socket.Guard.WriteBufferSize = 4 << 10
	}
	return c.Socket.Verify()
}

// Subscriber follows many KV-event publishers at once. Create it with
// NewSubscriber, add sources with Add (before or during Run), and call Run.
type Subscriber struct {
	cfg Config
	sem chan struct{}
	log *rateLog

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
	return &Subscriber{cfg: cfg, sem: make(chan struct{}, cfg.MaxReplays),
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.sources[src.Name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateSource, decodeguard.EscapeText(src.Name, 128))
	}
	so, err := newSource(s, src)
	if err != nil {
		return err
	}
	s.sources[src.Name] = so
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
func (s *Subscriber) Remove(name string) error {
	inside := reentry.Within(handlerMarker)
	s.mu.Lock()
	so, ok := s.sources[name]
	delete(s.sources, name)
	if ok && inside {
		s.removing[so] = struct{}{}
	}
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownSource, decodeguard.EscapeText(name, 128))
	}
	so.removed.Store(true)
	so.cancel()
	if inside {
		go func() {
			so.stop()
			s.mu.Lock()
			delete(s.removing, so)
			s.mu.Unlock()
		}()
		return nil
	}
	so.stop()
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
		return ErrRunning
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

// Range is a range of sequence numbers [From, To).
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// EventCounts counts delivered events by type.
type EventCounts struct {
	BlockStored      uint64 `json:"block_stored"`
	BlockRemoved     uint64 `json:"block_removed"`
	AllBlocksCleared uint64 `json:"all_blocks_cleared"`
}

// SourceStats is a snapshot of one source's counters (or, in Stats.Total,
// their sums).
type SourceStats struct {
	Name   string `json:"name,omitempty"`
	Live   string `json:"live,omitempty"`
	Replay string `json:"replay,omitempty"`
	// Connected reports whether the live connection is up (in Total: how
	// many sources are connected, in ConnectedSources).
	Connected bool `json:"connected"`
	// LastSeen is when the last live message arrived (zero if none).
	LastSeen time.Time `json:"last_seen"`
	// Batches and Events count what was delivered.
	Batches uint64      `json:"batches"`
	Events  EventCounts `json:"events"`
	// Gaps counts detected gaps; Replays replay sessions; Replayed the
	// batches delivered from replay; Lost the batches reported lost;
	// Resets publisher restarts; Duplicates batches already delivered.
	Gaps       uint64 `json:"gaps"`
	Replays    uint64 `json:"replays"`
	Replayed   uint64 `json:"replayed"`
	Lost       uint64 `json:"lost"`
	Resets     uint64 `json:"resets"`
	Duplicates uint64 `json:"duplicates"`
	// BufferOverflows counts live batches not buffered during a replay.
	BufferOverflows uint64 `json:"buffer_overflows"`
	// LostRanges are the latest lost ranges (at most MaxLostRanges).
	LostRanges []Range `json:"lost_ranges,omitempty"`
	// Dropped counts refused messages and batches by reason (frames,
	// sequence frame, payload size and decode, replay replies).
	Dropped decodeguard.Counts `json:"dropped"`
	// DroppedEvents counts events left out of delivered batches by reason.
	DroppedEvents decodeguard.Counts `json:"dropped_events"`
	// UnsupportedTypes counts the events dropped as unsupported (a type
	// this release does not know, such as a newer vLLM's) by type name,
	// escaped: at most MaxUnsupportedTypes names, then "other" for the rest.
	UnsupportedTypes map[string]uint64 `json:"unsupported_types,omitempty"`
	// Refused counts connections of the live socket refused by the
	// transport guards (bad greeting, handshake, oversize frames, caps).
	Refused decodeguard.Counts `json:"refused"`
	// ConnectedSources is, in Stats.Total, how many sources are connected.
	ConnectedSources int `json:"connected_sources,omitempty"`
}

// Stats is a snapshot of a Subscriber's counters.
type Stats struct {
	// Sources holds one entry per followed source, by name.
	Sources []SourceStats `json:"sources"`
	// Total sums the sources' counters.
	Total SourceStats `json:"total"`
}

// Stats returns a snapshot of every source's counters and their sums. After
// Run has returned, Connected says whether a source was connected when Run
// ended.
func (s *Subscriber) Stats() Stats {
	s.mu.Lock()
	list := make([]*source, 0, len(s.sources))
	for _, so := range s.sources {
		list = append(list, so)
	}
	s.mu.Unlock()
	st := Stats{Sources: make([]SourceStats, 0, len(list))}
	for _, so := range list {
		st.Sources = append(st.Sources, so.stats())
	}
	sort.Slice(st.Sources, func(i, j int) bool { return st.Sources[i].Name < st.Sources[j].Name })
	t := &st.Total
	for _, x := range st.Sources {
		t.Batches += x.Batches
		t.Events.BlockStored += x.Events.BlockStored
		t.Events.BlockRemoved += x.Events.BlockRemoved
		t.Events.AllBlocksCleared += x.Events.AllBlocksCleared
		t.Gaps += x.Gaps
		t.Replays += x.Replays
		t.Replayed += x.Replayed
		t.Lost += x.Lost
		t.Resets += x.Resets
		t.Duplicates += x.Duplicates
		t.BufferOverflows += x.BufferOverflows
		t.Dropped.Add(&x.Dropped)
		t.DroppedEvents.Add(&x.DroppedEvents)
		for name, n := range x.UnsupportedTypes {
			t.UnsupportedTypes = countType(t.UnsupportedTypes, name, n)
		}
		t.Refused.Add(&x.Refused)
		if x.Connected {
			t.ConnectedSources++
		}
		if x.LastSeen.After(t.LastSeen) {
			t.LastSeen = x.LastSeen
		}
	}
	t.Connected = t.ConnectedSources > 0
	return st
}

// liveMsg is one live message after the frame checks.
type liveMsg struct {
	seq     uint64
	payload []byte
}

type buffered struct {
	seq     uint64
	payload []byte
}

// source is one followed publisher.
type source struct {
	sub  *Subscriber
	src  Source
	sock *socket.Socket
	lp   *loop.Loop[liveMsg]

	peers    atomic.Int32
	lastSeen atomic.Int64
	// removed is set by Remove and Close: no Handler call begins once it
	// is (emit checks it, under mu).
	removed atomic.Bool
	// frozen, once set, holds 1 + whether the source was connected when
	// Run ended.
	frozen atomic.Int32

	startOnce sync.Once
	stopOnce  sync.Once
	ctx       context.Context    // set by newSource, never changed
	cancel    context.CancelFunc // cancels ctx; safe from any goroutine
	wg        sync.WaitGroup

	// mu serializes delivery and guards the sequence state.
	mu           sync.Mutex
	started      bool
	next         uint64 // next sequence number to deliver
	lastLive     uint64 // last live sequence number seen
	maxSeen      uint64 // highest live sequence number seen in this run
	replaying    bool
	gen          uint64 // bumped to invalidate a running replay
	cancelReplay context.CancelFunc
	buf          []buffered
	bufBytes     int
	failures     int
	replayAfter  time.Time
	batch        Batch

	// smu guards the counters below.
	smu sync.Mutex
	st  SourceStats
}

func newSource(s *Subscriber, src Source) (*source, error) {
	so := &source{sub: s, src: src}
	// The source's context is the Subscriber's, from the start: Remove and
	// Close cancel it without taking so.mu (which a Handler's caller holds).
	so.ctx, so.cancel = context.WithCancel(s.ctx)
	so.st.Name, so.st.Live, so.st.Replay = src.Name, src.Live, src.Replay
	so.batch.Source = src.Name
	opts := s.cfg.Socket
	user := opts.OnEvent
	opts.OnEvent = func(e socket.Event) {
		switch e.Kind {
		case socket.EventConnected:
			so.peers.Add(1)
		case socket.EventDisconnected:
			so.peers.Add(-1)
		}
		if user != nil {
			user(e)
		}
	}
	sock, err := socket.NewSub(opts)
	if err != nil {
		return nil, err
	}
	if err := sock.Subscribe([]byte(s.cfg.Topic)); err != nil {
		sock.Close()
		return nil, err
	}
	if src.Bind {
		err = sock.Bind(src.Live)
	} else {
		err = sock.Dial(src.Live)
	}
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: source %s: %w", decodeguard.EscapeText(src.Name, 128), err)
	}
	maxPayload := s.cfg.Limits.MaxPayload
	lp, err := loop.New(sock, loop.Config[liveMsg]{
		Name:        "kvevents " + src.Name,
		Logger:      s.cfg.Logger,
		LogInterval: s.cfg.LogInterval,
		Decode: func(frames [][]byte, dst *liveMsg) error {
			var err error
			dst.seq, dst.payload, err = parseLive(frames, maxPayload)
			return err
		},
		Handler: func(ctx context.Context, d loop.Delivery[liveMsg]) error {
			return so.onLive(ctx, d.Value.seq, d.Value.payload)
		},
	})
	if err != nil {
		sock.Close()
		return nil, err
	}
	so.sock, so.lp = sock, lp
	return so, nil
}

func (so *source) start() {
	so.startOnce.Do(func() {
		so.wg.Add(1)
		go func() {
			defer so.wg.Done()
			err := so.lp.Run(so.ctx)
			if err != nil && !errors.Is(err, loop.ErrLoopClosed) && !errors.Is(err, socket.ErrClosed) && so.ctx.Err() == nil {
				so.sub.fail(err)
			}
		}()
	})
}

func (so *source) stop() {
	so.stopOnce.Do(func() {
		so.cancel()
		so.mu.Lock()
		if so.cancelReplay != nil {
			so.cancelReplay()
		}
		so.mu.Unlock()
		so.lp.Close()
		so.sock.Close()
		so.wg.Wait()
	})
}

func (so *source) freeze() {
	if so.peers.Load() > 0 {
		so.frozen.Store(2)
	} else {
		so.frozen.Store(1)
	}
}

func (so *source) stats() SourceStats {
	so.smu.Lock()
	st := so.st
	st.LostRanges = append([]Range(nil), so.st.LostRanges...)
	if so.st.UnsupportedTypes != nil {
		st.UnsupportedTypes = make(map[string]uint64, len(so.st.UnsupportedTypes))
		for k, v := range so.st.UnsupportedTypes {
			st.UnsupportedTypes[k] = v
		}
	}
	so.smu.Unlock()
	ls := so.lp.Stats()
	st.Dropped.Add(&ls.Dropped)
	ss := so.sock.Stats()
	st.Refused = ss.Violations
	st.Connected = so.peers.Load() > 0
	if f := so.frozen.Load(); f != 0 {
		st.Connected = f == 2
	}
	if ns := so.lastSeen.Load(); ns != 0 {
		st.LastSeen = time.Unix(0, ns)
	}
	return st
}

func (so *source) count(f func(st *SourceStats)) {
	so.smu.Lock()
	f(&so.st)
	so.smu.Unlock()
}

// emit calls the handler (so.mu held), unless the source was removed.
func (so *source) emit(u Update) error {
	if so.removed.Load() {
		return nil
	}
	u.Source = so.src.Name
	ctx := so.ctx
	if err := callHandler(so.sub.cfg.Handler, ctx, u); err != nil {
		if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
			so.sub.fail(err)
		}
		return err
	}
	return nil
}

// onLive handles one live batch in the source's receive goroutine.
func (so *source) onLive(ctx context.Context, seq uint64, payload []byte) error {
	so.lastSeen.Store(time.Now().UnixNano())
	so.mu.Lock()
	defer so.mu.Unlock()
	switch {
	case !so.started:
		so.started = true
		if !so.sub.cfg.FromStart {
			so.next = seq
		}
	case seq <= so.lastLive:
		// The publisher restarted: its sequence starts again at 0.
		so.abortReplay()
		so.count(func(st *SourceStats) { st.Resets++ })
		so.sub.log.line(logReset, so.sub.cfg.Logger, "kvevents: publisher restarted", "source", so.src.Name,
			"seq", seq, "previous", so.lastLive)
		if err := so.emit(Update{Kind: UpdateReset, Seq: seq}); err != nil {
			return err
		}
		so.next, so.maxSeen = 0, 0
	}
	so.lastLive = seq
	so.maxSeen = max(so.maxSeen, seq)
	if so.replaying {
		so.bufferLive(seq, payload)
		return nil
	}
	switch {
	case seq == so.next:
		return so.deliver(seq, payload, false)
	case seq < so.next:
		so.count(func(st *SourceStats) { st.Duplicates++ })
		return nil
	}
	so.count(func(st *SourceStats) { st.Gaps++ })
	so.sub.log.line(logGap, so.sub.cfg.Logger, "kvevents: gap", "source", so.src.Name, "from", so.next, "to", seq)
	if so.src.Replay == "" {
		if err := so.lose(so.next, seq); err != nil {
			return err
		}
		return so.deliver(seq, payload, false)
	}
	so.replaying = true
	so.bufferLive(seq, payload)
	so.gen++
	rctx, cancel := context.WithCancel(so.ctx)
	so.cancelReplay = cancel
	so.wg.Add(1)
	go so.replay(rctx, so.gen, so.next)
	_ = ctx
	return nil
}

// abortReplay invalidates a running replay and its buffer (so.mu held).
func (so *source) abortReplay() {
	if !so.replaying {
		return
	}
	so.gen++
	so.cancelReplay()
	so.replaying = false
	so.buf = nil
	so.bufBytes = 0
}

func (so *source) bufferLive(seq uint64, payload []byte) {
	cfg := &so.sub.cfg
	if len(so.buf) >= cfg.MaxBuffered || so.bufBytes+len(payload) > cfg.MaxBufferedBytes {
		so.count(func(st *SourceStats) { st.BufferOverflows++ })
		return
	}
	so.buf = append(so.buf, buffered{seq: seq, payload: append([]byte(nil), payload...)})
	so.bufBytes += len(payload)
}

// deliver decodes and hands one batch to the handler, and advances next
// (so.mu held). A batch that fails to decode is counted and skipped; only a
// handler error is returned.
func (so *source) deliver(seq uint64, payload []byte, replayed bool) error {
	so.next = seq + 1
	b := &so.batch
	err := DecodeBatch(payload, so.sub.cfg.Limits, b, so.onEventDrop)
	if err != nil {
		r := decodeguard.ReasonOf(err)
		so.count(func(st *SourceStats) { st.Dropped[r]++ })
		so.sub.log.drop(r, so.src.Name, seq, err, payload)
		return nil
	}
	b.Seq, b.Replayed = seq, replayed
	so.count(func(st *SourceStats) {
		st.Batches++
		if replayed {
			st.Replayed++
		}
		for i := range b.Events {
			switch b.Events[i].Type {
			case BlockStored:
				st.Events.BlockStored++
			case BlockRemoved:
				st.Events.BlockRemoved++
			case AllBlocksCleared:
				st.Events.AllBlocksCleared++
			}
		}
	})
	return so.emit(Update{Kind: UpdateBatch, Batch: b, Seq: seq})
}

func (so *source) onEventDrop(d EventDrop) {
	r := decodeguard.ReasonOf(d.Err)
	so.count(func(st *SourceStats) {
		st.DroppedEvents[r]++
		if r == decodeguard.ReasonUnsupported {
			st.UnsupportedTypes = countType(st.UnsupportedTypes, decodeguard.EscapeText(d.Type, 64), 1)
		}
	})
	so.sub.log.drop(r, so.src.Name, so.next-1, d.Err, nil)
}

// MaxUnsupportedTypes is how many distinct unsupported event type names
// SourceStats.UnsupportedTypes keeps; further names count under "other".
const MaxUnsupportedTypes = 16

// countType adds n to name's count in m, or to "other" when m already holds
// MaxUnsupportedTypes names (and not this one).
func countType(m map[string]uint64, name string, n uint64) map[string]uint64 {
	if m == nil {
		m = make(map[string]uint64)
	}
	named := len(m)
	if _, ok := m["other"]; ok {
		named--
	}
	if _, ok := m[name]; !ok && name != "other" && named >= MaxUnsupportedTypes {
		name = "other"
	}
	m[name] += n
	return m
}

// lose reports [from, to) lost (so.mu held).
func (so *source) lose(from, to uint64) error {
	if to <= from {
		return nil
	}
	so.count(func(st *SourceStats) {
		st.Lost += to - from
		if len(st.LostRanges) == MaxLostRanges {
			copy(st.LostRanges, st.LostRanges[1:])
			st.LostRanges = st.LostRanges[:MaxLostRanges-1]
		}
		st.LostRanges = append(st.LostRanges, Range{From: from, To: to})
	})
	so.sub.log.line(logLost, so.sub.cfg.Logger, "kvevents: batches lost", "source", so.src.Name, "from", from, "to", to)
	so.next = to
	return so.emit(Update{Kind: UpdateLost, From: from, To: to})
}

// advance delivers buffered batches that are next in order (so.mu held).
func (so *source) advance() error {
	for len(so.buf) > 0 {
		h := so.buf[0]
		if h.seq > so.next {
			return nil
		}
		so.buf = so.buf[1:]
		so.bufBytes -= len(h.payload)
		if h.seq < so.next {
			so.count(func(st *SourceStats) { st.Duplicates++ })
			continue
		}
		if err := so.deliver(h.seq, h.payload, false); err != nil {
			return err
		}
	}
	return nil
}

// applyReplayed places one replayed batch (so.mu held).
func (so *source) applyReplayed(seq uint64, payload []byte) error {
	for {
		if err := so.advance(); err != nil {
			return err
		}
		if seq < so.next {
			so.count(func(st *SourceStats) { st.Duplicates++ })
			return nil
		}
		if seq == so.next {
			return so.deliver(seq, payload, true)
		}
		// The replay skipped [next, seq): the publisher no longer holds it.
		to := seq
		if len(so.buf) > 0 && so.buf[0].seq < to {
			to = so.buf[0].seq
		}
		if err := so.lose(so.next, to); err != nil {
			return err
		}
	}
}

// finishReplay delivers what the buffer holds and reports what is still
// missing as lost (so.mu held).
func (so *source) finishReplay() error {
	for {
		if err := so.advance(); err != nil {
			return err
		}
		if len(so.buf) == 0 {
			break
		}
		if err := so.lose(so.next, so.buf[0].seq); err != nil {
			return err
		}
	}
	if so.next <= so.maxSeen {
		if err := so.lose(so.next, so.maxSeen+1); err != nil {
			return err
		}
	}
	so.replaying = false
	so.buf, so.bufBytes = nil, 0
	return nil
}

// replay runs one replay session for gen, off the receive path.
func (so *source) replay(ctx context.Context, gen, from uint64) {
	defer so.wg.Done()
	cfg := &so.sub.cfg
	select {
	case so.sub.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-so.sub.sem }()
	so.mu.Lock()
	wait := time.Until(so.replayAfter)
	so.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	so.count(func(st *SourceStats) { st.Replays++ })
	ended, why := so.session(ctx, gen, from)
	so.mu.Lock()
	defer so.mu.Unlock()
	if so.gen != gen || ctx.Err() != nil && so.ctx.Err() != nil {
		return
	}
	if ended {
		so.failures = 0
	} else {
		so.failures++
		d := cfg.ReplayBackoff << min(so.failures-1, 16)
		so.replayAfter = time.Now().Add(min(d, cfg.ReplayBackoffMax))
		so.sub.log.line(logReplay, cfg.Logger, "kvevents: replay ended without its end marker", "source", so.src.Name,
			"endpoint", so.src.Replay, "why", why)
	}
	_ = so.finishReplay()
}

// session sends the replay request and applies the replies. It reports
// whether the replay ended properly (end marker, or caught up with the live
// stream) and, if not, why.
func (so *source) session(ctx context.Context, gen, from uint64) (bool, string) {
	cfg := &so.sub.cfg
	opts := cfg.Socket
	opts.OnEvent = nil
	d, err := socket.NewDealer(opts)
	if err != nil {
		return false, err.Error()
	}
	defer d.Close()
	if err := d.Dial(so.src.Replay); err != nil {
		return false, err.Error()
	}
	total, cancel := context.WithTimeout(ctx, cfg.ReplayDeadline)
	defer cancel()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], from)
	sctx, scancel := context.WithTimeout(total, cfg.ReplayTimeout)
	err = d.Send(sctx, []byte{}, req[:])
	scancel()
	if err != nil {
		return false, "no replay server: " + err.Error()
	}
	topic := cfg.Topic
	for {
		rctx, rcancel := context.WithTimeout(total, cfg.ReplayTimeout)
		msg, err := d.Recv(rctx)
		rcancel()
		if err != nil {
			if total.Err() != nil && ctx.Err() == nil {
				return false, "past the replay deadline"
			}
			return false, "silent for the replay timeout: " + err.Error()
		}
		seq, payload, end, err := parseReply(msg.Frames, topic, cfg.Limits.MaxPayload)
		if err != nil {
			so.replayDrop(decodeguard.ReasonOf(err), err, msg.Frames)
			continue
		}
		if end {
			return true, ""
		}
		so.mu.Lock()
		if so.gen != gen {
			so.mu.Unlock()
			return true, ""
		}
		if seq > so.maxSeen+ReplayAhead {
			// A replayed batch far beyond the live stream would make every
			// live batch up to it look like a duplicate: refuse it (if it
			// is real, the live stream brings it).
			ms := so.maxSeen
			so.mu.Unlock()
			so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d more than %d past the live stream's %d", seq, ReplayAhead, ms), msg.Frames)
			continue
		}
		err = so.applyReplayed(seq, payload)
		caught := so.next > so.maxSeen
		so.mu.Unlock()
		if err != nil {
			return true, ""
		}
		if caught {
			return true, ""
		}
	}
}

func (so *source) replayDrop(r decodeguard.Reason, err error, frames [][]byte) {
	if r == decodeguard.ReasonNone {
		r = decodeguard.ReasonValidate
	}
	so.count(func(st *SourceStats) { st.Dropped[r]++ })
	var last []byte
	if len(frames) > 0 {
		last = frames[len(frames)-1]
	}
	so.sub.log.drop(r, so.src.Name, 0, err, last)
}

// parseLive checks one live message [topic, seq, payload] and returns its
// sequence number and payload.
func parseLive(frames [][]byte, maxPayload int) (uint64, []byte, error) {
	if len(frames) != 3 {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: live message of %d frames, want 3 [topic, seq, payload]", len(frames)))
	}
	if len(frames[1]) != 8 {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: sequence frame of %d bytes, want 8", len(frames[1])))
	}
	if len(frames[2]) > maxPayload {
		return 0, nil, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: payload of %d bytes over the %d-byte limit", len(frames[2]), maxPayload))
	}
	return binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// parseReply checks one replay reply as a DEALER receives it: ["", topic,
// seq, payload] since vLLM PR #45177 (v0.26.0), ["", seq, payload] before;
// end reports the end marker (seq 0xffffffffffffffff). A topic frame must
// be prefixed by the subscription topic.
func parseReply(f [][]byte, topic string, maxPayload int) (seq uint64, payload []byte, end bool, err error) {
	var seqb, tp []byte
	switch {
	case len(f) == 4 && len(f[0]) == 0:
		tp, seqb, payload = f[1], f[2], f[3]
	case len(f) == 3 && len(f[0]) == 0:
		seqb, payload = f[1], f[2]
	default:
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay reply of %d frames, want [\"\", topic, seq, payload] or [\"\", seq, payload]", len(f)))
	}
	if len(seqb) != 8 {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay sequence frame of %d bytes, want 8", len(seqb)))
	}
	seq = binary.BigEndian.Uint64(seqb)
	if seq == endSeq {
		return seq, nil, true, nil
	}
	if tp != nil && (len(tp) < len(topic) || string(tp[:len(topic)]) != topic) {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonValidate,
			"kvevents: replayed batch with a topic outside the subscription")
	}
	if len(payload) > maxPayload {
		return 0, nil, false, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: replayed payload of %d bytes over the %d-byte limit", len(payload), maxPayload))
	}
	return seq, payload, false, nil
}
