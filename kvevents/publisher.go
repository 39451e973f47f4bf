package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Publisher defaults, vLLM's KVEventsConfig defaults where it has one.
const (
	// defaultBufferSteps is how many past batches the replay buffer keeps
	// (KVEventsConfig.buffer_steps).
	defaultBufferSteps = 10000
	// defaultQueueSize bounds the batches waiting to be sent; a Publish
	// beyond it is dropped and counted, never waited for.
	defaultQueueSize = 10000
	// defaultPubHWM is the live socket's per-subscriber queue bound
	// (KVEventsConfig.hwm).
	defaultPubHWM = 100000
	// defaultMaxReplayClients bounds the replay ROUTER's connections when
	// PublisherConfig.Socket.Guard.MaxConns is zero.
	defaultMaxReplayClients = 256
	// defaultReplayWriteTimeout is the replay ROUTER's write deadline when
	// PublisherConfig.Socket.WriteTimeout is zero: a replay client whose
	// connection accepts no bytes for that long while replies wait is
	// disconnected (counted in the ROUTER's violations as ReasonPolicy), so
	// a client that never reads holds its share of the send budget for
	// that long at most. The live XPUB has an XPUB's socket default (10 s).
	defaultReplayWriteTimeout = 10 * time.Second
	// defaultReplayInterval is the shortest time between two replays
	// served to one replay connection when PublisherConfig.ReplayInterval
	// is zero. A request that comes sooner is answered with the error
	// marker (replayErrorSeq) at once, without a replay: the client retries
	// after its back-off. vLLM's and zmqguard's subscribers ask for one
	// replay per gap and wait for its end, far below this rate.
	defaultReplayInterval = 100 * time.Millisecond
	// defaultReplaysPerHost is PublisherConfig.ReplaysPerHost's default.
	defaultReplaysPerHost = 10
	// defaultReplayFloodLimit is PublisherConfig.ReplayFloodLimit's
	// default.
	defaultReplayFloodLimit = 16
	// replayInFlight bounds the replies queued for one replay client (the
	// replay ROUTER's HWM); the replay waits for the client to read before
	// it queues more.
	replayInFlight = 1024
)

// ErrQueueFull is returned by Publish when the send queue is full: the
// batch is dropped (and counted) instead of blocking the caller.
var ErrQueueFull = errors.New("kvevents: publisher queue full, batch dropped")

// PublisherConfig configures a Publisher. Zero fields take the defaults
// their docs state; a negative value is an error except where a field's doc
// says it turns something off.
type PublisherConfig struct {
	// Release selects the bytes: Rules().KVEventsMapForm chooses tagged
	// maps (vLLM PR #42892) or arrays, Rules().KVReplayTopicFrame whether
	// replay replies carry the topic frame (vLLM PR #45177). Zero value:
	// vllm.Latest. Ignored when Engine is "sglang".
	Release vllm.Release
	// Engine selects whose bytes are sent: "" or "vllm" (Release decides),
	// or "sglang": SGLang's (its disaggregation/kv_events.py at the commit
	// of internal/testkit/golden/testdata/sglang), byte for byte: events as
	// SGLang's tagged arrays with every SGLang field (BlockStored 7
	// elements, BlockRemoved 3, AllBlocksCleared 1; the other fields of an
	// Event are not written), DataParallelRank as the batch's attn_dp_rank,
	// hashes made with SignedHash written as signed integers, replay
	// replies ["", seq, payload] and the end marker ["", ff×8, ""] without
	// a topic frame whatever Topic is, and the live endpoint also bound when
	// it contains "0.0.0.0" (SGLang PR #25844). Anything else is an error.
	Engine string
	// Endpoint is the live endpoint, vLLM's rule deciding bind or connect:
	// bound when it contains "*" or "::" or is ipc://, dialed otherwise.
	// Empty means "tcp://*:5557".
	Endpoint string
	// Bind binds Endpoint whatever vLLM's rule says (for example
	// "tcp://127.0.0.1:0", which the rule would dial).
	Bind bool
	// ReplayEndpoint, when set, is bound as the replay ROUTER.
	ReplayEndpoint string
	// Topic is sent as every live message's first frame.
	Topic string
	// DataParallelRank offsets both endpoints as vLLM does for each DP
	// rank (tcp ports + rank, inproc names + "_dp<rank>") and is the
	// data_parallel_rank of every batch Publish sends.
	DataParallelRank int
	// BufferSteps is the replay buffer's length in batches. Zero means
	// 10,000 (vLLM's KVEventsConfig.buffer_steps).
	BufferSteps int
	// QueueSize bounds the batches waiting to be sent; a Publish beyond it
	// is dropped and counted, never waited for. Zero means 10,000.
	QueueSize int
	// HWM bounds each live subscriber's queue in messages. Zero means
	// 100,000 (vLLM's KVEventsConfig.hwm). The replay ROUTER's per-client
	// queue holds 1,024 replies; a replay waits for its client to read
	// before it queues more.
	HWM int
	// Socket holds the sockets' transport options. A zero
	// Guard.MaxMessageSize means 64 KiB (a publisher receives only
	// subscriptions and replay requests). A zero Guard.MaxConns bounds the
	// replay ROUTER's connections at 256 (each replay client may hold a
	// whole buffer in its queue). A zero WriteTimeout gives the live XPUB
	// the socket's XPUB default and the replay ROUTER 10 s: a replay client
	// whose connection accepts no bytes for that long while replies wait is
	// disconnected (ReasonPolicy), so a client that never reads holds its
	// share of the send budget for that long at most; negative means none.
	// A nil Socket.Logger means Logger.
	Socket socket.Options
	// ReplayInterval is the shortest time between two replays served to
	// one replay connection; a request that comes sooner gets the error
	// marker (replayErrorSeq) and no replay, counted in
	// PublisherStats.ReplaysRefused: the client retries after its
	// back-off (vLLM's and zmqguard's subscribers ask for one replay per
	// gap and wait for its end, far below this rate). Zero means 100 ms;
	// negative means no limit.
	ReplayInterval time.Duration
	// ReplayFloodLimit: a replay connection whose requests are refused by
	// ReplayInterval more than this many times in a row is disconnected
	// (ReasonPolicy in the replay ROUTER's violations, counted in
	// PublisherStats.ReplayFloods), so a request flood costs a connection,
	// not one reply per request. Zero means 16; negative means never.
	ReplayFloodLimit int
	// ReplaysPerHost bounds the replays started per second for the
	// connections of one remote host together (a token bucket holding
	// one second's worth), so that a client reconnecting to get a fresh
	// connection's first replay each time, or many connections from one
	// host, cannot make the publisher replay its buffer without end; a
	// request past it is refused as by ReplayInterval (error marker,
	// ReplaysRefused, ReplayFloodLimit). Zero means 10; negative means no
	// limit.
	ReplaysPerHost int
	// Logger receives lines about bad replay requests. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock for batch timestamps. Nil means time.Now.
	Now func() time.Time
}

// PublisherStats is a snapshot of a Publisher's counters.
type PublisherStats struct {
	// Published counts batches sent on the live socket; Seq is the next
	// sequence number.
	Published uint64 `json:"published"`
	Seq       uint64 `json:"seq"`
	// QueueFull counts batches dropped because the queue was full.
	QueueFull uint64 `json:"queue_full"`
	// DroppedHWM counts live messages a slow subscriber missed, and replay
	// replies a slow replay client missed.
	DroppedHWM uint64 `json:"dropped_hwm"`
	// Replays counts replay requests served; ReplayedBatches the batches
	// sent in reply.
	Replays         uint64 `json:"replays"`
	ReplayedBatches uint64 `json:"replayed_batches"`
	// ReplaysIncomplete counts replays ended with the error marker
	// (replayErrorSeq) because a reply was dropped; ReplaysRefused counts
	// requests answered with it at once because they came sooner than
	// ReplayInterval after the connection's previous replay (not counted
	// in Replays).
	ReplaysIncomplete uint64 `json:"replays_incomplete"`
	ReplaysRefused    uint64 `json:"replays_refused"`
	// ReplayFloods counts replay connections disconnected for passing
	// ReplayFloodLimit.
	ReplayFloods uint64 `json:"replay_floods"`
	// BadRequests counts malformed replay requests by reason.
	BadRequests decodeguard.Counts `json:"bad_requests"`
	// Subscribers is the number of connected live subscribers.
	Subscribers int `json:"subscribers"`
}

type pubEntry struct {
	seq     uint64
	payload []byte
}

// Publisher publishes KV-event batches with the bytes vLLM's
// ZmqEventPublisher sends (or SGLang's, PublisherConfig.Engine): live
// [topic, seq, payload] on a PUB-compatible socket (XPUB), a bounded replay
// buffer served over a ROUTER. Publish never blocks: a full queue drops the
// batch and counts it.
type Publisher struct {
	cfg      PublisherConfig
	form     int // formArray, formMap or formSGLang
	topicRep bool
	topic    []byte
	pub      *socket.Socket
	rep      *socket.Socket
	queue    chan []byte
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closed   atomic.Bool

	bmu  sync.Mutex
	ring []pubEntry
	head int // index of the oldest entry when the ring is full

	seq             atomic.Uint64
	published       atomic.Uint64
	queueFull       atomic.Uint64
	replays         atomic.Uint64
	replayedBatches atomic.Uint64
	replaysIncompl  atomic.Uint64
	replaysRefused  atomic.Uint64
	replayFloods    atomic.Uint64
	// refusedRun counts each replay connection's refusals in a row
	// (ReplayFloodLimit); owned by serveReplay.
	refusedRun map[uint64]int
	// hostTokens is each remote host's ReplaysPerHost bucket; owned by
	// serveReplay.
	hostTokens map[string]*hostBucket
	// lastReplay is when each replay connection (socket.Peer.ID) was last
	// served, for ReplayInterval; owned by serveReplay.
	lastReplay map[uint64]time.Time
	// active marks the replay connections whose replay goroutine runs.
	amu    sync.Mutex
	active map[uint64]bool
	// replayWait bounds one reply's wait for room (the ROUTER's write
	// deadline, or defaultReplayWriteTimeout when it has none).
	replayWait time.Duration
	smu        sync.Mutex
	bad        decodeguard.Counts
}

// fill fills cfg's defaults, then verifies the filled values.
func (cfg *PublisherConfig) fill() error {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://*:5557"
	}
	if cfg.BufferSteps == 0 {
		cfg.BufferSteps = defaultBufferSteps
	}
	if cfg.QueueSize == 0 {
		cfg.QueueSize = defaultQueueSize
	}
	if cfg.HWM == 0 {
		cfg.HWM = defaultPubHWM
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Socket.Logger == nil {
		cfg.Socket.Logger = cfg.Logger // the sockets' lines go where the Publisher's go
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReplayInterval == 0 {
		cfg.ReplayInterval = defaultReplayInterval
	}
	if cfg.ReplaysPerHost == 0 {
		cfg.ReplaysPerHost = defaultReplaysPerHost
	}
	if cfg.ReplayFloodLimit == 0 {
		cfg.ReplayFloodLimit = defaultReplayFloodLimit
	}
	switch cfg.Engine {
	case "", "vllm", "sglang":
	default:
		return fmt.Errorf("kvevents: PublisherConfig.Engine %q unknown (want \"vllm\" or \"sglang\")", cfg.Engine)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"BufferSteps", cfg.BufferSteps}, {"QueueSize", cfg.QueueSize}, {"HWM", cfg.HWM}, {"DataParallelRank", cfg.DataParallelRank}} {
		if f.v < 0 {
			return fmt.Errorf("kvevents: PublisherConfig.%s %d is negative", f.name, f.v)
		}
	}
	return nil
}

// NewPublisher binds (or dials) its sockets and starts publishing.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	live, err := offsetPort(cfg.Endpoint, cfg.DataParallelRank)
	if err != nil {
		return nil, err
	}
	replay, err := offsetPort(cfg.ReplayEndpoint, cfg.DataParallelRank)
	if err != nil {
		return nil, err
	}
	rules := cfg.Release.Rules()
	p := &Publisher{cfg: cfg, form: formArray, topicRep: rules.KVReplayTopicFrame,
		topic: []byte(cfg.Topic), queue: make(chan []byte, cfg.QueueSize)}
	bind := cfg.Bind || bindsByRule(live)
	switch {
	case cfg.Engine == "sglang":
		// SGLang's replay ROUTER sends no topic frame; its PUB binds for
		// 0.0.0.0 too (SGLang PR #25844).
		p.form, p.topicRep = formSGLang, false
		bind = bind || strings.Contains(live, "0.0.0.0")
	case rules.KVEventsMapForm:
		p.form = formMap
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	// Subscriptions and replay requests only.
	opts, _ := sockopt.Apply(cfg.Socket, sockopt.Overrides{MaxMessageSize: 64 << 10})
	opts.HWM = cfg.HWM
	if p.pub, err = socket.New("XPUB", opts); err != nil {
		return nil, err
	}
	if bind {
		err = p.pub.Bind(live)
	} else {
		err = p.pub.Dial(live)
	}
	if err != nil {
		p.pub.Close()
		return nil, err
	}
	if replay != "" {
		ropts := opts
		// A replay waits for room in its client's queue (one goroutine
		// per client), so the queue need not hold a whole buffer: each
		// client has at most replayInFlight replies (and the socket's
		// SendQueueBytes, and its fair share of SendTotalBytes) queued.
		ropts.HWM = replayInFlight
		ropts.RouterDropUnroutable = true
		if ropts.WriteTimeout == 0 {
			// A replay client that never reads would otherwise hold its
			// share of the send budget for as long as TCP keeps it.
			ropts.WriteTimeout = defaultReplayWriteTimeout
		}
		// Each replay client may hold a whole buffer in its queue: bound
		// how many can.
		ropts, _ = sockopt.Apply(ropts, sockopt.Overrides{MaxConns: defaultMaxReplayClients})
		p.replayWait = ropts.WriteTimeout
		if p.replayWait <= 0 {
			p.replayWait = defaultReplayWriteTimeout
		}
		p.active = make(map[uint64]bool)
		if p.rep, err = socket.New("ROUTER", ropts); err == nil {
			err = p.rep.Bind(replay)
		}
		if err != nil {
			if p.rep != nil {
				p.rep.Close()
			}
			p.pub.Close()
			return nil, err
		}
	}
	p.wg.Add(2)
	go p.drainSubscriptions()
	go p.sendLoop()
	if p.rep != nil {
		p.wg.Add(1)
		go p.serveReplay()
	}
	return p, nil
}

// Endpoint returns the live socket's bound endpoint (the port chosen for
// ":0"), or "" when it was dialed.
func (p *Publisher) Endpoint() string { return p.pub.Endpoint() }

// ReplayEndpoint returns the replay ROUTER's bound endpoint, "" if none.
func (p *Publisher) ReplayEndpoint() string {
	if p.rep == nil {
		return ""
	}
	return p.rep.Endpoint()
}

// Publish encodes events as one batch stamped now, with the configured
// data_parallel_rank, and queues it. It never blocks: with the queue full
// it drops the batch and returns ErrQueueFull. The events are encoded
// before Publish returns, so the caller may reuse them.
func (p *Publisher) Publish(events ...Event) error {
	ts := float64(p.cfg.Now().UnixNano()) / 1e9
	return p.publishBatch(ts, events, Some[int64](int64(p.cfg.DataParallelRank)))
}

// publishBatch is Publish with the timestamp and data_parallel_rank given
// (a rank not Valid is written as nil: msgspec writes an array_like struct
// with every field).
func (p *Publisher) publishBatch(ts float64, events []Event, dpRank Opt[int64]) error {
	if p.closed.Load() {
		return ErrClosed
	}
	payload := appendBatch(nil, ts, events, dpRank, p.form)
	return p.PublishRaw(payload)
}

// PublishRaw queues an already encoded payload (for simulators replaying
// captured bytes); like Publish it never blocks. The Publisher keeps p (in
// its queue and replay buffer): do not modify it afterwards.
func (p *Publisher) PublishRaw(payload []byte) error {
	if p.closed.Load() {
		return ErrClosed
	}
	select {
	case p.queue <- payload:
		return nil
	default:
		p.queueFull.Add(1)
		return ErrQueueFull
	}
}

func (p *Publisher) drainSubscriptions() {
	defer p.wg.Done()
	for {
		if _, err := p.pub.Recv(p.ctx); err != nil {
			return
		}
	}
}

func (p *Publisher) sendLoop() {
	defer p.wg.Done()
	var seqb [8]byte
	for {
		var payload []byte
		select {
		case payload = <-p.queue:
		case <-p.ctx.Done():
			return
		}
		seq := p.seq.Load()
		binary.BigEndian.PutUint64(seqb[:], seq)
		// XPUB Send never waits: a full subscriber queue drops for that
		// subscriber (counted in the socket's DroppedHWM). The payload is
		// shared by every subscriber's queue (and the replay buffer), not
		// copied for each: 80 subscribers that never read hold their
		// shares of SendTotalBytes in the same bytes (issue 37).
		if err := p.pub.SendShared(p.ctx, p.topic, seqb[:], payload); err != nil {
			return
		}
		p.published.Add(1)
		p.bmu.Lock()
		if len(p.ring) < p.cfg.BufferSteps {
			p.ring = append(p.ring, pubEntry{seq, payload})
		} else {
			p.ring[p.head] = pubEntry{seq, payload}
			p.head = (p.head + 1) % len(p.ring)
		}
		p.bmu.Unlock()
		p.seq.Store(seq + 1)
	}
}

// Stats returns a snapshot of the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	ps := p.pub.Stats()
	st := PublisherStats{Published: p.published.Load(), Seq: p.seq.Load(), QueueFull: p.queueFull.Load(),
		DroppedHWM: ps.DroppedHWM, Replays: p.replays.Load(), ReplayedBatches: p.replayedBatches.Load(),
		ReplaysIncomplete: p.replaysIncompl.Load(), ReplaysRefused: p.replaysRefused.Load(),
		ReplayFloods: p.replayFloods.Load(),
		Subscribers:  ps.Peers}
	if p.rep != nil {
		st.DroppedHWM += p.rep.Stats().DroppedHWM
	}
	p.smu.Lock()
	st.BadRequests = p.bad
	p.smu.Unlock()
	return st
}

// Close stops publishing and closes the sockets; queued batches not yet
// sent are discarded. It is idempotent.
func (p *Publisher) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.cancel()
	p.pub.Close()
	if p.rep != nil {
		p.rep.Close()
	}
	p.wg.Wait()
	return nil
}
