package kvevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

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
	sock, err := socket.New("SUB", opts)
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
	maxPayload := s.cfg.MaxPayload
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
	err := decodeBatch(payload, so.lim(), b, so.onEventDrop)
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
	so.count(func(st *SourceStats) {
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
