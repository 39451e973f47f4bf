package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// Publisher defaults, vLLM's KVEventsConfig defaults where it has one.
const (
	// DefaultBufferSteps is how many past batches the replay buffer keeps
	// (KVEventsConfig.buffer_steps).
	DefaultBufferSteps = 10000
	// DefaultQueueSize bounds the batches waiting to be sent; a Publish
	// beyond it is dropped and counted, never waited for.
	DefaultQueueSize = 10000
	// DefaultPubHWM is the live socket's per-subscriber queue bound
	// (KVEventsConfig.hwm).
	DefaultPubHWM = 100000
	// DefaultMaxReplayClients bounds the replay ROUTER's connections when
	// PublisherConfig.Socket.Guard.MaxConns is zero.
	DefaultMaxReplayClients = 256
	// DefaultReplayWriteTimeout is the replay ROUTER's write deadline when
	// PublisherConfig.Socket.WriteTimeout is zero: a replay client whose
	// connection accepts no bytes for that long while replies wait is
	// disconnected (counted in the ROUTER's violations as ReasonPolicy), so
	// a client that never reads holds its share of the send budget for
	// that long at most. The live XPUB has the socket default for an XPUB (10 s).
	DefaultReplayWriteTimeout = 10 * time.Second
	// DefaultReplayInterval is the shortest time between two replays
	// served to one replay connection when PublisherConfig.ReplayInterval
	// is zero. A request that comes sooner is answered with the error
	// marker (ReplayErrorSeq) at once, without a replay: the client retries
	// after its back-off. vLLM's and zmqguard's subscribers ask for one
	// replay per gap and wait for its end, far below this rate.
	DefaultReplayInterval = 100 * time.Millisecond
	// DefaultReplaysPerHost is PublisherConfig.ReplaysPerHost's default.
	DefaultReplaysPerHost = 10
	// DefaultReplayFloodLimit is PublisherConfig.ReplayFloodLimit's
	// default.
	DefaultReplayFloodLimit = 16
	// ReplayInFlight bounds the replies queued for one replay client (the
	// replay ROUTER's HWM); the replay waits for the client to read before
	// it queues more.
	ReplayInFlight = 1024
)

// ReplayEndSeq is the sequence number of the replay end marker
// (["", topic, ffffffffffffffff, ""], -1 as a signed 8-byte big-endian
// number; vLLM PR #45177): every buffered batch from start_seq on was sent.
//
// ReplayErrorSeq is the sequence number of the replay error marker, sent
// with the same layout (["", topic, fffffffffffffffe, ""], or without the
// topic frame for releases before #45177) instead of the end marker when the
// replay is incomplete: a reply was dropped (the client's queue was full or
// past its fair share of the send budget, or the client left), or the
// request came sooner than PublisherConfig.ReplayInterval after the
// connection's previous replay. Replies stop at the first drop, so what the
// client received before the error marker is contiguous from start_seq; it
// should ask again from the next sequence it needs. This marker is
// zmqguard's own: vLLM's publisher never sends it, and vLLM's example
// subscriber, which ends a replay on an empty payload, stops on it as on
// the end marker. If even the error marker cannot be queued, nothing is
// sent and the client's replay timeout applies.
const (
	ReplayEndSeq   uint64 = 0xffffffffffffffff
	ReplayErrorSeq uint64 = 0xfffffffffffffffe
)

// ErrQueueFull is returned by Publish when the send queue is full: the
// batch is dropped (and counted) instead of blocking the caller.
var ErrQueueFull = errors.New("kvevents: publisher queue full, batch dropped")

// PublisherConfig configures a Publisher. Zero fields take the defaults.
type PublisherConfig struct {
	// Release selects the bytes: Rules().KVEventsMapForm chooses tagged
	// maps (vLLM PR #42892) or arrays, Rules().KVReplayTopicFrame whether
	// replay replies carry the topic frame (vLLM PR #45177). Zero value:
	// vllm.Latest.
	Release vllm.Release
	// Endpoint is the live endpoint, vLLM's rule deciding bind or connect:
	// bound when it contains "*" or "::" or is ipc://, dialed otherwise.
	// Default "tcp://*:5557".
	Endpoint string
	// Bind binds Endpoint whatever vLLM's rule says (for example
	// "tcp://127.0.0.1:0", which the rule would dial).
	Bind bool
	// ReplayEndpoint, when set, is bound as the replay ROUTER.
	ReplayEndpoint string
	// Topic is sent as every live message's first frame.
	Topic string
	// DataParallelRank offsets both endpoints' ports (OffsetPort) and is
	// the data_parallel_rank of every batch published without one.
	DataParallelRank int
	// BufferSteps is the replay buffer's length (DefaultBufferSteps).
	BufferSteps int
	// QueueSize bounds the batches waiting to be sent (DefaultQueueSize).
	QueueSize int
	// HWM bounds each live subscriber's queue (DefaultPubHWM); the replay
	// ROUTER's per-client queue holds ReplayInFlight messages.
	HWM int
	// Socket holds the sockets' transport options. A zero
	// Socket.WriteTimeout gives the live XPUB an XPUB's socket default (10 s)
	// and the replay ROUTER DefaultReplayWriteTimeout; negative means none.
	Socket socket.Options
	// ReplayInterval is the shortest time between two replays served to
	// one replay connection; a request that comes sooner gets the error
	// marker (ReplayErrorSeq) and no replay, counted in
	// PublisherStats.ReplaysRefused. Zero means DefaultReplayInterval;
	// negative means no limit.
	ReplayInterval time.Duration
	// ReplayFloodLimit: a replay connection whose requests are refused by
	// ReplayInterval more than this many times in a row is disconnected
	// (ReasonPolicy in the replay ROUTER's violations, counted in
	// PublisherStats.ReplayFloods), so a request flood costs a connection,
	// not one reply per request. Zero means DefaultReplayFloodLimit (16);
	// negative means never.
	ReplayFloodLimit int
	// ReplaysPerHost bounds the replays started per second for the
	// connections of one remote host together (a token bucket holding
	// one second's worth), so that a client reconnecting to get a fresh
	// connection's first replay each time, or many connections from one
	// host, cannot make the publisher replay its buffer without end; a
	// request past it is refused as by ReplayInterval (error marker,
	// ReplaysRefused, ReplayFloodLimit). Zero means DefaultReplaysPerHost
	// (10); negative means no limit.
	ReplaysPerHost int
	// Logger receives lines about bad replay requests (nil:
	// slog.Default()).
	Logger *slog.Logger
	// Now is the clock for batch timestamps (nil: time.Now).
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
	// (ReplayErrorSeq) because a reply was dropped; ReplaysRefused counts
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
// ZmqEventPublisher sends: live [topic, seq, payload] on a PUB-compatible
// socket (XPUB), a bounded replay buffer served over a ROUTER. Publish
// never blocks: a full queue drops the batch and counts it.
type Publisher struct {
	cfg      PublisherConfig
	mapForm  bool
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
	// deadline, or DefaultReplayWriteTimeout when it has none).
	replayWait time.Duration
	smu        sync.Mutex
	bad        decodeguard.Counts
}

// OffsetPort returns endpoint with its port raised by rank, as vLLM does
// for each DP rank's publisher (ZmqEventPublisher.offset_endpoint_port):
// tcp endpoints get port+rank, inproc ones a "_dp<rank>" suffix; rank 0 and
// "" are returned unchanged.
func OffsetPort(endpoint string, rank int) (string, error) {
	if endpoint == "" || rank == 0 {
		return endpoint, nil
	}
	if strings.Contains(endpoint, "inproc") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if !strings.Contains(endpoint, "tcp") {
		return "", fmt.Errorf("kvevents: cannot offset %q by a DP rank: not tcp or inproc", endpoint)
	}
	i := strings.LastIndexByte(endpoint, ':')
	if i < 0 {
		return endpoint, nil
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return "", fmt.Errorf("kvevents: endpoint %q has no numeric port", endpoint)
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// bindsByRule reports vLLM's bind-or-connect heuristic for a PUB endpoint.
func bindsByRule(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") ||
		strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// NewPublisher binds (or dials) its sockets and starts publishing.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://*:5557"
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = DefaultBufferSteps
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.HWM <= 0 {
		cfg.HWM = DefaultPubHWM
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReplayInterval == 0 {
		cfg.ReplayInterval = DefaultReplayInterval
	}
	if cfg.ReplaysPerHost == 0 {
		cfg.ReplaysPerHost = DefaultReplaysPerHost
	}
	if cfg.ReplayFloodLimit == 0 {
		cfg.ReplayFloodLimit = DefaultReplayFloodLimit
	}
	live, err := OffsetPort(cfg.Endpoint, cfg.DataParallelRank)
	if err != nil {
		return nil, err
	}
	replay, err := OffsetPort(cfg.ReplayEndpoint, cfg.DataParallelRank)
	if err != nil {
		return nil, err
	}
	rules := cfg.Release.Rules()
	p := &Publisher{cfg: cfg, mapForm: rules.KVEventsMapForm, topicRep: rules.KVReplayTopicFrame,
		topic: []byte(cfg.Topic), queue: make(chan []byte, cfg.QueueSize)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	opts := cfg.Socket
	opts.HWM = cfg.HWM
	if opts.Guard.MaxMessageSize == 0 {
		opts.Guard.MaxMessageSize = 64 << 10 // subscriptions and requests only
	}
	if p.pub, err = socket.New("XPUB", opts); err != nil {
		return nil, err
	}
	if cfg.Bind || bindsByRule(live) {
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
		// client has at most ReplayInFlight replies (and the socket's
		// SendQueueBytes, and its fair share of SendTotalBytes) queued.
		ropts.HWM = ReplayInFlight
		ropts.RouterDropUnroutable = true
		if ropts.WriteTimeout == 0 {
			// A replay client that never reads would otherwise hold its
			// share of the send budget for as long as TCP keeps it.
			ropts.WriteTimeout = DefaultReplayWriteTimeout
		}
		if ropts.Guard.MaxConns == 0 {
			// Each replay client may hold a whole buffer in its queue:
			// bound how many can.
			ropts.Guard.MaxConns = DefaultMaxReplayClients
		}
		p.replayWait = ropts.WriteTimeout
		if p.replayWait <= 0 {
			p.replayWait = DefaultReplayWriteTimeout
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
	return p.PublishBatch(ts, events, Int(int64(p.cfg.DataParallelRank)))
}

// PublishBatch is Publish with the timestamp and data_parallel_rank given
// (a rank not Valid is written as nil: msgspec writes an array_like struct
// with every field).
func (p *Publisher) PublishBatch(ts float64, events []Event, dpRank OptInt) error {
	if p.closed.Load() {
		return ErrClosed
	}
	payload := AppendBatch(nil, ts, events, dpRank, p.mapForm)
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
		// subscriber (counted in the socket's DroppedHWM).
		if err := p.pub.Send(p.ctx, p.topic, seqb[:], payload); err != nil {
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

func (p *Publisher) badRequest(r decodeguard.Reason, msg string, n int) {
	p.smu.Lock()
	p.bad[r]++
	p.smu.Unlock()
	p.cfg.Logger.Debug("kvevents: bad replay request", "reason", r.String(), "detail", msg, "frames", n)
}

func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	p.lastReplay = make(map[uint64]time.Time)
	p.refusedRun = make(map[uint64]int)
	p.hostTokens = make(map[string]*hostBucket)
	lastPrune := time.Now()
	for {
		msg, err := p.rep.Recv(p.ctx)
		if err != nil {
			return
		}
		id, start, err := parseRequest(msg.Frames)
		if err != nil {
			p.badRequest(decodeguard.ReasonOf(err), err.Error(), len(msg.Frames))
			continue
		}
		id = append([]byte(nil), id...)
		conn := msg.Peer.ID()
		p.amu.Lock()
		busy := p.active[conn]
		p.amu.Unlock()
		now := time.Now()
		if now.Sub(lastPrune) > time.Minute {
			p.pruneReplayConns(now)
			lastPrune = now
		}
		iv := p.cfg.ReplayInterval
		last, seen := p.lastReplay[conn]
		if busy || (iv > 0 && seen && now.Sub(last) < iv) || !p.hostAllows(msg.Peer, now) {
			// A flood of requests from one connection costs one small
			// reply each, not one replay each, and past
			// ReplayFloodLimit refusals in a row its connection.
			p.replaysRefused.Add(1)
			p.refusedRun[conn]++
			if lim := p.cfg.ReplayFloodLimit; lim > 0 && p.refusedRun[conn] > lim {
				// Requests it sent before the close may still come:
				// they find it closed and are dropped here.
				if p.rep.Disconnect(msg.Peer, decodeguard.NewError(decodeguard.ReasonPolicy,
					fmt.Sprintf("kvevents: replay client sent more than ReplayFloodLimit %d requests in a row while its replay ran or within ReplayInterval %v of it", lim, iv))) {
					p.replayFloods.Add(1)
				}
				continue
			}
			if !busy {
				// Not waited for: a flooder that does not read misses
				// it. While the connection's replay runs, no marker (it
				// would land inside that replay, which ends with its own).
				p.sendMarker(id, ReplayErrorSeq)
			}
			continue
		}
		delete(p.refusedRun, conn)
		p.lastReplay[conn] = now
		p.replays.Add(1)
		p.amu.Lock()
		p.active[conn] = true
		p.amu.Unlock()
		p.wg.Add(1)
		go p.replay(conn, id, start, p.seq.Load())
	}
}

// pruneReplayConns forgets the replay connections not served within the
// last minute (or ReplayInterval, if longer), so the maps hold only the
// connections served lately.
func (p *Publisher) pruneReplayConns(now time.Time) {
	for id, t := range p.lastReplay {
		if now.Sub(t) >= max(p.cfg.ReplayInterval, time.Minute) {
			delete(p.lastReplay, id)
			delete(p.refusedRun, id)
		}
	}
	for h, b := range p.hostTokens {
		if now.Sub(b.last) >= time.Minute {
			delete(p.hostTokens, h)
		}
	}
}

// hostBucket is one remote host's ReplaysPerHost token bucket.
type hostBucket struct {
	tokens float64
	last   time.Time
}

// hostAllows takes one of peer's host's ReplaysPerHost tokens, reporting
// false when there is none. Only a request that passes the other checks
// takes one (it is the last in the condition that calls it).
func (p *Publisher) hostAllows(peer *socket.Peer, now time.Time) bool {
	rate := float64(p.cfg.ReplaysPerHost)
	if rate <= 0 {
		return true
	}
	host := peer.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	b := p.hostTokens[host]
	if b == nil {
		b = &hostBucket{tokens: rate, last: now}
		p.hostTokens[host] = b
	}
	b.tokens = min(rate, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// entry returns the buffered batch seq, or ok false with the oldest
// sequence number the buffer still holds.
func (p *Publisher) entry(seq uint64) (e pubEntry, ok bool, oldest uint64) {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	if len(p.ring) == 0 {
		return pubEntry{}, false, p.seq.Load()
	}
	oldest = p.ring[p.head].seq
	if seq < oldest || seq-oldest >= uint64(len(p.ring)) {
		return pubEntry{}, false, oldest
	}
	return p.ring[(p.head+int(seq-oldest))%len(p.ring)], true, oldest
}

// replay sends one client the buffered batches from start up to end (the
// next sequence number when the request came), in order, then the end
// marker. It runs in its own goroutine, one per replay connection at a
// time, and waits for room in that client's queue (socket.SendWait): the
// client's in-flight replies are bounded by the ROUTER's HWM and byte
// bounds (its fair share of SendTotalBytes among the replay clients), a
// client that reads slowly gets its replay slowly, and one that never
// reads holds only its own goroutine until the ROUTER's write deadline
// disconnects it — never another client's replay or the live stream. A
// start older than the buffer yields what is left (as vLLM does: the client
// checks the first sequence number). If the replay cannot be completed
// (a batch left the buffer before it was sent, or a reply waited longer
// than the write deadline) it ends with the error marker (ReplayErrorSeq)
// instead, so a client never takes a replay with a hole for a complete one.
func (p *Publisher) replay(conn uint64, id []byte, start, end uint64) {
	defer p.wg.Done()
	defer func() {
		p.amu.Lock()
		delete(p.active, conn)
		p.amu.Unlock()
	}()
	var seqb [8]byte
	marker := ReplayEndSeq
	for seq := start; seq < end; seq++ {
		e, ok, oldest := p.entry(seq)
		if !ok {
			if seq == start && seq < oldest && oldest < end {
				seq = oldest - 1 // older than the buffer: what is left
				continue
			}
			marker = ReplayErrorSeq // it left the buffer mid-replay
			break
		}
		binary.BigEndian.PutUint64(seqb[:], e.seq)
		var err error
		if p.topicRep {
			err = p.sendWait(id, nil, p.topic, seqb[:], e.payload)
		} else {
			err = p.sendWait(id, nil, seqb[:], e.payload)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			marker = ReplayErrorSeq
			break
		}
		if err != nil {
			return // the client left, or the publisher closes
		}
		p.replayedBatches.Add(1)
	}
	if marker == ReplayErrorSeq {
		p.replaysIncompl.Add(1)
	}
	binary.BigEndian.PutUint64(seqb[:], marker)
	if p.topicRep {
		p.sendWait(id, nil, nil, seqb[:], nil)
	} else {
		p.sendWait(id, nil, seqb[:], nil)
	}
}

// sendWait queues one reply to id, waiting for room at most replayWait.
func (p *Publisher) sendWait(id []byte, frames ...[]byte) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.replayWait)
	defer cancel()
	return p.rep.SendWait(ctx, append([][]byte{id}, frames...)...)
}

// sendMarker sends the end (ReplayEndSeq) or error (ReplayErrorSeq) marker
// to id in the release's layout, without waiting (dropped, counted, if the
// client's queue is full).
func (p *Publisher) sendMarker(id []byte, seq uint64) error {
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	if p.topicRep {
		return p.rep.Send(p.ctx, id, nil, nil, seqb[:], nil)
	}
	return p.rep.Send(p.ctx, id, nil, seqb[:], nil)
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

// parseRequest checks a replay request as the ROUTER receives it:
// [identity, "", start_seq (8 bytes big-endian)], the only form vLLM's
// _service_replay serves.
func parseRequest(f [][]byte) (id []byte, start uint64, err error) {
	if len(f) != 3 || len(f[1]) != 0 {
		return nil, 0, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay request of %d frames, want [identity, \"\", start_seq]", len(f)))
	}
	if len(f[2]) != 8 {
		return nil, 0, decodeguard.NewError(decodeguard.ReasonEnvelope,
			fmt.Sprintf("kvevents: replay start_seq of %d bytes, want 8", len(f[2])))
	}
	return f[0], binary.BigEndian.Uint64(f[2]), nil
}

// DPSources returns one Source per data-parallel rank of one engine, as
// vLLM lays them out: rank r publishes on live's and replay's ports + r
// (OffsetPort), and each rank is its own source, named "name/dp<r>", with
// its own sequence — never one identity for the whole pod.
func DPSources(name, live, replay string, ranks int) ([]Source, error) {
	if ranks < 1 {
		return nil, fmt.Errorf("kvevents: %d DP ranks", ranks)
	}
	out := make([]Source, 0, ranks)
	for r := range ranks {
		l, err := OffsetPort(live, r)
		if err != nil {
			return nil, err
		}
		rp, err := OffsetPort(replay, r)
		if err != nil {
			return nil, err
		}
		out = append(out, Source{Name: name + "/dp" + strconv.Itoa(r), Live: l, Replay: rp})
	}
	return out, nil
}
