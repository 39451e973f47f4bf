package outputs

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"time"
	"unsafe"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// Per-connection fairness (issue 29 row 11). Run's receive loop checks each
// message in full (decode, engine binding) and queues the valid ones for
// the connection they came on (a copy, or for a message over 1 MiB the
// socket's own frames: Socket.TakeFrames); each connection's queue has a
// worker goroutine of its own that decodes its messages again (from what
// was queued) and calls the callbacks in the order the connection sent them. An
// engine's huge messages therefore occupy its own worker, not the receive
// loop: the other engines' messages are received, checked and handed to
// their handlers meanwhile. A connection whose queue holds
// ConnQueueBytes or more is held (socket.HoldRecv: its reader stops, TCP
// flow control slows that engine alone) until its worker has caught up, as
// is one with a heavy message waiting to render (heavyBacklog); all
// queues together hold at most QueueBytes (the receive loop waits beyond
// it).
//
// Why each message is decoded twice (checked by the loop, decoded again by
// its worker): queueing the decoded form instead would hold about 1 KiB of
// Output per request output against a few dozen bytes on the wire, so
// QueueBytes, counted in wire bytes, would no longer bound the memory
// queued; and a decode-once variant measured with BenchmarkReceiver
// (issue 30) went from about 2 to 70-100 allocations per message, because
// the messages in flight outnumber the copies the recycling pool keeps.

// job is one message (or sentinel) queued for its connection's worker.
type job struct {
	dead bool
	cp   *frameCopy // an owned copy of the message
	size int64      // wire bytes
	cost int64      // what the queues count: size plus the decoded outputs
	peer *socket.Peer
	at   time.Time
}

// outputCost is what one decoded request output takes (the size of
// enginecore.Output), charged to the queues with the wire bytes.
const outputCost = int64(unsafe.Sizeof(enginecore.Output{}))

// heavyCost is the cost from which a message's handler takes a heavy slot
// (Receiver.heavy): at most half the CPUs render such messages at once.
const heavyCost = 1 << 20

// heavySlots is how many heavy messages are handled at once.
func heavySlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// heavyBacklog is how many heavy messages a connection may have waiting
// for a heavy slot (queued, or taken by its worker and not yet rendering)
// before its reader is held. Heavy messages are rendered one at a time per
// connection and on at most heavySlots CPUs, so a longer backlog does not
// speed the engine up; it only costs reading, memory and the collector's
// time while the other engines' messages wait for a CPU: with six engines
// sending 7.5 MB messages, the first burst read 135 MB in 0.3 s and honest
// messages waited up to 200 ms (issue 37). With one, each heavy engine has
// at most one message rendering and one waiting.
const heavyBacklog = 1

// frameCopy is a message kept for its connection's worker: a copy in a
// recycled buffer (Receiver.free), so that a warm receiver allocates
// nothing per message, or, for a message over copyRetain, the socket's own
// frames (taken: Socket.TakeFrames), which are never recycled.
type frameCopy struct {
	buf    []byte
	frames [][]byte
	taken  bool
}

// copyRetain bounds the buffer a recycled copy keeps, freeCopies the
// copies kept and freeBytes their buffers together. A message over
// copyRetain is not copied but taken from the socket: copying a 7.5 MB
// message into a fresh buffer took the receive loop 2 to 56 ms (a large
// allocation waits for the collector), and every message queued behind it
// in the socket waited as long (issue 37).
const (
	copyRetain = 1 << 20
	freeCopies = 256
	freeBytes  = 16 << 20
)

// connQueue is one connection's queue.
type connQueue struct {
	id      uint64
	peer    *socket.Peer
	jobs    []job
	head    int
	bytes   int64
	heavy   int  // heavy jobs waiting (not yet taken by the worker)
	running bool // a worker serves it
	idle    bool // the worker waits for wake
	held    bool // its reader is held (socket.HoldRecv)
	wake    chan struct{}
}

// workerIdle is how long a worker waits for its connection's next message
// before it ends (a busy engine keeps its worker; a quiet one costs none).
const workerIdle = 2 * time.Second

// keepFrames keeps the frames of the message the receive loop is handling
// for its connection's worker: a message over copyRetain is taken from the
// socket, a smaller one copied into a recycled buffer.
func (r *Receiver) keepFrames(frames [][]byte) (*frameCopy, int64) {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	if n > copyRetain && r.sock != nil {
		if taken := r.sock.TakeFrames(); taken != nil {
			return &frameCopy{frames: taken, taken: true}, int64(n)
		}
	}
	var c *frameCopy
	r.fmu.Lock()
	if k := len(r.free); k > 0 && n <= copyRetain {
		c = r.free[k-1]
		r.free[k-1] = nil
		r.free = r.free[:k-1]
		r.freeBytes -= cap(c.buf)
	}
	r.fmu.Unlock()
	if c == nil {
		c = new(frameCopy)
	}
	if cap(c.buf) < n {
		c.buf = make([]byte, 0, n)
	}
	if cap(c.frames) < len(frames) {
		c.frames = make([][]byte, 0, len(frames))
	}
	buf := c.buf[:0]
	out := c.frames[:0]
	for _, f := range frames {
		buf = append(buf, f...)
		out = append(out, buf[len(buf)-len(f):len(buf):len(buf)])
	}
	c.buf, c.frames = buf, out
	return c, int64(n)
}

// recycle keeps c for reuse unless it was taken from the socket, grew too
// large or enough are kept.
func (r *Receiver) recycle(c *frameCopy) {
	if c == nil || c.taken || cap(c.buf) > copyRetain || cap(c.frames) > 4096 {
		return
	}
	clear(c.frames)
	c.frames = c.frames[:0]
	r.fmu.Lock()
	if len(r.free) < freeCopies && r.freeBytes+cap(c.buf) <= freeBytes {
		r.free = append(r.free, c)
		r.freeBytes += cap(c.buf)
	}
	r.fmu.Unlock()
}

// enqueue queues j for its connection's worker, starting the worker if
// none runs, holds the connection once its queue reaches ConnQueueBytes,
// and waits while all queues together hold more than QueueBytes. It
// returns ctx's error or loop.ErrLoopClosed when those end the wait.
func (r *Receiver) enqueue(ctx context.Context, j job) error {
	id := j.peer.ID()
	r.qmu.Lock()
	q := r.queues[id]
	if q == nil {
		q = &connQueue{id: id, peer: j.peer, wake: make(chan struct{}, 1)}
		r.queues[id] = q
	}
	q.jobs = append(q.jobs, j)
	q.bytes += j.cost
	if j.cost >= heavyCost {
		q.heavy++
	}
	r.queued += j.cost
	start := !q.running
	q.running = true
	if q.idle {
		q.idle = false
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	hold := !q.held && (q.bytes >= r.connLimit || q.heavy >= heavyBacklog || r.queued > r.queueLimit && q.bytes > r.shareLocked())
	if hold {
		q.held = true
		r.holds++
	}
	if start {
		r.workers.Add(1)
	}
	r.qmu.Unlock()
	if hold {
		r.applyHold(q)
	}
	if start {
		go r.work(ctx, q)
	}
	for {
		r.qmu.Lock()
		over := r.queued > r.backstop
		if over {
			r.queueWaits++
		}
		r.qmu.Unlock()
		if !over {
			return nil
		}
		select {
		case <-r.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stop:
			if err := ctx.Err(); err != nil {
				return err
			}
			return loop.ErrLoopClosed
		}
	}
}

// work serves q until it is empty (or the receiver stops).
func (r *Receiver) work(ctx context.Context, q *connQueue) {
	defer r.workers.Done()
	lim := r.lim
	var m enginecore.Message
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		r.qmu.Lock()
		if q.head == len(q.jobs) && !r.stopped() && ctx.Err() == nil {
			// Empty: wait a while for the connection's next message.
			q.jobs, q.head = q.jobs[:0], 0
			q.idle = true
			r.qmu.Unlock()
			idle.Reset(workerIdle)
			timedOut := false
			select {
			case <-q.wake:
			case <-idle.C:
				timedOut = true
			case <-ctx.Done():
			case <-r.stop:
			}
			r.qmu.Lock()
			q.idle = false
			if !timedOut || q.head < len(q.jobs) {
				r.qmu.Unlock()
				continue
			}
		}
		if q.head == len(q.jobs) || r.stopped() || ctx.Err() != nil {
			q.running = false
			release := q.held
			q.held = false
			for i := q.head; i < len(q.jobs); i++ {
				r.queued -= q.jobs[i].cost
				r.recycle(q.jobs[i].cp)
			}
			q.jobs, q.head, q.bytes, q.heavy = nil, 0, 0, 0
			delete(r.queues, q.id)
			r.qmu.Unlock()
			if release {
				r.applyHold(q)
			}
			r.signalSpace()
			return
		}
		j := q.jobs[q.head]
		q.jobs[q.head] = job{}
		q.head++
		if q.head > 64 && q.head*2 > len(q.jobs) {
			q.jobs = append(q.jobs[:0], q.jobs[q.head:]...)
			q.head = 0
		}
		r.qmu.Unlock()

		var err error
		took := r.takeHeavy(ctx, j.cost)
		if j.cost >= heavyCost {
			// A heavy message waits (counts in q.heavy) until it renders.
			r.qmu.Lock()
			q.heavy--
			r.unholdLocked(q)
		}
		if took {
			err = r.serve(ctx, &j, &m, &lim)
			if j.cost >= heavyCost {
				<-r.heavy
			}
		}
		r.recycle(j.cp)

		r.qmu.Lock()
		q.bytes -= j.cost
		r.queued -= j.cost
		r.unholdLocked(q)
		r.signalSpace()
		if err != nil {
			r.fail(err)
		}
	}
}

// unholdLocked resumes q's reader if it is held and q has caught up:
// under ConnQueueBytes, under heavyBacklog heavy messages waiting, and
// within its share of QueueBytes when the total is past it. It unlocks
// r.qmu (the socket is told after).
func (r *Receiver) unholdLocked(q *connQueue) {
	release := q.held && q.bytes < r.connLimit && q.heavy < heavyBacklog && (r.queued <= r.queueLimit || q.bytes <= r.shareLocked())
	if release {
		q.held = false
	}
	r.qmu.Unlock()
	if release {
		r.applyHold(q)
	}
}

// applyHold tells the socket whether q's reader is held, as q.held says
// when it is called. q.held changes under r.qmu and the socket is told
// after, so two changes (the receive loop holding, a worker releasing)
// could reach the socket in the other order and leave a caught-up
// connection held for good (TestHeavyBacklogHeld: "message 5 not
// delivered", once in 40 runs under -race). Telling it under r.hmu, with
// the state read then, makes the last call carry the last state; a queue
// that ended reads the state of the one that replaced it, if any.
func (r *Receiver) applyHold(q *connQueue) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	r.qmu.Lock()
	held := q.held
	if cur := r.queues[q.id]; cur != nil {
		held = cur.held
	}
	r.qmu.Unlock()
	r.sock.HoldRecv(q.peer, held)
}

// shareLocked is one connection's share of QueueBytes: QueueBytes divided
// by the connections with a queue. r.qmu is held.
func (r *Receiver) shareLocked() int64 {
	return r.queueLimit / int64(max(1, len(r.queues)))
}

// takeHeavy takes a heavy slot for a message of cost c (nothing for a
// light one), waiting while all are taken; false when ctx ends or the
// receiver stops first (the message is then not served, as when the
// receiver stops with messages queued).
func (r *Receiver) takeHeavy(ctx context.Context, c int64) bool {
	if c < heavyCost {
		return true
	}
	select {
	case r.heavy <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-r.stop:
	}
	return false
}

// signalSpace wakes a receive loop waiting for queue space.
func (r *Receiver) signalSpace() {
	select {
	case r.space <- struct{}{}:
	default:
	}
}

// stopped reports whether the receiver is closing or failed.
func (r *Receiver) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// fail records the first unclassified handler error and stops Run.
func (r *Receiver) fail(err error) {
	r.failOnce.Do(func() {
		r.failErr = err
		r.cancelRun()
	})
}

// serve delivers one job: the sentinel's event, or the message to the
// handler. An unclassified handler error is returned (it ends Run).
func (r *Receiver) serve(ctx context.Context, j *job, m *enginecore.Message, lim *enginecore.Limits) error {
	if j.dead {
		r.deadEvent(j.peer, j.at)
		return nil
	}
	if err := enginecore.Decode(j.cp.frames, m, lim); err != nil {
		// The receive loop decoded the same bytes: unreachable.
		r.lateDrop(j, err)
		return nil
	}
	r.mu.Lock()
	r.messages++
	r.outputs += uint64(len(m.Outputs))
	if st := r.engine(m.EngineIndex); st != nil {
		st.Messages++
		st.Outputs += uint64(len(m.Outputs))
	}
	r.mu.Unlock()
	if m.HasUtilityOutput && m.Utility.Special != 0 && r.cfg.OnNotification != nil {
		r.cfg.OnNotification(notification(m, j.peer))
	}
	err := r.cfg.Handler(ctx, m, j.peer)
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return nil
	}
	var de *decodeguard.Error
	if errors.As(err, &de) && de.Reason.Valid() {
		r.lateDrop(j, err)
		return nil
	}
	return &loop.Error{Loop: r.cfg.Name, Stage: "handler", Peer: j.peer.String(), Err: err}
}

// lateDrop counts, logs (rate-limited) and reports a message dropped by
// its worker (a classified handler error).
func (r *Receiver) lateDrop(j *job, err error) {
	reason := decodeguard.ReasonDecode
	var de *decodeguard.Error
	if errors.As(err, &de) && de.Reason.Valid() {
		reason = de.Reason
	}
	now := time.Now()
	r.mu.Lock()
	r.lateDropped[reason]++
	r.mu.Unlock()
	d := loop.Drop{Loop: r.cfg.Name, Reason: reason, Stage: "handler", Peer: j.peer,
		Frames: len(j.cp.frames), Length: int(j.size), Err: err, Time: now}
	if r.dropLog.Drop(reason.String(), j.peer.String(), now) == ratelog.First {
		r.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "zmqguard: dropped a message (first from this peer)",
			slog.String(ratelog.KeyComponent, r.cfg.Name), slog.String(ratelog.KeyReason, reason.String()),
			slog.String("stage", "handler"), slog.String(ratelog.KeyPeer, ratelog.Escape(j.peer.String(), 256)),
			slog.Int("frames", len(j.cp.frames)), slog.Int64("len", j.size),
			slog.String(ratelog.KeyErr, ratelog.Escape(err.Error(), 256)))
	}
	r.onDrop(d)
}

// queueStats are the fairness counters (see Stats).
func (r *Receiver) queueStats(st *Stats) {
	r.qmu.Lock()
	st.QueuedBytes, st.Holds, st.QueueWaits = r.queued, r.holds, r.queueWaits
	r.qmu.Unlock()
}
