package socket

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// Liveness errors.
var (
	// ErrHeartbeatTimeout is matched (errors.Is) by the disconnect cause of
	// a peer that sent nothing, not even a PONG, for HeartbeatInterval +
	// HeartbeatTimeout (peers announcing ZMTP 3.1 or later only), or for the
	// TTL its own PINGs announced. The cause's text says how long the peer
	// was silent and which rule applied.
	ErrHeartbeatTimeout = errors.New("socket: peer silent past the heartbeat timeout")
	// errHandover is the disconnect cause of a ROUTER peer whose identity a
	// new connection took over (Options.RouterHandover).
	errHandover = errors.New("socket: ROUTER identity taken over by a new connection")
)

// handoverErr is the disconnect cause of the connection p's identity was
// taken from.
func handoverErr(p *Peer) error {
	return fmt.Errorf("%w: identity %s now held by %s", errHandover, ratelog.Render(p.identity), p.addrText)
}

// heartbeat is one peer's liveness state, run from a timer that fires every
// tick (a quarter of the shortest of interval and timeout, within 5 ms ..
// 500 ms), so a silent peer is noticed within interval + timeout + one tick.
type heartbeat struct {
	mu       sync.Mutex
	t        *time.Timer
	stopped  bool
	tick     time.Duration
	seenRx   uint64
	lastRx   time.Time
	seenTx   uint64
	lastTx   time.Time
	lastPing time.Time
	seq      uint64
}

// heartbeatTick returns the timer period for the given rules.
func heartbeatTick(ivl, tmo time.Duration) time.Duration {
	d := tmo
	if ivl > 0 && ivl < d {
		d = ivl
	}
	return min(max(d/4, 5*time.Millisecond), 500*time.Millisecond)
}

// heartbeats reports whether p's greeting announced ZMTP 3.1 or later, the
// versions that know PING (RFC 37). A 3.0 peer (go-zeromq/zmq4 v0.17) would
// take a PING for a data message and never answers one, so it is sent none
// and is not timed out by heartbeat.
func (p *peerConn) heartbeats() bool {
	return zmtpwire.Heartbeats(p.info.version[0], p.info.version[1])
}

// noteZMTP30 logs, once per socket, that a peer announcing ZMTP 3.0 joined
// while heartbeats are on: an operator then knows why that peer is never
// PINGed (Stats.ZMTP30Peers counts them all).
func (p *peerConn) noteZMTP30() {
	s := p.s
	if p.heartbeats() || s.opts.HeartbeatInterval <= 0 || !s.zmtp30Noted.CompareAndSwap(false, true) {
		return
	}
	s.log(decodeguard.ReasonNone, slog.LevelInfo,
		"zmqguard: socket peer speaks ZMTP 3.0: no PING and no heartbeat timeout for it, TCP keepalive watches it (logged once per socket; Stats.ZMTP30Peers counts them)",
		ratelog.KeyComponent, string(s.typ), ratelog.KeyPeer, p.info.addrText, "endpoint", p.info.endpoint)
}

// startHeartbeat arms p's liveness timer. It is always armed: even with our
// heartbeats off, or for a ZMTP 3.0 peer, a TTL the peer announces is
// enforced.
func (p *peerConn) startHeartbeat() {
	o := &p.s.opts
	h := &p.hb
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped { // closed before it started (the socket closing)
		return
	}
	h.tick = heartbeatTick(o.HeartbeatInterval, o.HeartbeatTimeout)
	h.lastRx = time.Now()
	h.lastTx = h.lastRx
	h.t = time.AfterFunc(h.tick, p.heartbeatTick)
}

// stop disarms the timer for good.
func (h *heartbeat) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.t != nil {
		h.t.Stop()
	}
	h.mu.Unlock()
}

// heartbeatTick runs on the timer: it notes traffic, sends a PING after an
// interval of silence, and disconnects a peer silent past the rules.
func (p *peerConn) heartbeatTick() {
	o := &p.s.opts
	h := &p.hb
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	// A reader stalled by MemoryBudget is paused by us too.
	paused := p.paused.Load() || (p.conn != nil && p.conn.Stalled())
	if rx := p.rx.Load(); rx != h.seenRx || paused {
		// While the reader waits for Recv we cannot see the peer's bytes:
		// it is not the peer that is slow, so it is not timed out.
		h.seenRx = rx
		h.lastRx = now
	}
	if tx := p.tx.Load(); tx != h.seenTx {
		h.seenTx = tx
		h.lastTx = now
	}
	silent := now.Sub(h.lastRx)
	var cause error
	var ping bool
	ivl, tmo := o.HeartbeatInterval, o.HeartbeatTimeout
	if ivl > 0 && p.heartbeats() {
		// A TTL in our PINGs asks the peer to drop us once we have sent it
		// nothing for that long (libzmq arms it on each PING and clears it
		// on any message), so with a TTL we also PING after an interval in
		// which we sent nothing, even while the peer itself is talking.
		quiet := o.HeartbeatTTL > 0 && now.Sub(h.lastTx) >= ivl
		if silent >= ivl+tmo {
			cause = fmt.Errorf("%w: nothing received for %v (heartbeat interval %v + timeout %v)", ErrHeartbeatTimeout, silent.Round(time.Millisecond), ivl, tmo)
		} else if (silent >= ivl || paused || quiet) && now.Sub(h.lastPing) >= ivl {
			ping = true
			h.lastPing = now
			h.seq++
		}
	}
	if ttl := time.Duration(p.peerTTL.Load()); cause == nil && ttl > 0 && silent >= ttl {
		cause = fmt.Errorf("%w: nothing received for %v, past the TTL %v the peer's PING announced", ErrHeartbeatTimeout, silent.Round(time.Millisecond), ttl)
	}
	seq := h.seq
	if cause == nil {
		next := h.tick
		if ttl := time.Duration(p.peerTTL.Load()); ttl > 0 {
			next = min(next, max(ttl/4, 5*time.Millisecond))
		}
		h.t.Reset(next)
	}
	h.mu.Unlock()
	if cause != nil {
		p.close(cause)
		return
	}
	if ping {
		var data [10]byte
		ttl := (o.HeartbeatTTL + 100*time.Millisecond - 1) / (100 * time.Millisecond)
		data[0], data[1] = byte(ttl>>8), byte(ttl)
		// Context: a sequence number the PONG echoes.
		for i := range 8 {
			data[2+i] = byte(seq >> (56 - 8*i))
		}
		if p.queueCtrl(zmtpwire.CmdPing, data[:]) {
			p.s.pings.Add(1)
		}
	}
}

// reserveSend takes size bytes of the socket's SendTotalBytes budget. A
// message always fits when nothing at all is queued.
func (s *Socket) reserveSend(size int) bool {
	lim := s.opts.SendTotalBytes
	for {
		cur := s.sendBytes.Load()
		if lim > 0 && cur > 0 && cur+int64(size) > lim {
			return false
		}
		if s.sendBytes.CompareAndSwap(cur, cur+int64(size)) {
			return true
		}
	}
}

// budgetStep is how far ahead the reader charges the MemoryBudget (see
// batch.reserved): small against any budget (1,000 peers assembling
// batches at once over-count 4 MiB at most), large against a stats message.
const budgetStep = 4 << 10

// chargeRecv counts size received bytes of b against RecvQueueBytes (exact,
// per message) and the MemoryBudget (ahead, in budgetStep steps), and reports
// whether RecvQueueBytes is now spent (the reader then hands its batch over
// and waits before reading more).
func (s *Socket) chargeRecv(b *batch, size int64) bool {
	b.charged += size
	n := s.recvBytes.Add(size)
	if s.budget != nil && b.reserved < b.charged {
		// A batch's first message is charged exactly (a ROUTER or REQ
		// batch usually holds one); later ones ahead.
		step := b.charged - b.reserved
		if b.n > 1 {
			step = max(step, budgetStep)
		}
		s.budget.Charge(step)
		b.reserved += step
	}
	return s.opts.RecvQueueBytes > 0 && n >= s.opts.RecvQueueBytes
}

// trimReserve gives the MemoryBudget back what the reader charged ahead for
// b and did not use: called when b is handed over, so a queued batch is
// charged exactly its bytes.
func (s *Socket) trimReserve(b *batch) {
	if extra := b.reserved - b.charged; extra > 0 && s.budget != nil {
		s.budget.Charge(-extra)
		b.reserved = b.charged
	}
}

// uncharge returns a batch's bytes to the receive budget.
func (s *Socket) uncharge(b *batch) {
	if b.reserved > 0 && s.budget != nil {
		s.budget.Charge(-b.reserved)
	}
	b.reserved = 0
	if b.charged == 0 {
		return
	}
	s.recvBytes.Add(-b.charged)
	if b.peer != nil {
		b.peer.recvHeld.Add(-b.charged)
	}
	b.charged = 0
	if s.recvWaiters.Load() > 0 {
		s.recvSpaceMu.Lock()
		close(s.recvSpace)
		s.recvSpace = make(chan struct{})
		s.recvSpaceMu.Unlock()
	}
}

// peerRecvShare is one connection's share of the socket's receive queue:
// a connection with this many bytes of messages read and not yet released
// by Recv reads no further message until Recv has released some. The queue
// is one FIFO for every connection, so without the share one connection
// sending large messages back to back filled it (RecvQueueBytes, 64 MiB:
// eight 7.5 MB messages) and every other connection's next message waited
// behind them all (issue 37: an honest engine's outputs waited up to 200 ms
// behind six heavy engines' first burst). A connection may always read one
// message, whatever its size (MaxMessageSize and the MemoryBudget bound
// that), so the share delays a connection's next message but refuses none.
// A stream of small messages keeps four batches (batchBytes) in flight
// under it, enough to keep Recv busy.
const peerRecvShare = 1 << 20

// waitRecvBudget waits, before a reader with no batch starts reading, while
// the peer is held (HoldRecv), holds its share of the receive queue
// (peerRecvShare) or the receive budget is spent. It reports false when the
// peer or socket closed meanwhile.
func (p *peerConn) waitRecvBudget() bool {
	for {
		if p.held.Load() {
			if !p.waitUnheld() {
				return false
			}
			continue
		}
		if !p.recvFull() {
			return true
		}
		if !p.waitRecvSpace() {
			return false
		}
	}
}

// waitUnheld waits once for HoldRecv to resume p (or a stale signal of an
// earlier resume: the caller checks again). It reports false when the peer
// or socket closed meanwhile.
func (p *peerConn) waitUnheld() bool {
	p.paused.Store(true)
	defer p.paused.Store(false)
	select {
	case <-p.unheld:
		return true
	case <-p.done:
	case <-p.s.ctx.Done():
	}
	return false
}

// waitRecvSpace waits once for Recv to release bytes (the caller checks
// again). It reports false when the peer or socket closed meanwhile.
func (p *peerConn) waitRecvSpace() bool {
	s := p.s
	s.recvWaiters.Add(1)
	defer s.recvWaiters.Add(-1)
	p.paused.Store(true)
	defer p.paused.Store(false)
	s.recvSpaceMu.Lock()
	ch := s.recvSpace
	s.recvSpaceMu.Unlock()
	if !p.recvFull() {
		return true
	}
	select {
	case <-ch:
		return true
	case <-p.done:
	case <-s.ctx.Done():
	}
	return false
}

// recvFull reports whether p must wait before reading: it holds its share
// of the receive queue, or the queue holds RecvQueueBytes.
func (p *peerConn) recvFull() bool {
	if p.recvHeld.Load() >= peerRecvShare {
		return true
	}
	lim := p.s.opts.RecvQueueBytes
	return lim > 0 && p.s.recvBytes.Load() >= lim
}

// deliver hands b to Recv. When the inbox is full it queues b for a short
// drain goroutine instead of waiting, so that the reader keeps reading
// (answering PINGs, applying subscriptions): later batches merge into the
// one queued batch, which the goroutine takes as soon as the previous one
// was handed over, so no message waits for a later one. Only once that
// queued batch is full does the reader wait. p's messages keep their order
// and p holds at most two batches. It returns false when the socket closed
// first.
func (p *peerConn) deliver(b *batch) bool {
	s := p.s
	s.trimReserve(b)
	// Counted once per batch, not per message (uncharge takes it back).
	p.recvHeld.Add(b.charged)
	for {
		p.dmu.Lock()
		if !p.draining {
			// Nothing of p's is waiting: b may go straight to the inbox.
			// Only this reader starts a drain, so draining stays false.
			p.dmu.Unlock()
			if s.tryHandOff(b) {
				return true
			}
			p.dmu.Lock()
			p.dq = b
			p.draining = true
			p.dmu.Unlock()
			s.wg.Add(1)
			go p.drain()
			return true
		}
		if p.dq == nil {
			p.dq = b
			p.dmu.Unlock()
			return true
		}
		if q := p.dq; q.n+b.n <= len(q.slots) && q.bytes < batchBytes {
			for i := 0; i < b.n; i++ {
				b.slots[i], q.slots[q.n+i] = q.slots[q.n+i], b.slots[i]
			}
			q.n += b.n
			q.hw = max(q.hw, q.n)
			q.bytes += b.bytes
			q.charged += b.charged
			q.reserved += b.reserved
			b.charged, b.reserved = 0, 0
			b.hw = max(b.hw, b.n)
			b.n = 0
			p.dmu.Unlock()
			s.putBatch(b)
			return true
		}
		// The queued batch is full: wait for the drain goroutine to take it
		// (or to finish).
		p.dmu.Unlock()
		p.paused.Store(true)
		select {
		case <-p.dtaken:
		case <-s.ctx.Done():
		}
		p.paused.Store(false)
		if s.ctx.Err() != nil {
			return false
		}
	}
}

// waitDrained waits until p's drain goroutine, if any, has handed over
// everything, or the socket closed.
func (p *peerConn) waitDrained() {
	for {
		p.dmu.Lock()
		d := p.draining
		p.dmu.Unlock()
		if !d {
			return
		}
		select {
		case <-p.dtaken:
		case <-p.s.ctx.Done():
			return
		}
	}
}

// drain hands p's queued batches to Recv, one at a time, until none is
// left.
func (p *peerConn) drain() {
	s := p.s
	defer s.wg.Done()
	for {
		p.dmu.Lock()
		b := p.dq
		p.dq = nil
		if b == nil {
			p.draining = false
		}
		p.dmu.Unlock()
		select {
		case p.dtaken <- struct{}{}:
		default:
		}
		if b == nil {
			return
		}
		if !s.handOff(b) {
			s.putBatch(b)
			p.dmu.Lock()
			rest := p.dq
			p.dq = nil
			p.draining = false
			p.dmu.Unlock()
			if rest != nil {
				s.putBatch(rest)
			}
			return
		}
	}
}

// jittered returns the reconnect wait for back-off d (see
// Options.ReconnectJitter).
func (s *Socket) jittered(d time.Duration) time.Duration {
	j := s.opts.ReconnectJitter
	if j > 0 {
		d = time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
	}
	return max(min(d, s.opts.ReconnectMax), 0)
}

// keepAliveListener sets the socket's TCP keepalive on accepted connections.
type keepAliveListener struct {
	net.Listener
	cfg net.KeepAliveConfig
}

func (l *keepAliveListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		setKeepAlive(c, l.cfg)
	}
	return c, err
}

// setKeepAlive applies cfg to a TCP connection (others are left alone).
func setKeepAlive(c net.Conn, cfg net.KeepAliveConfig) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	if !cfg.Enable {
		tc.SetKeepAlive(false)
		return
	}
	tc.SetKeepAliveConfig(cfg)
}

// dialer returns the net.Dialer of the socket's dialed connections.
func (s *Socket) dialer() *net.Dialer {
	cfg := s.opts.TCPKeepAlive
	if !cfg.Enable {
		return &net.Dialer{KeepAlive: -1}
	}
	return &net.Dialer{KeepAliveConfig: cfg}
}

// HoldRecv stops (hold true) or resumes (false) reading from the
// connection of peer, for a receiving socket whose consumer queues
// messages per connection: while held, the connection's reader reads no
// new message (TCP flow control slows that peer alone; like a reader
// waiting for Recv, it is not counted as a dead peer by the heartbeat),
// and the other connections go on. A message it had already read is still
// delivered. It does nothing for a peer that has disconnected or belongs
// to another socket. It is safe for concurrent use.
func (s *Socket) HoldRecv(peer *Peer, hold bool) {
	if peer == nil {
		return
	}
	s.mu.Lock()
	var p *peerConn
	for _, q := range s.peers {
		if q.info == peer {
			p = q
			break
		}
	}
	s.mu.Unlock()
	if p == nil {
		return
	}
	p.held.Store(hold)
	if !hold {
		select {
		case p.unheld <- struct{}{}:
		default:
		}
	}
}
