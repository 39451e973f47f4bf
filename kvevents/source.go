package kvevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// liveMsg is one live message after the frame checks.
type liveMsg struct {
	seq     uint64
	payload []byte
	// topic is the topic frame (aliasing the message), for a fan-in
	// source's demultiplexing.
	topic []byte
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

	// turn serializes delivery: the source's delivery goroutines (the
	// receive loop, a replay, a Resync) take it, then mu, and keep it across
	// a Handler call, for which they release mu (emit). Only those
	// goroutines ever take it: no method a Handler may call (Remove, Close,
	// Resync, Stats) waits for it.
	turn  chan struct{}
	gates []chan struct{} // waited for before the first delivery (gate.go)
	// mu guards the sequence state; it is never held across a Handler
	// call.
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
	// fromStart makes the first live batch start a replay from 0
	// (Config.FromStart, or a Resync with a replay endpoint).
	fromStart bool
	// pos is the last batch delivered (or Source.Resume), when havePos.
	pos     Position
	havePos bool
	// conn is the connection (socket.Peer.ID) the last live batch came
	// from; a batch from another one starts a continuity proof.
	conn uint64
	// proving is set while a replay from pos.Seq must prove that the
	// publisher is still the run pos came from; connSeq is the first live
	// seq of the new connection.
	proving bool
	connSeq uint64

	// resyncReq is set by Resync until the source's next delivery step
	// (or the goroutine Resync starts) performs it, under mu.
	resyncReq atomic.Bool
	// bgMu guards running and stopping: a goroutine is added to wg only
	// while the source runs and is not stopping.
	bgMu     sync.Mutex
	running  bool
	stopping bool

	// smu guards the counters below.
	smu sync.Mutex
	st  SourceStats
	// holderID is the bound slot's holder's connection (smu held).
	holderID uint64

	// fan is set on a fan-in source (Source.FanIn): its socket's messages
	// go to the engines it demultiplexes by topic. parent is set on such
	// an engine: it has no socket and no loop of its own (sock, lp nil),
	// its live batches come from the parent's loop (fanin.go).
	fan    *fanIn
	parent *source
	topic  string // a fan-in engine's topic (its name may add a DP rank: engineName)
	// ttl retires the engine after Config.EngineTTL without a connection
	// (ttl.go; bgMu held); retired (mu held) is set once it is.
	ttl     *time.Timer
	retired bool
}

// maxSeqJump bounds how far ahead of the last live seq a batch may be and
// still count as the same run: a publisher sending one batch per scheduler
// step would need years to go 2^32 batches further, so a jump past it is
// a new run (reset, delivery from the batch itself), never ~2^63 batches
// reported lost.
const maxSeqJump = 1 << 32

func newSource(s *Subscriber, src Source) (*source, error) {
	so := &source{sub: s, src: src, fromStart: s.cfg.FromStart, turn: make(chan struct{}, 1)}
	// The source's context is the Subscriber's, from the start: Remove and
	// Close cancel it without taking so.mu (which a Handler's caller holds).
	so.ctx, so.cancel = context.WithCancel(s.ctx)
	so.st.Name, so.st.Live, so.st.Replay = src.Name, src.Live, src.Replay
	so.batch.Source = src.Name
	if r := src.Resume; r != nil {
		// As if the batch had been delivered: the first connection must
		// prove that the publisher is still that run (onLive).
		so.started = true
		so.pos, so.havePos = *r, true
		so.next, so.lastLive, so.maxSeen = r.Seq+1, r.Seq, r.Seq
	}
	if src.FanIn {
		so.fan = newFanIn(so)
	}
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
			so.noteConn()
			if src.Bind {
				so.count(func(st *SourceStats) {
					st.Holder.Addr, st.Holder.Since, st.Holder.Batches = ratelog.Escape(e.Remote, 128), time.Now(), 0
					so.holderID = e.Peer.ID()
				})
			}
		case socket.EventDisconnected:
			so.peers.Add(-1)
			so.noteConn()
			if src.Bind {
				so.count(func(st *SourceStats) {
					if so.holderID == e.Peer.ID() {
						st.Holder.Addr, st.Holder.Since, st.Holder.Batches = "", time.Time{}, 0
						so.holderID = 0
					}
				})
			}
		case socket.EventRejected:
			if src.Bind {
				so.logRefused(e)
			}
		}
		if so.fan != nil {
			so.fan.onEvent(e)
		}
		if user != nil {
			user(e)
		}
	}
	sock, err := socket.New("SUB", opts)
	if err != nil {
		return nil, err
	}
	if err := sock.Subscribe([]byte(s.cfg.Topic)); err != nil {
		sock.Close()
		return nil, err
	}
	if src.Bind || src.FanIn {
		err = sock.Bind(src.Live)
	} else {
		err = sock.Dial(src.Live)
	}
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("kvevents: source %s: %w", ratelog.Escape(src.Name, 128), err)
	}
	maxPayload := s.cfg.MaxPayload
	lp, err := loop.New(sock, loop.Config[liveMsg]{
		Name:        "kvevents " + src.Name,
		Logger:      s.cfg.Logger,
		LogInterval: s.cfg.LogInterval,
		Decode: func(frames [][]byte, dst *liveMsg) error {
			var err error
			dst.seq, dst.payload, err = parseLive(frames, maxPayload)
			if err == nil {
				dst.topic = frames[0]
			}
			return err
		},
		Handler: func(ctx context.Context, d loop.Delivery[liveMsg]) error {
			if so.fan != nil {
				return so.fan.onLive(ctx, d.Value, d.Msg.Peer)
			}
			return so.onLive(ctx, d.Value.seq, d.Value.payload, d.Msg.Peer.ID())
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
		so.bgMu.Lock()
		so.running = true
		if so.resyncReq.Load() && !so.stopping {
			so.wg.Add(1)
			go so.resyncNow()
		}
		so.bgMu.Unlock()
		if so.lp == nil {
			return // a fan-in engine: its parent's loop feeds it
		}
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
		so.bgMu.Lock()
		so.stopping = true
		so.bgMu.Unlock()
		so.cancel()
		so.mu.Lock()
		if so.cancelReplay != nil {
			so.cancelReplay()
		}
		so.mu.Unlock()
		if so.lp != nil {
			so.lp.Close()
			so.sock.Close()
		}
		so.stopTTL()
		so.wg.Wait()
		if so.fan != nil {
			so.fan.stopEngines()
		}
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

// emit calls the handler, unless the source was removed. It is called with
// the turn and so.mu held, and releases so.mu for the call: the Handler
// runs under no lock of the Subscriber's (it may call Remove, Close,
// Resync and Stats), while the turn keeps the source's other delivery
// goroutines from delivering meanwhile. The caller's state must be
// consistent when it calls emit: so.mu is taken again after the call.
func (so *source) emit(u Update) error {
	if so.removed.Load() || so.parent != nil && so.parent.removed.Load() {
		return nil
	}
	u.Source = so.src.Name
	ctx := so.ctx
	so.mu.Unlock()
	err := so.sub.cfg.Handler(ctx, u)
	so.mu.Lock()
	if err != nil {
		if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
			so.sub.fail(err)
		}
		return err
	}
	return nil
}

// onLive handles one live batch in the source's receive goroutine; conn is
// the connection it came from (socket.Peer.ID).
func (so *source) onLive(ctx context.Context, seq uint64, payload []byte, conn uint64) error {
	_ = ctx
	so.lastSeen.Store(time.Now().UnixNano())
	so.lock()
	defer so.unlock()
	if so.retired {
		return errRetired
	}
	newConn := conn != so.conn
	so.conn = conn
	switch {
	case !so.started:
		so.started = true
		switch {
		case !so.fromStart:
			so.next = seq
		case seq > maxSeqJump:
			// Replaying from 0 would count ~seq batches lost.
			so.jumped(seq, 0)
		}
	case seq <= so.lastLive:
		// The publisher restarted: its sequence starts again at 0.
		if err := so.reset(seq, "seq_back", "kvevents: publisher restarted (sequence went back)",
			"seq", seq, "previous", so.lastLive); err != nil {
			return err
		}
	case seq-so.lastLive > maxSeqJump:
		if err := so.reset(seq, "jump", "kvevents: publisher's sequence jumped ahead (a new run)",
			"seq", seq, "previous", so.lastLive, "bound", uint64(maxSeqJump)); err != nil {
			return err
		}
		so.next = seq
	case newConn && so.havePos:
		// A new connection (a reconnect, another peer in a bound slot, the
		// first one after Source.Resume): what it sends is applied as the
		// continuation only once proven (see doc.go).
		so.lastLive, so.connSeq = seq, seq
		so.maxSeen = max(so.maxSeen, seq)
		if so.src.Replay == "" {
			// No replay endpoint, no proof: the break is a loss, even
			// when seq is the next one expected.
			so.sub.log.line(logProof, so.sub.cfg.Logger, "kvevents: continuity unproven (new connection, no replay endpoint): entries uncertain",
				"source", so.src.Name, "last_seq", so.pos.Seq, "last_digest", hex64(so.pos.Digest), "seq", seq)
			if err := so.unproven(so.next, seq); err != nil {
				return err
			}
			return so.deliver(seq, payload, false)
		}
		so.abortReplay()
		so.proving = true
		so.bufferLive(seq, payload)
		so.startReplay()
		return nil
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
	so.bufferLive(seq, payload)
	so.startReplay()
	return nil
}

// reset reports a new publisher run (so.mu held): the running replay and
// its buffer are dropped, the Handler gets an UpdateReset with seq, and
// delivery starts again from 0. why is the counter (SourceStats.ResetsBy).
func (so *source) reset(seq uint64, why, msg string, evidence ...any) error {
	so.abortReplay()
	so.countReset(why)
	so.sub.log.line(logReset, so.sub.cfg.Logger, msg, append([]any{"source", so.src.Name}, evidence...)...)
	so.havePos, so.proving = false, false
	if err := so.emit(Update{Kind: UpdateReset, Seq: seq}); err != nil {
		return err
	}
	so.next, so.maxSeen = 0, 0
	return nil
}

// jumped starts delivery at seq, far ahead of what came before (so.mu
// held); reset has told the Handler when something was delivered.
func (so *source) jumped(seq, previous uint64) {
	so.count(func(st *SourceStats) { st.ResetsBy.Jump++ })
	so.sub.log.line(logReset, so.sub.cfg.Logger, "kvevents: first sequence number too far ahead to replay from 0; starting at it",
		"source", so.src.Name, "seq", seq, "previous", previous, "bound", uint64(maxSeqJump))
	so.next = seq
}

func (so *source) countReset(why string) {
	so.count(func(st *SourceStats) {
		switch why {
		case "seq_back":
			st.Resets++
			st.ResetsBy.SeqBack++
		case "digest":
			st.Resets++
			st.ResetsBy.Digest++
		case "jump":
			st.Resets++
			st.ResetsBy.Jump++
		case "resync":
			st.Resets++
			st.ResetsBy.Resync++
		}
	})
}

// startReplay starts a replay goroutine (so.mu held; the caller runs in
// one of the source's goroutines, so wg is above zero).
func (so *source) startReplay() {
	so.replaying = true
	so.gen++
	rctx, cancel := context.WithCancel(so.ctx)
	so.cancelReplay = cancel
	so.wg.Add(1)
	go so.replay(rctx, so.gen)
}

// lock takes the turn and so.mu, and performs a pending Resync first, so
// that once Resync has returned the Handler's next update for the source is
// its UpdateReset. Only the source's delivery goroutines call it.
func (so *source) lock() {
	so.turn <- struct{}{}
	so.waitGates()
	so.mu.Lock()
	if so.resyncReq.Load() {
		_ = so.doResync()
	}
}

// requestResync records a Resync and makes sure it happens even if no
// batch comes: a goroutine of the source's performs it (never the
// caller's, which may hold a Handler's locks).
func (so *source) requestResync() {
	if so.resyncReq.Swap(true) {
		return // one pending already
	}
	so.bgMu.Lock()
	defer so.bgMu.Unlock()
	if so.running && !so.stopping {
		so.wg.Add(1)
		go so.resyncNow()
	}
}

func (so *source) resyncNow() {
	defer so.wg.Done()
	so.lock()
	so.unlock()
}

// unlock releases so.mu and the turn (lock's counterpart).
func (so *source) unlock() {
	so.mu.Unlock()
	<-so.turn
}

// doResync forgets where the source stands (so.mu held): an UpdateReset,
// then delivery from the oldest batch the publisher holds (a replay from
// 0) or, without a replay endpoint, from the next live batch.
func (so *source) doResync() error {
	if !so.resyncReq.Swap(false) {
		return nil
	}
	so.abortReplay()
	so.countReset("resync")
	so.sub.log.line(logReset, so.sub.cfg.Logger, "kvevents: source resynchronised on request (Subscriber.Resync)",
		"source", so.src.Name, "next", so.next, "last_seq", so.lastLive)
	so.havePos, so.proving = false, false
	err := so.emit(Update{Kind: UpdateReset, Seq: 0})
	if so.src.Replay == "" {
		so.started, so.fromStart = false, false
		return err
	}
	so.next, so.fromStart = 0, true
	if so.started && so.maxSeen <= maxSeqJump && so.ctx.Err() == nil {
		so.startReplay()
	} else {
		so.started = false
	}
	return err
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
	so.sub.chargeBuffered(-int64(so.bufBytes))
	so.buf, so.bufBytes = nil, 0
}

// chargeBuffered counts n more (negative: fewer) buffered bytes in the
// Subscriber's total and in the receive budget its sockets share
// (Config.MemoryBudget), so that batches buffered during replays and
// messages being received are bounded together: a connection holding more
// than its fair share stalls while the buffers and the reads spend the
// budget (zmtpguard.Budget.Charge), which keeps what the Subscriber holds
// under about 2 × MemoryBudget instead of 3 × (issue 37).
func (s *Subscriber) chargeBuffered(n int64) {
	s.buffered.Add(n)
	if b := s.cfg.Socket.Guard.Budget; b != nil {
		b.Charge(n)
	}
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
	so.sub.chargeBuffered(n)
	so.buf = append(so.buf, buffered{seq: seq, payload: append([]byte(nil), payload...)})
	so.bufBytes += len(payload)
}

// deliver decodes and hands one batch to the handler, and advances next
// (so.mu held). A batch that fails to decode is counted and skipped; only a
// handler error is returned.
func (so *source) deliver(seq uint64, payload []byte, replayed bool) error {
	so.next = seq + 1
	d := payloadDigest(payload)
	so.pos, so.havePos = Position{Seq: seq, Digest: d}, true
	b := &so.batch
	err := decodeBatch(payload, so.lim(), b, so.onEventDrop)
	if err != nil {
		r := decodeguard.ReasonOf(err)
		so.count(func(st *SourceStats) { st.Dropped[r]++ })
		so.sub.log.drop(r, so.src.Name, seq, err, payload)
		return nil
	}
	b.Seq, b.Replayed, b.Digest = seq, replayed, d
	so.count(func(st *SourceStats) {
		st.Batches++
		if so.holderID != 0 {
			st.Holder.Batches++
		}
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
			case blockInactive:
				st.Events.BlockInactive++
			}
		}
		st.UnknownFields += uint64(b.UnknownFields)
	})
	return so.emit(Update{Kind: UpdateBatch, Batch: b, Seq: seq})
}

func (so *source) onEventDrop(d eventDrop) {
	r := decodeguard.ReasonOf(d.Err)
	so.count(func(st *SourceStats) {
		st.DroppedEvents[r]++
		if r == decodeguard.ReasonUnsupported {
			st.UnsupportedTypes = countType(st.UnsupportedTypes, ratelog.Escape(d.Type, 64), 1)
		}
	})
	so.sub.log.drop(r, so.src.Name, so.next-1, d.Err, nil)
}

// lose reports [from, to) lost (so.mu held).
func (so *source) lose(from, to uint64) error {
	if to <= from {
		return nil
	}
	return so.loseRange(from, to)
}

// unproven reports that continuity across a new connection is not proven
// (so.mu held): an UpdateLost [from, to), sent even when the range is empty
// (from == to: no batch known missing, but the engine's entries can no
// longer be trusted), so that the consumer treats the source's entries as
// uncertain. Counted in SourceStats.Unproven.
func (so *source) unproven(from, to uint64) error {
	so.proving = false
	so.count(func(st *SourceStats) { st.Unproven++ })
	return so.loseRange(from, max(from, to))
}

func (so *source) loseRange(from, to uint64) error {
	so.count(func(st *SourceStats) {
		if to == from {
			return
		}
		st.Lost += to - from
		if len(st.LostRanges) == maxLostRanges {
			copy(st.LostRanges, st.LostRanges[1:])
			st.LostRanges = st.LostRanges[:maxLostRanges-1]
		}
		st.LostRanges = append(st.LostRanges, Range{From: from, To: to})
	})
	so.sub.log.line(logLost, so.sub.cfg.Logger, "kvevents: batches lost", "source", so.src.Name, "from", from, "to", to)
	so.next = to
	return so.emit(Update{Kind: UpdateLost, From: from, To: to})
}

// advance delivers buffered batches that are next in order (so.mu held).
func (so *source) advance() error {
	for len(so.buf) > 0 && !so.proving {
		h := so.buf[0]
		if h.seq > so.next {
			return nil
		}
		so.buf[0] = buffered{} // the backing array must not keep the payload alive
		so.buf = so.buf[1:]
		so.bufBytes -= len(h.payload)
		so.sub.chargeBuffered(-int64(len(h.payload)))
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

// logRefused logs a connection the bound slot refused, with who holds it.
func (so *source) logRefused(e socket.Event) {
	so.smu.Lock()
	h := so.st.Holder
	so.smu.Unlock()
	since := ""
	if !h.Since.IsZero() {
		since = h.Since.UTC().Format(time.RFC3339Nano)
	}
	msg := "kvevents: bound source refused a connection (no publisher holds its slot)"
	if h.Addr != "" {
		msg = "kvevents: bound source refused a connection: its slot is held"
	}
	why := ""
	if e.Err != nil {
		why = ratelog.Escape(e.Err.Error(), 256)
	}
	so.sub.log.line(logHeld, so.sub.cfg.Logger, msg,
		"source", so.src.Name, "refused", ratelog.Escape(e.Remote, 128), "err", why, "holder", h.Addr, "holder_since", since,
		"holder_batches", h.Batches)
}

// hex64 renders a digest for a log line.
func hex64(v uint64) string { return fmt.Sprintf("%#016x", v) }
