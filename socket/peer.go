package socket

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Limits on what one XPUB subscriber may hold.
const (
	// maxTopicsPerPeer bounds the distinct topics one XPUB subscriber may
	// subscribe to; further subscriptions are dropped and counted as
	// ReasonPolicy.
	maxTopicsPerPeer = 10000
	// maxTopicBytesPerPeer bounds the total bytes of one XPUB subscriber's
	// distinct topics.
	maxTopicBytesPerPeer = 1 << 20
	// maxCtrl bounds queued PONGs per peer (a peer that pings without
	// reading gets no more answers).
	maxCtrl = 16
	// slotRetain: a send slot whose buffer grew past this is released after
	// its message is written.
	slotRetain = 64 << 10
	// initialRing is the first size of a peer's send ring; it doubles up to
	// the HWM as needed.
	initialRing = 16
)

// peerConn is one established connection of a Socket: a reader goroutine
// feeding the socket's inbox and a writer goroutine draining a bounded queue.
type peerConn struct {
	s    *Socket
	conn *zmtpguard.Conn
	info *Peer
	gone func()
	// accepted: the connection came through one of the socket's listeners.
	accepted bool

	qmu       sync.Mutex
	ring      []outMsg
	head, n   int
	hwm       int
	qbytes    int // bytes of the data messages queued in ring
	maxBytes  int // SendQueueBytes (<= 0: no bound)
	ctrl      []outMsg
	ctrlSpare []outMsg
	waiting   bool
	qclosed   bool
	wake      chan struct{}

	// XPUB subscriber topics and their bytes (guarded by s.topicIdx.mu;
	// see topics.go). nil once the subscriber departed.
	topics     map[string]topicRef
	topicBytes int

	closeOnce sync.Once
	done      chan struct{}
	closeErr  error

	// first is where the reader reads the first message of a batch, so that
	// an idle connection holds no batch: the slot is swapped into a batch
	// once a message has arrived.
	first slot

	// Liveness. rx counts messages (data or command) read; paused is set
	// while the reader waits for Recv (the socket, not the peer, is slow);
	// peerTTL is the TTL the peer's last PING announced (ns, 0 = none).
	rx      atomic.Uint64
	tx      atomic.Uint64 // write rounds that sent something
	paused  atomic.Bool
	peerTTL atomic.Int64
	hb      heartbeat
	// Background hand-off (see deliver): dq is the batch queued for the
	// drain goroutine, draining whether that goroutine runs; dtaken is
	// signalled each time it takes dq.
	dmu      sync.Mutex
	dq       *batch
	draining bool
	dtaken   chan struct{}
	// held is set by Socket.HoldRecv: the reader reads no new batch until
	// it is cleared (unheld is signalled then).
	held   atomic.Bool
	unheld chan struct{}
	// recvHeld is the bytes of this connection's batches handed over
	// (deliver) and not yet released by Recv (see peerRecvShare); the
	// reader checks it only between batches.
	recvHeld atomic.Int64
}

func newPeerConn(s *Socket, c *zmtpguard.Conn, info *Peer, gone func()) *peerConn {
	p := &peerConn{s: s, conn: c, info: info, gone: gone, hwm: s.opts.HWM, maxBytes: s.opts.SendQueueBytes,
		wake: make(chan struct{}, 1), done: make(chan struct{}), dtaken: make(chan struct{}, 1), unheld: make(chan struct{}, 1)}
	if s.kind == kXPub {
		p.topics = make(map[string]topicRef)
	}
	return p
}

// enqueue copies [prefix,] frames into p's queue. It returns false when the
// queue is at its HWM or byte bound, the socket's SendTotalBytes would be
// passed, or the peer is closed.
func (p *peerConn) enqueue(prefix []byte, hasPrefix bool, frames [][]byte) bool {
	return p.enqueueCounted(prefix, hasPrefix, frames, true, false)
}

// enqueueCounted is enqueue; count false leaves a refusal uncounted (a
// SendWait that will wait and retry has dropped nothing); share keeps the
// last frame by reference (see outMsg.set). A shared frame counts in full
// against every queue that holds it (the bounds stay what they were).
func (p *peerConn) enqueueCounted(prefix []byte, hasPrefix bool, frames [][]byte, count, share bool) bool {
	size := len(prefix)
	for _, f := range frames {
		size += len(f)
	}
	evicted := false
	p.qmu.Lock()
again:
	if p.qclosed || p.n >= p.hwm {
		p.qmu.Unlock()
		return false
	}
	if p.n > 0 && p.maxBytes > 0 && p.qbytes+size > p.maxBytes {
		p.qmu.Unlock()
		if count {
			p.s.dropBytes.Add(1)
		}
		return false
	}
	if p.n > 0 && p.overShare(size) {
		// Over its fair share of SendTotalBytes: refused (dropped for this
		// peer, counted) so that a peer within its share always finds room.
		p.qmu.Unlock()
		if count {
			p.s.dropBytes.Add(1)
			p.s.dropShare.Add(1)
		}
		return false
	}
	if !p.s.reserveSend(size) {
		p.qmu.Unlock()
		// Within its share but the total is spent: peers over their
		// (smaller, since more peers came) shares hold it. The largest
		// of them is disconnected and the message tried once more.
		if !evicted && p.s.evictOverShare(p) {
			evicted = true
			p.qmu.Lock()
			goto again
		}
		if count {
			p.s.dropBytes.Add(1)
		}
		return false
	}
	p.qbytes += size
	if p.n == len(p.ring) {
		p.growRing()
	}
	i := p.head + p.n
	if i >= len(p.ring) {
		i -= len(p.ring)
	}
	p.ring[i].set(prefix, hasPrefix, frames, share)
	p.n++
	p.kick()
	p.qmu.Unlock()
	return true
}

// overShare reports whether queueing size more bytes would take p past its
// fair share of SendTotalBytes: the total divided by the connected peers.
// The shares add up to the total, so while every peer keeps within its own
// the total never refuses one that does: a subscriber that never reads holds
// at most its share, not the whole budget. Call with qmu held.
func (p *peerConn) overShare(size int) bool {
	lim := p.s.opts.SendTotalBytes
	if lim <= 0 {
		return false
	}
	n := int64(len(*p.s.snap.Load()))
	if n <= 1 {
		return false
	}
	return int64(p.qbytes+size) > lim/n
}

// evictOverShare disconnects the peer (other than p) whose send queue holds
// the most bytes, if that is more than its fair share of SendTotalBytes (a
// ReasonPolicy violation, counted in Stats.SendEvictions). Its queued bytes
// are returned to the total before evictOverShare returns; the rest of its
// close (events, callbacks) runs in its own goroutine, so that a Send never
// runs another peer's callbacks. It reports whether a peer was evicted.
// Only the types whose full queue already means a drop (XPUB, ROUTER,
// XSUB) evict: a PUSH or DEALER within its share waits, or tries the next
// peer, and what it queued for a slow peer is never thrown away.
// Call without any qmu held.
func (s *Socket) evictOverShare(p *peerConn) bool {
	lim := s.opts.SendTotalBytes
	peers := *s.snap.Load()
	if lim <= 0 || len(peers) < 2 || (s.kind != kXPub && s.kind != kRouter && s.kind != kXSub) {
		return false
	}
	share := lim / int64(len(peers))
	var victim *peerConn
	var most int64
	for _, o := range peers {
		if o == p {
			continue
		}
		o.qmu.Lock()
		q := int64(o.qbytes)
		closed := o.qclosed
		o.qmu.Unlock()
		if !closed && q > share && q > most {
			victim, most = o, q
		}
	}
	if victim == nil {
		return false
	}
	victim.qmu.Lock()
	if victim.qclosed {
		victim.qmu.Unlock()
		return true // closing already: its bytes are back
	}
	victim.qclosed = true
	s.sendBytes.Add(-int64(victim.qbytes))
	victim.qbytes = 0
	victim.kick()
	victim.qmu.Unlock()
	s.sendEvictions.Add(1)
	err := decodeguard.NewError(decodeguard.ReasonPolicy,
		fmt.Sprintf("send queue of %d bytes over its fair share %d of SendTotalBytes %d while the total was spent", most, share, lim))
	go victim.close(err)
	return true
}

// growRing doubles the ring (up to the HWM), keeping queued messages in
// order starting at index 0. Call with qmu held.
func (p *peerConn) growRing() {
	size := max(initialRing, 2*len(p.ring))
	size = min(size, p.hwm)
	nr := make([]outMsg, size)
	for i := 0; i < p.n; i++ {
		nr[i] = p.ring[(p.head+i)%len(p.ring)]
	}
	// Carry over the free slots' buffers too.
	for i := p.n; i < len(p.ring); i++ {
		nr[i] = p.ring[(p.head+i)%len(p.ring)]
	}
	p.ring = nr
	p.head = 0
}

// queueCtrl queues a command (cmd != "") or a control message (cmd == "",
// data is then the single frame), written before queued data. It is not
// bounded by the HWM; PONGs are bounded by maxCtrl.
func (p *peerConn) queueCtrl(cmd string, data []byte) bool {
	p.qmu.Lock()
	defer p.qmu.Unlock()
	if p.qclosed || ((cmd == zmtpwire.CmdPong || cmd == zmtpwire.CmdPing) && len(p.ctrl) >= maxCtrl) {
		return false
	}
	var m outMsg
	m.buf = append([]byte(nil), data...)
	if cmd == "" {
		m.ends = []int{len(m.buf)}
	}
	m.cmd = cmd
	p.ctrl = append(p.ctrl, m)
	p.kick()
	return true
}

// kick wakes the writer if it sleeps. Call with qmu held.
func (p *peerConn) kick() {
	if p.waiting {
		p.waiting = false
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop drains the queue: control messages first, then data, flushing
// whenever the queue is momentarily empty, so a burst of sends leaves in few
// write syscalls.
func (p *peerConn) writeLoop() {
	defer p.s.wg.Done()
	var frames [][]byte
	wt := p.s.opts.WriteTimeout
	nc := p.conn.NetConn()
	for {
		p.qmu.Lock()
		for p.n == 0 && len(p.ctrl) == 0 && !p.qclosed {
			p.waiting = true
			p.qmu.Unlock()
			select {
			case <-p.wake:
			case <-p.done:
			}
			p.qmu.Lock()
		}
		if p.qclosed {
			p.qmu.Unlock()
			return
		}
		ctrl := p.ctrl
		p.ctrl = p.ctrlSpare[:0]
		ring, start, k := p.ring, p.head, p.n
		p.qmu.Unlock()

		if wt > 0 {
			nc.SetWriteDeadline(time.Now().Add(wt))
		}
		var err error
		for i := range ctrl {
			m := &ctrl[i]
			if m.cmd != "" {
				err = p.conn.WriteCommand(m.cmd, m.buf)
			} else {
				frames = m.frames(frames)
				err = p.conn.WriteMessage(frames...)
			}
			if err != nil {
				break
			}
		}
		for i := 0; i < k && err == nil; i++ {
			j := start + i
			if j >= len(ring) {
				j -= len(ring)
			}
			frames = ring[j].frames(frames)
			err = p.conn.WriteMessage(frames...)
		}
		clear(frames)

		p.qmu.Lock()
		clear(ctrl)
		p.ctrlSpare = ctrl[:0]
		// Release the k written slots, trimming oversized buffers. The ring
		// may have grown meanwhile: the same messages then start at p.head.
		freed := 0
		for i := 0; i < k; i++ {
			j := (p.head + i) % len(p.ring)
			freed += len(p.ring[j].buf) + len(p.ring[j].last)
			p.ring[j].last = nil // a shared frame is not kept past its write
			if cap(p.ring[j].buf) > slotRetain {
				p.ring[j].buf = nil
			}
		}
		p.head = (p.head + k) % max(len(p.ring), 1)
		p.n -= k
		if !p.qclosed { // close already returned every queued byte
			p.qbytes -= freed
			p.s.sendBytes.Add(-int64(freed))
		}
		empty := p.n == 0 && len(p.ctrl) == 0
		p.qmu.Unlock()
		if k > 0 || len(ctrl) > 0 {
			p.tx.Add(1)
		}
		if k > 0 {
			p.s.wakeSenders()
		}
		if err == nil && empty {
			err = p.conn.Flush()
		}
		if err != nil {
			p.close(writeErr(err))
			return
		}
	}
}

func writeErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return decodeguard.WrapError(decodeguard.ReasonPolicy, "peer accepted no bytes within WriteTimeout", err)
	}
	return err
}

// readLoop reads messages into recycled batches and hands each batch to the
// socket's inbox when the connection's read buffer runs dry (or the batch is
// full), so a stream of small messages costs one channel operation per
// batch, not per message.
func (p *peerConn) readLoop() {
	s := p.s
	defer s.wg.Done()
	var b *batch
	var err error
	// pending: sl already holds a message, read by TryReadMessage while
	// deciding whether to hand the batch on (one walk of its headers).
	var sl *slot
	pending := false
	// unc: messages read and not yet in p.rx, added once per batch, before
	// the reader can wait (network, Recv, budget), not once per message.
	var unc uint64
	for {
		if !pending {
			p.rx.Add(unc)
			unc = 0
			// Between batches the reader waits in p.first and takes a
			// batch only once a message has arrived: a batch is 128
			// slots, and an idle peer should cost as little as its
			// connection.
			sl = &p.first
			if b != nil {
				sl = &b.slots[b.n]
			}
			if b == nil && !p.waitRecvBudget() {
				err = ErrClosed
				break
			}
			if err = p.conn.ReadMessage(&sl.m); err != nil {
				break
			}
		}
		pending = false
		unc++
		if b == nil {
			b = s.getBatch(p)
			b.slots[0], p.first = p.first, b.slots[0]
			if p.first.footprint() > firstRetain {
				p.first.release()
			}
			sl = &b.slots[0]
		}
		var deliver bool
		deliver, err = p.process(sl)
		if err != nil {
			break
		}
		var over bool
		if deliver {
			b.n++
			size := sl.m.Size()
			b.bytes += size
			over = s.chargeRecv(b, int64(size))
		}
		if b.n > 0 && (over || b.n == len(b.slots) || b.bytes >= batchBytes || p.held.Load()) {
			p.rx.Add(unc)
			unc = 0
			if !p.deliver(b) {
				b = nil
				err = ErrClosed
				break
			}
			b = nil
			continue
		}
		// Read the next message now if it is already here; otherwise hand
		// the batch on: a message must never wait for a later one (or for
		// a non-delivered command) to arrive.
		next := &b.slots[b.n]
		var got bool
		if got, err = p.conn.TryReadMessage(&next.m); err != nil {
			break
		}
		if got {
			sl, pending = next, true
			continue
		}
		if b.n == 0 {
			// A command (PING) with nothing delivered: do not sit idle
			// holding an empty batch.
			b.slots[0], p.first = p.first, b.slots[0]
			s.putBatch(b)
			b = nil
			continue
		}
		p.rx.Add(unc)
		unc = 0
		if !p.deliver(b) {
			b = nil
			err = ErrClosed
			break
		}
		b = nil
	}
	p.rx.Add(unc)
	p.close(err)
	s.noteReleased(p.releasedBytes(b))
	// Messages read before the connection failed are still delivered.
	if b != nil && (b.n == 0 || !p.deliver(b)) {
		s.putBatch(b)
	}
	if s.kind == kXPub {
		// The departed subscriber's unsubscriptions come after its last
		// messages, which a drain goroutine may still be handing over.
		p.waitDrained()
		s.deliverDeparted(p)
	}
}

// process applies the socket type's rules to a message just read into sl.
// It reports whether the message goes to Recv; a non-nil error closes the
// connection.
func (p *peerConn) process(sl *slot) (bool, error) {
	s := p.s
	m := &sl.m
	if m.Command != "" {
		switch m.Command {
		case zmtpwire.CmdPing:
			if len(m.Frames) == 1 {
				var ctxData []byte
				d := m.Frames[0]
				if len(d) > 2 {
					ctxData = d[2:min(len(d), 18)]
				}
				if len(d) >= 2 {
					// RFC 37: the TTL is in deciseconds; 0 means none.
					p.peerTTL.Store(int64(uint16(d[0])<<8|uint16(d[1])) * int64(100*time.Millisecond))
				}
				p.queueCtrl(zmtpwire.CmdPong, ctxData)
			}
			return false, nil
		case zmtpwire.CmdPong:
			s.pongs.Add(1)
			return false, nil
		case zmtpwire.CmdError:
			return false, decodeguard.WrapError(decodeguard.ReasonTransport, "peer sent an ERROR command", io.EOF)
		case zmtpwire.CmdSubscribe, zmtpwire.CmdCancel:
			if s.kind != kXPub || len(m.Frames) != 1 {
				return false, nil
			}
			flag := byte(1)
			if m.Command == zmtpwire.CmdCancel {
				flag = 0
			}
			sl.scratch = append(append(sl.scratch[:0], flag), m.Frames[0]...)
			if !p.applySub(sl.scratch) {
				return false, nil
			}
			sl.out = append(sl.out[:0], sl.scratch)
			return true, nil
		}
		return false, nil
	}
	switch s.kind {
	case kRouter:
		sl.out = append(append(sl.out[:0], p.info.identity), m.Frames...)
		return true, nil
	case kReq:
		if len(m.Frames) < 2 || len(m.Frames[0]) != 0 {
			s.viol[decodeguard.ReasonEnvelope].Add(1)
			return false, nil
		}
		sl.out = m.Frames[1:]
		return true, nil
	case kXPub:
		if len(m.Frames) == 1 && len(m.Frames[0]) > 0 && m.Frames[0][0] <= 1 {
			if !p.applySub(m.Frames[0]) {
				return false, nil
			}
		}
	case kSub:
		if !s.subIdx.Load().match(m.Frames[0]) {
			s.dropFilt.Add(1)
			return false, nil
		}
	case kPush:
		// A PUSH receives nothing; whatever a peer sends is dropped.
		s.dropFilt.Add(1)
		return false, nil
	}
	sl.out = m.Frames
	return true, nil
}

// close shuts p down once: closes the connection, stops the writer,
// unregisters the peer and reports the disconnect.
func (p *peerConn) close(err error) {
	p.closeOnce.Do(func() {
		if err == nil {
			err = io.EOF
		}
		p.closeErr = err
		p.hb.stop()
		p.conn.NetConn().SetDeadline(time.Unix(1, 0))
		p.conn.Close()
		p.qmu.Lock()
		p.qclosed = true
		s := p.s
		// The queue's bytes no longer count against SendTotalBytes.
		s.sendBytes.Add(-int64(p.qbytes))
		p.qbytes = 0
		p.qmu.Unlock()
		close(p.done)
		s.removePeer(p)
		s.discons.Add(1)
		if errors.Is(err, ErrHeartbeatTimeout) {
			s.hbTimeouts.Add(1)
		}
		var reason decodeguard.Reason
		var v *zmtpguard.Violation
		if errors.As(err, &v) {
			reason = v.Reason // counted by the guard's hook
		} else {
			reason = s.countErr(err)
		}
		if errors.Is(err, net.ErrClosed) && s.closed.Load() {
			err = ErrClosed
		}
		s.emit(Event{Kind: EventDisconnected, Peer: p.info, Remote: p.info.addrText, Endpoint: p.info.endpoint, Err: err, Reason: reason})
		if p.gone != nil {
			p.gone()
		}
		s.wakeSenders()
	})
}

// subEntry is one SUB/XSUB subscription with its count.
type subEntry struct {
	topic string
	count int
}

// subIndex is an immutable snapshot of a SUB's topics for receive filtering.
type subIndex struct {
	all    bool
	topics []string
}

func (x *subIndex) match(f []byte) bool {
	if x.all {
		return true
	}
	for _, t := range x.topics {
		if strings.HasPrefix(string(f), t) {
			return true
		}
	}
	return false
}
