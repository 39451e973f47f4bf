package zmtpguard

import (
	"bufio"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// defaultBodyTimeout is the default of [Config.BodyTimeout]: a message whose
// first frame header has arrived must be complete within it. 10 s is a
// 1 MiB message (defaultMaxMessageSize) at 100 KiB/s.
const defaultBodyTimeout = 10 * time.Second

// bodyClock is a connection's message-body deadline: armed when a read
// inside a message (after its first header) may wait on the network,
// disarmed when the message is complete. Its timer never touches a
// deadline the caller set on the net.Conn unless it fires, and then the
// connection is failed anyway.
type bodyClock struct {
	mu      sync.Mutex
	t       *time.Timer
	armed   bool
	expired bool
	// evicted is set by a Budget that chose this connection as the largest
	// holder to close.
	evicted atomic.Bool
	closed  atomic.Bool
	// stalled is set while the reader waits for the budget.
	stalled atomic.Bool
	// held is the bytes this connection holds charged to cfg.Budget. Only
	// the reading goroutine changes it (inside ReadMessage), under the
	// Budget's mutex; others read it under that mutex.
	held int64
	// nc is the connection the deadline and the budget close: set by the
	// reading goroutine before the clock is first armed or charged.
	nc net.Conn
}

// bodyWait is called before a read inside a message that may block (the
// read buffer holds fewer than need bytes): it arms the body deadline if it
// is not armed.
func (c *Conn) bodyWait(need int) {
	if c.cfg.BodyTimeout <= 0 || c.br.Buffered() >= need {
		return
	}
	c.clock().arm(c.cfg.BodyTimeout)
}

// clock returns c's body clock, its connection set.
func (c *Conn) clock() *bodyClock {
	if c.body.nc == nil {
		c.body.nc = c.nc
	}
	return &c.body
}

// arm starts the deadline d from now unless it is running or has passed.
func (bc *bodyClock) arm(d time.Duration) {
	bc.mu.Lock()
	if !bc.armed && !bc.expired {
		bc.armed = true
		if bc.t == nil {
			bc.t = time.AfterFunc(d, bc.fire)
		} else {
			bc.t.Reset(d)
		}
	}
	bc.mu.Unlock()
}

// disarm stops the deadline (the message is complete) and reports whether
// it had passed.
func (bc *bodyClock) disarm() (expired bool) {
	bc.mu.Lock()
	if bc.armed {
		bc.armed = false
		bc.t.Stop()
	}
	expired = bc.expired
	bc.mu.Unlock()
	return expired
}

// bodyReserve is called before reading step more body bytes into a
// message that already holds have bytes: when the read buffer does not hold
// them (the read may wait on the network), the message's bytes are charged
// to the budget (which may stall) and the body deadline is armed.
func (c *Conn) bodyReserve(have, step int) error {
	if c.br.Buffered() >= step {
		return nil
	}
	if b := c.cfg.Budget; b != nil {
		if more := int64(have+step) - c.body.held; more > 0 {
			if err := b.acquire(c.clock(), more); err != nil {
				return err
			}
		}
	}
	c.bodyWait(step)
	return nil
}

// fire runs on the timer: the message did not complete in time. The past
// read deadline makes the blocked read return at once.
func (bc *bodyClock) fire() {
	bc.mu.Lock()
	if bc.armed {
		bc.armed = false
		bc.expired = true
		bc.nc.SetReadDeadline(time.Unix(1, 0))
	}
	bc.mu.Unlock()
}

// pause disarms the deadline without judging the peer: the wait that
// follows (for the budget) is ours, not the peer's. The next arm starts a
// fresh deadline.
func (bc *bodyClock) pause() {
	bc.mu.Lock()
	if bc.armed && bc.t.Stop() {
		bc.armed = false
	}
	bc.mu.Unlock()
}

// endMessage runs when ReadMessage returns: it disarms the body deadline,
// returns the message's bytes to the budget, and turns the error of a read
// cut short by the deadline or by a budget eviction into its violation.
func (c *Conn) endMessage(m *Message, err error) error {
	bc := &c.body
	if c.cfg.Budget != nil && bc.held != 0 {
		c.cfg.Budget.release(bc)
	}
	var expired bool
	if c.cfg.BodyTimeout > 0 {
		expired = bc.disarm()
	}
	if _, ok := err.(*Violation); ok {
		return err // reported already
	}
	if bc.evicted.Load() {
		return c.fail(violation(decodeguard.ReasonPolicy, "closed to free the socket's byte budget: this connection held the most bytes of unfinished messages past BudgetWait", int64(len(m.buf)), nil))
	}
	if expired {
		return c.fail(violation(decodeguard.ReasonPolicy, "message body not complete within BodyTimeout ("+c.cfg.BodyTimeout.String()+") of its first frame header", int64(len(m.buf)), nil))
	}
	return err
}

// Budget is a byte budget shared by the connections of one socket (set
// [Config.Budget]): it bounds the bytes of messages being received (bodies
// read after their header, before the last byte arrived) plus any bytes the
// owner charges with [Budget.Charge] (for example messages received but not
// yet delivered). A connection asks the budget before it reads more of a
// body that is not yet buffered:
//
//   - while the budget has room, or the connection holds no more than its
//     fair share (Limit divided by the connections holding bytes), the read
//     goes on; fair-share reads may pass Limit, never 2 × Limit, so Used
//     stays under 2 × Limit (plus what Charge adds);
//   - otherwise the connection stops reading (TCP flow control slows the
//     peer), counted in Stats' stalls, until bytes are released;
//   - a connection that waited Wait without room closes the connection
//     holding the most bytes, if that one holds at least its fair share
//     (it may be the waiting connection itself), as a ReasonPolicy
//     violation counted in Stats' evictions, unless Charge holds
//     half of Limit or more: a budget spent by messages the application
//     has not taken yet only stalls (the application, not a peer, is
//     behind). A connection holding less than its fair share is never
//     closed by the budget.
//
// Set Limit (and Wait) before the first use and never change them; a
// Budget must not be copied after first use. All methods are safe for
// concurrent use.
type Budget struct {
	// Limit is the budget in bytes. Zero (or negative) means 1 byte: every
	// read past the fair share stalls.
	Limit int64
	// Wait is how long a stalled connection waits before the largest
	// holder is closed. Zero (or negative) means 2 s.
	Wait time.Duration

	used atomic.Int64
	// outside is the part of used charged with Charge (not held by a
	// connection).
	outside atomic.Int64

	mu      sync.Mutex
	holders map[*bodyClock]struct{}
	waiters int
	freed   chan struct{} // closed and replaced when bytes are released

	stalls    atomic.Uint64
	evictions atomic.Uint64
}

// defaultBudgetWait is the default wait of a stalled connection before the
// largest holder is closed (Budget.Wait).
const defaultBudgetWait = 2 * time.Second

func (b *Budget) limit() int64 { return max(b.Limit, 1) }

func (b *Budget) wait() time.Duration {
	if b.Wait <= 0 {
		return defaultBudgetWait
	}
	return b.Wait
}

// budgetStats is a snapshot of a Budget (tests read all of it).
type budgetStats struct {
	Limit     int64
	Used      int64
	Holders   int
	Stalls    uint64
	Evictions uint64
}

func (b *Budget) stats() budgetStats {
	b.mu.Lock()
	h := len(b.holders)
	b.mu.Unlock()
	return budgetStats{Limit: b.limit(), Used: b.used.Load(), Holders: h, Stalls: b.stalls.Load(), Evictions: b.evictions.Load()}
}

// Stats returns the bytes charged now (used), the reads paused so far
// because the budget was spent and the connection held more than its fair
// share (stalls), and the connections closed as the largest holder
// (evictions).
func (b *Budget) Stats() (used int64, stalls, evictions uint64) {
	return b.used.Load(), b.stalls.Load(), b.evictions.Load()
}

// Charge adds n bytes held outside any connection (negative n releases
// them). Charges never wait or fail: a charge past the limit makes
// connections over their fair share stall.
func (b *Budget) Charge(n int64) {
	b.outside.Add(n)
	b.used.Add(n)
	if n < 0 {
		b.wakeIfWaiting()
	}
}

func (b *Budget) wakeIfWaiting() {
	b.mu.Lock()
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// acquire charges n more bytes to the connection of bc, waiting while the
// budget is spent and it holds more than its fair share (see Budget). It
// returns an error when the connection is closed or evicted meanwhile.
func (b *Budget) acquire(bc *bodyClock, n int64) error {
	b.mu.Lock()
	if b.holders == nil {
		b.holders = make(map[*bodyClock]struct{})
		b.freed = make(chan struct{})
	}
	b.holders[bc] = struct{}{}
	var deadline time.Time
	for {
		if bc.closed.Load() || bc.evicted.Load() {
			if bc.held == 0 {
				delete(b.holders, bc) // endMessage releases only a holder
			}
			b.mu.Unlock()
			return errClosed
		}
		fair := b.limit() / int64(len(b.holders))
		used := b.used.Load()
		if used+n <= b.limit() || (bc.held+n <= fair && used+n <= 2*b.limit()) {
			bc.held += n
			b.used.Add(n)
			b.mu.Unlock()
			return nil
		}
		now := time.Now()
		if deadline.IsZero() {
			b.stalls.Add(1)
			deadline = now.Add(b.wait())
			bc.pause()
		} else if !now.Before(deadline) {
			var big *bodyClock
			for h := range b.holders {
				if h.evicted.Load() {
					continue // closed already; its reader is releasing
				}
				if big == nil || h.held > big.held {
					big = h
				}
			}
			// A budget spent mostly by Charge (messages the application
			// has not taken yet) only stalls: the application is behind,
			// not a peer.
			if big != nil && big.held >= fair && b.outside.Load() < b.limit()/2 {
				b.evictions.Add(1)
				big.evicted.Store(true)
				b.mu.Unlock()
				// Its reader, wherever it waits, fails with the eviction
				// violation (endMessage).
				big.nc.Close()
				if big != bc {
					b.wakeIfWaiting()
				}
				b.mu.Lock()
				deadline = time.Time{}
				continue
			}
			deadline = now.Add(b.wait())
		}
		ch := b.freed
		b.waiters++
		b.mu.Unlock()
		bc.stalled.Store(true)
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		bc.stalled.Store(false)
		b.mu.Lock()
		b.waiters--
	}
}

// release returns every byte the connection of bc holds.
func (b *Budget) release(bc *bodyClock) {
	b.mu.Lock()
	if n := bc.held; n != 0 {
		bc.held = 0
		b.used.Add(-n)
		if b.waiters > 0 {
			close(b.freed)
			b.freed = make(chan struct{})
		}
	}
	delete(b.holders, bc)
	b.mu.Unlock()
}

// Stalled reports whether c's reader is waiting for its Budget (it has
// stopped reading the connection because the budget is spent). A caller
// with a liveness rule (a heartbeat timeout) should not hold that silence
// against the peer: it is ours. It is safe to call from any goroutine.
func (c *Conn) Stalled() bool { return c.body.stalled.Load() }

// ReadBufferBytes returns the bytes of read buffers c holds now: its
// buffered reader and, under CURVE, its scratch buffer for large messages;
// a receiver that accounts for its memory adds it to what its Messages
// hold. Call it from the goroutine that reads c (or after reading stopped).
func (c *Conn) ReadBufferBytes() int {
	n := c.br.Size()
	if c.cr != nil {
		n += cap(c.cr.idle.park)
	}
	if c.cz != nil {
		n += cap(c.cz.rbuf)
	}
	return n
}

// initialWriteBuffer is the write buffer a connection starts with (or
// Config.WriteBufferSize if smaller): enough for PINGs, PONGs and small
// messages, so that a peer that is only ever sent heartbeats costs 4 KiB,
// not WriteBufferSize (1,000 attackers that never read held 64 MiB of
// write buffers that way).
const initialWriteBuffer = 4 << 10

// growWriter, called after a Flush, replaces the (now empty) write buffer
// by one four times larger, up to WriteBufferSize, when more than a
// buffer's worth was written since the previous Flush: a busy connection
// soon gets the full buffer and its batching. Otherwise shrinkWriter may
// give a grown buffer back.
func (c *Conn) growWriter() {
	n := c.wrote
	c.wrote = 0
	if size := c.bw.Size(); n >= size && size < c.cfg.WriteBufferSize && c.bw.Buffered() == 0 {
		c.bw = bufio.NewWriterSize(c.nc, min(4*size, c.cfg.WriteBufferSize))
		c.smallFlushes = 0
		return
	}
	c.shrinkWriter(n)
}
