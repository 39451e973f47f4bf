package socket

import (
	"context"
	"runtime"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

const (
	// batchMsgs bounds the messages one reader hands to Recv at once.
	batchMsgs = 128
	// batchBytes: a reader hands its batch off once it holds this many bytes.
	batchBytes = 256 << 10
	// batchRetain bounds the buffer bytes a recycled batch keeps (see
	// putBatch); buffers beyond it are released to the garbage collector.
	batchRetain = 512 << 10
	// freeRetain bounds the buffer bytes all the batches in a socket's free
	// list keep together. Without it, a stream of mixed-size messages
	// ratchets every slot of every recycled batch up to the largest message
	// it ever held (a soak of junk frames grew a coordinator's heap past
	// 150 MiB that way).
	freeRetain = 4 << 20
	// firstRetain bounds the buffer bytes a peer keeps between batches
	// (peerConn.first): an idle peer should cost its connection, not the
	// largest message it once sent.
	firstRetain = 8 << 10
	// yieldBytes: a reader that hands a batch of at least this many bytes
	// to a waiting Recv yields its P to it (see handOff).
	yieldBytes = 32 << 10
)

// slot holds one received message and what Recv returns for it.
type slot struct {
	m       zmtpguard.Message
	out     [][]byte // the frames Recv returns (may alias m.Frames)
	scratch []byte   // converted XPUB subscriptions, synthetic messages
}

// batch is a run of messages from one peer.
type batch struct {
	peer  *peerConn
	n     int
	bytes int
	// hw is the number of leading slots ever written (a high-water mark):
	// the slots after it are still zero, so putBatch need not visit them.
	// A ROUTER or REQ peer's batch usually holds one message.
	hw int
	// kept is the buffer bytes the batch held when it entered the free
	// list (counted in Socket.freeBytes while it is there).
	kept int
	// charged is the bytes of this batch counted against RecvQueueBytes.
	charged int64
	// reserved is the bytes charged to the MemoryBudget for this batch:
	// charged plus at most budgetStep taken ahead, so that the reader
	// touches the budget's shared counters once per budgetStep bytes, not
	// once per message. The budget over-counts by the unused part (never
	// under-counts), and only while the batch is being assembled.
	reserved int64
	slots    [batchMsgs]slot
}

// footprint returns the buffer bytes sl keeps for reuse.
func (sl *slot) footprint() int {
	return sl.m.Footprint() + cap(sl.scratch) + cap(sl.out)*sliceHeader
}

// release drops sl's buffers.
func (sl *slot) release() {
	sl.m = zmtpguard.Message{}
	sl.scratch = nil
	sl.out = nil
}

// sliceHeader is the size of a slice header in bytes.
const sliceHeader = 3 * (4 << (^uint(0) >> 63))

func (s *Socket) getBatch(p *peerConn) *batch {
	var b *batch
	select {
	case b = <-s.free:
		s.freeBytes.Add(-int64(b.kept))
		b.kept = 0
	default:
		b = new(batch)
	}
	b.peer = p
	return b
}

// putBatch recycles b. It releases slot buffers beyond batchRetain bytes, so
// a burst of large messages does not stay pinned in the free list, and lets
// the whole batch go when the free list already keeps freeRetain bytes.
func (s *Socket) putBatch(b *batch) {
	s.uncharge(b)
	// Slot n may hold a message read but not delivered (a command).
	b.hw = max(b.hw, min(b.n+1, len(b.slots)))
	kept := 0
	for i := range b.slots[:b.hw] {
		sl := &b.slots[i]
		size := sl.footprint()
		if kept+size > batchRetain {
			sl.release()
			continue
		}
		kept += size
		if len(sl.out) == 0 || len(sl.m.Frames) == 0 || &sl.out[0] != &sl.m.Frames[0] {
			// Unless out is m.Frames itself (PULL, DEALER, SUB, XPUB data),
			// whose frames alias m's buffer, which the slot keeps anyway.
			clear(sl.out)
		}
		sl.out = sl.out[:0]
	}
	b.peer = nil
	b.n = 0
	b.bytes = 0
	if s.freeBytes.Add(int64(kept)) > freeRetain {
		s.freeBytes.Add(-int64(kept))
		return // b and its buffers go to the garbage collector
	}
	b.kept = kept
	select {
	case s.free <- b:
	default:
		s.freeBytes.Add(-int64(kept))
	}
}

// handOff gives a batch to Recv, waiting while the inbox is full (back
// pressure: the reader stops reading, TCP flow control slows the peer). It
// returns false when the socket closed first.
func (s *Socket) handOff(b *batch) bool {
	if s.tryHandOff(b) {
		return true
	}
	select {
	case s.inbox <- b:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// tryHandOff gives a batch to Recv if the inbox has room, without waiting.
func (s *Socket) tryHandOff(b *batch) bool {
	big := b.bytes >= yieldBytes // b belongs to Recv once sent
	select {
	case s.inbox <- b:
		if big && s.recvWaiting.Load() {
			// Recv was parked waiting for this batch and is now queued to
			// run next on this P. Yield so it runs here, where the batch's
			// bytes are still in cache, rather than waiting for another P
			// to steal it; this reader continues on whichever P is free.
			runtime.Gosched()
		}
		return true
	default:
		return false
	}
}

// deliverDeparted unregisters a departed XPUB subscriber's topics and
// hands Recv an "\x00topic" for every one that no remaining subscriber
// holds, as libzmq's XPUB does. Its cost is the departed subscriber's own
// topics.
func (s *Socket) deliverDeparted(p *peerConn) {
	topics := p.dropTopics()
	if len(topics) == 0 || s.closed.Load() {
		return
	}
	var b *batch
	for _, t := range topics {
		if b == nil {
			b = s.getBatch(p)
		}
		sl := &b.slots[b.n]
		sl.m.Reset()
		sl.scratch = append(append(sl.scratch[:0], 0), t...)
		sl.out = append(sl.out[:0], sl.scratch)
		b.n++
		if b.n == len(b.slots) {
			if !s.handOff(b) {
				s.putBatch(b)
				return
			}
			b = nil
		}
	}
	if b != nil {
		if !s.handOff(b) {
			s.putBatch(b)
		}
	}
}

// Recv returns the next message, waiting until one arrives, ctx is done
// (ctx.Err() is returned) or the socket is closed (ErrClosed). Messages from
// different peers are fair-queued. The returned frames are valid until the
// next Recv (see [Msg]). On a PUSH socket Recv returns an error, as on a
// REQ socket with no request outstanding.
func (s *Socket) Recv(ctx context.Context) (Msg, error) {
	if !s.kind.receives() {
		return Msg{}, errNotSupported
	}
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	for {
		if s.closed.Load() {
			s.releaseCur()
			return Msg{}, ErrClosed
		}
		if b := s.cur; b != nil && s.pos < b.n {
			// ctx.Err is an atomic load for the standard contexts, cheaper
			// per message than a select on ctx.Done.
			if err := ctx.Err(); err != nil {
				return Msg{}, err
			}
			sl := &b.slots[s.pos]
			if s.kind == kReq {
				if !s.reqAccept(b.peer) {
					s.pos++
					s.dropFilt.Add(1)
					continue
				}
			}
			s.pos++
			s.received.Add(1)
			return Msg{Frames: sl.out, Peer: b.peer.info}, nil
		}
		if s.kind == kReq {
			if err := s.reqCheckWaiting(); err != nil {
				return Msg{}, err
			}
		}
		s.releaseCur()
		select {
		case b := <-s.inbox:
			s.cur, s.pos = b, 0
			continue
		default:
		}
		s.recvWaiting.Store(true)
		select {
		case b := <-s.inbox:
			s.recvWaiting.Store(false)
			s.cur, s.pos = b, 0
		case <-ctx.Done():
			s.recvWaiting.Store(false)
			return Msg{}, ctx.Err()
		case <-s.ctx.Done():
			s.recvWaiting.Store(false)
			return Msg{}, ErrClosed
		}
	}
}

func (s *Socket) releaseCur() {
	if s.cur != nil {
		s.putBatch(s.cur)
		s.cur = nil
		s.pos = 0
	}
}

// TakeFrames gives the caller the frames of the message the last Recv
// returned: the socket no longer reuses their memory, so they stay valid
// after the next Recv (the connection reads later messages into new
// buffers). It returns nil when there is no such message: before the first
// Recv, once taken, or once a later Recv moved past it. It is for a consumer that
// keeps large messages after Recv, as package outputs queues an engine's
// messages for its own worker: taking a 7.5 MB message costs nothing where
// copying it took the receive loop 2 to 56 ms, a fresh copy being a large
// allocation (issue 37), and every other connection's messages waited
// behind it. Call it from the goroutine that calls Recv, before its next
// Recv. The message's bytes still count against RecvQueueBytes and the
// MemoryBudget until that next Recv, as when it is not taken.
func (s *Socket) TakeFrames() [][]byte {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	b := s.cur
	if b == nil || s.pos == 0 || s.pos > b.n {
		return nil
	}
	sl := &b.slots[s.pos-1]
	frames := sl.out
	if frames == nil {
		return nil
	}
	sl.release()
	return frames
}
