package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ratelog"
	"github.com/zmqguard/zmqguard/internal/reentry"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
	"github.com/zmqguard/zmqguard/zmtpguard"
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
	// DefaultReplaySlice is how long a replay keeps its slot while another
	// source waits for one (see Config.ReplaySlice).
	DefaultReplaySlice = time.Second
	// DefaultReplayAttempts is how many replays in a row may fail to make
	// progress on a hole before it is reported lost (Config.ReplayAttempts).
	DefaultReplayAttempts = 3
	// DefaultMemoryBudget bounds, across all sources, the bytes a
	// Subscriber holds (Config.MemoryBudget).
	DefaultMemoryBudget = 128 << 20
	// DefaultReplayBackoff is the first pause before a source's next replay
	// after one failed; it doubles per failure up to DefaultReplayBackoffMax.
	DefaultReplayBackoff    = 500 * time.Millisecond
	DefaultReplayBackoffMax = 30 * time.Second
	// DefaultMaxBuffered bounds the live batches one source buffers while
	// its replay runs; DefaultMaxBufferedBytes bounds their payload bytes.
	DefaultMaxBuffered      = 4096
	DefaultMaxBufferedBytes = 64 << 20 // one batch of DefaultMaxPayload
	// MaxLostRanges is how many recent lost ranges SourceStats keeps.
	MaxLostRanges = 16
	// endSeq is the replay end marker's sequence number (-1 as 8 bytes),
	// ReplayEndSeq; ReplayErrorSeq (publisher.go) is the error marker's.
	endSeq = ReplayEndSeq
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
	// A bound source accepts one connection at a time: a second one,
	// pending or established, is refused while the first is open (counted
	// in SourceStats.Refused as a policy violation), so no other peer can
	// interleave its sequence numbers with the engine's (each jump back a
	// reset) or speak for it. Refused rather than replacing the first: a
	// replacing rule would let any peer that can reach the port take the
	// engine's stream over at will. The engine's PUB reconnects on its
	// own once a dead connection is closed (heartbeat or TCP); use
	// Socket.Guard.Allow or CURVE so that only the engine can be first.
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
	// A source runs one replay at a time, so it holds at most one of these
	// slots; sources waiting for one are served in arrival order.
	MaxReplays int
	// ReplaySlice is how long a replay keeps its slot once another source
	// is waiting for one (DefaultReplaySlice, 1 s): it is then stopped,
	// keeps what it applied, and its source queues again (counted in
	// SourceStats.Preempted), so slow or hung replay servers cannot hold
	// the slots from an honest source for longer than one slice.
	ReplaySlice time.Duration
	// ReplayBackoff and ReplayBackoffMax pace a source's replays after
	// failures. A source waits out its back-off before it asks for a slot.
	ReplayBackoff, ReplayBackoffMax time.Duration
	// ReplayAttempts is how many replays in a row may fail to make
	// progress on a hole (no end marker, the error marker, replies missing
	// or out of order, or no new batch) before the rest of the hole is
	// reported lost (DefaultReplayAttempts, 3), or fewer if ReplayDeadline
	// has passed since the last progress; a replay server that cannot be
	// reached at all (the request not sent within ReplayTimeout) is not
	// asked again for that hole, so a source whose replay server is gone
	// is not held back for longer than before. A replay that delivered
	// something resets the count; a hole left after a complete replay (a
	// batch the live stream dropped while the replay ran) starts another
	// replay at once.
	ReplayAttempts int
	// MaxBuffered and MaxBufferedBytes bound the live batches one source
	// holds while it replays; past them (or past the source's share of
	// MemoryBudget) a live batch is not buffered (counted in
	// BufferOverflows) and is recovered from the replay, or reported lost
	// once the replay attempts are spent.
	MaxBuffered, MaxBufferedBytes int
	// MemoryBudget bounds, across all sources, the bytes of live batches
	// buffered during replays (each source may use MemoryBudget divided by
	// the sources followed, and at most MaxBufferedBytes), and is the
	// receive budget shared by every source's live and replay sockets
	// (Socket.Guard.Budget, unless set; fair per connection, see
	// zmtpguard.Budget; Socket.MemoryBudget then only turns it off when
	// negative). Default 128 MiB (DefaultMemoryBudget); raised to
	// twice the largest message if smaller. The Subscriber's memory under
	// attack is then about 3 × MemoryBudget plus per-connection buffers,
	// however many sources it follows.
	MemoryBudget int64
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
	// LogInterval is the shortest time between two lines of one kind.
	// Zero means 1 s; a negative value is an error (rate limiting cannot
	// be turned off).
	LogInterval time.Duration
}

func (c *Config) fill() error {
	if c.Handler == nil {
		return errors.New("kvevents: Config.Handler is required")
	}
	if c.LogInterval < 0 {
		return fmt.Errorf("kvevents: Config.LogInterval %v is negative", c.LogInterval)
	}
	if c.ReplayTimeout < 0 || c.ReplayDeadline < 0 || c.MaxReplays < 0 || c.MaxBuffered < 0 || c.MaxBufferedBytes < 0 ||
		c.ReplaySlice < 0 || c.ReplayAttempts < 0 || c.MemoryBudget < 0 {
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
	def(&c.ReplaySlice, DefaultReplaySlice)
	if c.MaxReplays == 0 {
		c.MaxReplays = DefaultMaxReplays
	}
	if c.ReplayAttempts == 0 {
		c.ReplayAttempts = DefaultReplayAttempts
	}
	if c.MemoryBudget == 0 {
		c.MemoryBudget = DefaultMemoryBudget
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
	if min2 := 2 * c.Socket.Guard.MaxMessageSize; c.MemoryBudget < min2 {
		c.MemoryBudget = min2
	}
	if c.Socket.Guard.Budget == nil && c.Socket.MemoryBudget >= 0 {
		// One receive budget for every source's sockets: n sources no
		// longer mean n budgets.
		c.Socket.Guard.Budget = zmtpguard.NewBudget(c.MemoryBudget, c.Socket.BudgetWait)
	}
	return c.Socket.Verify()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.sources[src.Name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateSource, ratelog.Escape(src.Name, 128))
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
		return fmt.Errorf("%w: %s", ErrUnknownSource, ratelog.Escape(name, 128))
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
	// Preempted counts replays stopped after Config.ReplaySlice because
	// another source waited for a slot (they resume from where they were).
	Preempted uint64 `json:"preempted"`
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
		t.Preempted += x.Preempted
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
	if src.Bind {
		// One publisher per bound source: a second connection is
		// refused while the first is open (see Source.Bind).
		opts.Guard.MaxConns = 1
	}
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
		return nil, fmt.Errorf("kvevents: source %s: %w", ratelog.Escape(src.Name, 128), err)
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
		so.mu.Lock()
		so.dropBuf()
		so.mu.Unlock()
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
	go so.replay(rctx, so.gen)
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
	so.dropBuf()
}

// dropBuf empties the buffer and gives its bytes back to the Subscriber's
// budget (so.mu held).
func (so *source) dropBuf() {
	so.sub.buffered.Add(-int64(so.bufBytes))
	so.buf, so.bufBytes = nil, 0
}

// bufferLive keeps one live batch while a replay runs (so.mu held), within
// MaxBuffered, MaxBufferedBytes, the source's share of MemoryBudget and
// MemoryBudget itself; past them the batch is left to the replay.
func (so *source) bufferLive(seq uint64, payload []byte) {
	cfg := &so.sub.cfg
	n := int64(len(payload))
	share := cfg.MemoryBudget / max(so.sub.nsources.Load(), 1)
	if len(so.buf) >= cfg.MaxBuffered || so.bufBytes+len(payload) > cfg.MaxBufferedBytes ||
		int64(so.bufBytes)+n > share || so.sub.buffered.Load()+n > cfg.MemoryBudget {
		so.count(func(st *SourceStats) { st.BufferOverflows++ })
		so.sub.log.line(logOverflow, cfg.Logger, "kvevents: live batch not buffered during a replay (left to the replay)",
			"source", so.src.Name, "seq", seq, "bytes", n, "buffered", so.bufBytes, "share", share,
			"max_buffered", cfg.MaxBuffered, "max_buffered_bytes", cfg.MaxBufferedBytes, "memory_budget", cfg.MemoryBudget)
		return
	}
	so.sub.buffered.Add(n)
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
			st.UnsupportedTypes = countType(st.UnsupportedTypes, ratelog.Escape(d.Type, 64), 1)
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
		so.sub.buffered.Add(-int64(len(h.payload)))
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

// caughtUp reports whether nothing seen live is still missing (so.mu held).
func (so *source) caughtUp() bool { return so.next > so.maxSeen && len(so.buf) == 0 }

// finishReplay delivers what the buffer holds and reports what is still
// missing as lost, once the replay attempts are spent (so.mu held).
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
	so.dropBuf()
	return nil
}

// whyUnreachable starts the reason of a replay whose request could not be
// sent: no replay server answered the connection within ReplayTimeout.
const whyUnreachable = "no replay server: "

// replay recovers the source's hole(s) for gen, off the receive path: one
// replay session after another, each waiting out the source's back-off
// before it asks for a slot, until nothing seen live is missing, the
// attempts are spent (the rest is then reported lost), or the source stops
// or restarts (gen changes).
func (so *source) replay(ctx context.Context, gen uint64) {
	defer so.wg.Done()
	cfg := &so.sub.cfg
	attempts := 0
	// leadFrom is the start of the last replay that began past next:
	// such a replay is asked once more before [next, first reply) is
	// reported lost (replies dropped at the start, not a bounded buffer).
	leadFrom, leadSeen := uint64(0), false
	// lastProgress bounds the retries in time too: a source whose replay
	// server is gone is not kept stale for ReplayAttempts × (back-off +
	// ReplayTimeout) when that passes ReplayDeadline.
	lastProgress := time.Now()
	for {
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
		hold, err := so.sub.slots.acquire(ctx)
		if err != nil {
			return
		}
		so.mu.Lock()
		if so.gen != gen {
			so.mu.Unlock()
			hold.release()
			return
		}
		from := so.next
		so.mu.Unlock()
		so.count(func(st *SourceStats) { st.Replays++ })
		ok, why, lead := so.session(hold.ctx, gen, from, leadSeen && leadFrom == from)
		preempted := hold.wasPreempted() && ctx.Err() == nil
		hold.release()
		so.mu.Lock()
		if so.gen != gen || ctx.Err() != nil {
			so.mu.Unlock()
			return
		}
		if err := so.advance(); err != nil {
			so.mu.Unlock()
			return
		}
		progress := so.next > from
		switch {
		case lead:
			leadFrom, leadSeen = from, true
		case preempted:
			so.count(func(st *SourceStats) { st.Preempted++ })
		case ok && progress:
			so.failures = 0
		default:
			if ok {
				why = "the replay ended without the batches seen live (" + fmt.Sprint(from) + " on)"
			}
			so.failures++
			d := cfg.ReplayBackoff << min(so.failures-1, 16)
			so.replayAfter = time.Now().Add(min(d, cfg.ReplayBackoffMax))
			so.sub.log.line(logReplay, cfg.Logger, "kvevents: replay incomplete", "source", so.src.Name,
				"endpoint", so.src.Replay, "from", from, "why", why, "attempt", attempts+1, "of", cfg.ReplayAttempts)
		}
		switch {
		case lead:
		case progress || preempted:
			attempts = 0
			lastProgress = time.Now()
		default:
			attempts++
		}
		if so.caughtUp() {
			so.replaying = false
			so.dropBuf()
			so.mu.Unlock()
			return
		}
		// A replay server that cannot be reached at all is not asked
		// again for this hole (nothing can be recovered from it, and
		// retrying would hold the source's delivery back): as before.
		unreachable := !preempted && strings.HasPrefix(why, whyUnreachable)
		if unreachable || attempts >= cfg.ReplayAttempts || attempts > 0 && time.Since(lastProgress) >= cfg.ReplayDeadline {
			_ = so.finishReplay()
			so.mu.Unlock()
			return
		}
		so.mu.Unlock()
	}
}

// session sends one replay request for [from, ...) and applies the
// replies. It reports whether the replay ended properly (the end marker,
// or caught up with the live stream, with no reply missing on the way)
// and, if not, why. Replies beyond the highest live sequence number seen,
// or at or below the previous reply's, are refused and never move next.
//
// A replay whose first reply is past next ends with lead set, unless
// acceptLead: the caller asks once more, and only a second replay that
// starts past the same next makes [next, first reply) lost.
func (so *source) session(ctx context.Context, gen, from uint64, acceptLead bool) (ok bool, why string, lead bool) {
	cfg := &so.sub.cfg
	opts := cfg.Socket
	opts.OnEvent = nil
	d, err := socket.NewDealer(opts)
	if err != nil {
		return false, err.Error(), false
	}
	defer d.Close()
	if err := d.Dial(so.src.Replay); err != nil {
		return false, err.Error(), false
	}
	total, cancel := context.WithTimeout(ctx, cfg.ReplayDeadline)
	defer cancel()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], from)
	sctx, scancel := context.WithTimeout(total, cfg.ReplayTimeout)
	err = d.Send(sctx, []byte{}, req[:])
	scancel()
	if err != nil {
		return false, whyUnreachable + err.Error(), false
	}
	topic := cfg.Topic
	first, last := true, uint64(0)
	for {
		rctx, rcancel := context.WithTimeout(total, cfg.ReplayTimeout)
		msg, err := d.Recv(rctx)
		rcancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return false, "stopped: " + context.Cause(ctx).Error(), false
			case total.Err() != nil:
				return false, "past the replay deadline " + cfg.ReplayDeadline.String(), false
			}
			return false, "silent for the replay timeout " + cfg.ReplayTimeout.String(), false
		}
		seq, payload, end, err := parseReply(msg.Frames, topic, cfg.Limits.MaxPayload)
		if err != nil {
			so.replayDrop(decodeguard.ReasonOf(err), err, msg.Frames)
			continue
		}
		if end {
			if seq == ReplayErrorSeq {
				return false, "the publisher sent the replay error marker (it dropped replies)", false
			}
			return true, "", false
		}
		so.mu.Lock()
		if so.gen != gen {
			so.mu.Unlock()
			return true, "", false
		}
		if ms := so.maxSeen; seq > ms {
			// The publisher cannot have held a batch newer than the live
			// stream has shown when it answered: taking it would make every
			// live batch up to it look like a duplicate. Refuse it (if it
			// is real, the live stream brings it).
			so.mu.Unlock()
			so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d past the live stream's %d", seq, ms), msg.Frames)
			continue
		}
		if !first && seq <= last {
			so.mu.Unlock()
			so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d not after the previous reply's %d", seq, last), msg.Frames)
			return false, fmt.Sprintf("replies out of order (%d after %d)", seq, last), false
		}
		if err := so.advance(); err != nil {
			so.mu.Unlock()
			return true, "", false
		}
		switch {
		case seq < so.next:
			so.count(func(st *SourceStats) { st.Duplicates++ })
		case seq == so.next:
			err = so.deliver(seq, payload, true)
		case first && !acceptLead:
			so.mu.Unlock()
			return false, "", true
		case first:
			// The replay starts past next: the publisher no longer holds
			// [next, seq) (its buffer is bounded); that much is lost.
			to := seq
			if len(so.buf) > 0 && so.buf[0].seq < to {
				to = so.buf[0].seq
			}
			if err = so.lose(so.next, to); err == nil {
				if err = so.advance(); err == nil && seq == so.next {
					err = so.deliver(seq, payload, true)
				}
			}
		default:
			// A hole inside the replies: the publisher dropped some (its
			// queue for us was full). Retry from next; nothing is lost.
			n := so.next
			so.mu.Unlock()
			return false, fmt.Sprintf("replies missing from %d (next reply %d)", n, seq), false
		}
		first, last = false, seq
		if err == nil {
			err = so.advance()
		}
		caught := so.caughtUp()
		so.mu.Unlock()
		if err != nil || caught {
			return true, "", false
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
// end reports the end marker (seq 0xffffffffffffffff) or the error marker
// (ReplayErrorSeq, returned as seq). A topic frame must
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
	if seq == endSeq || seq == ReplayErrorSeq {
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
