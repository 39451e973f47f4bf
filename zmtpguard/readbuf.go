package zmtpguard

import (
	"bufio"
	"sync"
	"time"
)

// readIdleAfter is the period of a grown read buffer's idle check: a
// connection that has waited, between messages, for its next byte across
// one whole period (so for one to two periods) gives the buffer back
// (replaced by an initial-size one). A peer that keeps sending, even with
// pauses shorter than this, keeps the large buffer and its batching; one
// that sent a burst and went quiet costs a few KiB again a second or two
// later.
const readIdleAfter = time.Second

// writeSmallFlushes is how many consecutive Flushes that each wrote less
// than a quarter of a grown write buffer make it shrink back to the
// initial size.
const writeSmallFlushes = 4

// readIdle is the state of a connection's idle wait (see parkIdle). mu
// orders the reader's goroutine and the idle timer's: the timer replaces
// the read buffer only while parked is set, and the reader takes mu before
// it touches the buffer again.
type readIdle struct {
	mu     sync.Mutex
	parked bool
	// parks counts the idle waits begun; seen is parks as the previous
	// tick found it while parked (0: not parked then).
	parks, seen uint64
	// ticking is set while the check timer t runs (once a second while
	// the buffer is grown and the connection open).
	ticking bool
	t       *time.Timer
	// shrunk is set by the timer when it gave the buffer back during the
	// current wait.
	shrunk bool
	// park is what the idle wait reads into: the grown buffer is not
	// passed to a read that may block for ever, so the timer can let it go.
	park []byte
	// shrinks counts the buffers given back (tests).
	shrinks int
}

// parkIdle runs at the start of ReadMessage. When the read buffer has grown
// past its initial size and is empty, the next read would block with the
// grown buffer pinned for as long as the peer stays silent (1,000 peers
// that each sent one burst would pin 1,000 × ReadBufferSize). Instead the
// wait for the next bytes reads into a small park buffer, and a timer that
// ticks every readIdleAfter while the buffer is grown replaces the buffer
// by an initial-size one when it finds the same wait going on at two ticks
// in a row. The bytes the park read got are handed to the buffered reader
// first (connReader.carry), its error after them, so the stream is
// unchanged. A busy peer whose bytes arrive within readIdleAfter keeps its
// buffer; what the wait costs it is one read of at most the initial size
// and two uncontended locks.
func (c *Conn) parkIdle() {
	cr := c.cr
	if cr == nil || c.br.Buffered() > 0 || len(cr.carry) > 0 || cr.err != nil {
		return
	}
	small := min(initialReadBuffer, c.cfg.ReadBufferSize)
	if c.br.Size() <= small && (c.cz == nil || cap(c.cz.rbuf) == 0) {
		return
	}
	id := &cr.idle
	if id.park == nil {
		id.park = make([]byte, small)
	}
	id.mu.Lock()
	id.parked, id.shrunk = true, false
	id.parks++
	if !id.ticking {
		id.ticking, id.seen = true, 0
		if id.t == nil {
			id.t = time.AfterFunc(readIdleAfter, c.idleTick)
		} else {
			id.t.Reset(readIdleAfter)
		}
	}
	id.mu.Unlock()

	n, err := c.nc.Read(id.park)

	id.mu.Lock()
	id.parked = false
	shrunk := id.shrunk
	id.mu.Unlock()
	if n > 0 {
		cr.carry = id.park[:n] // drained before the next park
	}
	cr.err = err
	if shrunk {
		// Small again: the next growth allocates a park buffer anew.
		id.park = nil
	}
}

// idleTick runs on the idle timer. When the reader is in the same idle
// wait as at the previous tick, it gives back the grown read buffer (and,
// under CURVE, the scratch buffer for large messages) and stops ticking;
// otherwise it ticks again, while the connection is open.
func (c *Conn) idleTick() {
	if freed := c.idleCheck(); freed > 0 && c.cfg.OnRelease != nil {
		c.cfg.OnRelease(freed)
	}
}

// idleCheck is idleTick's work under the lock; it returns the bytes given
// back.
func (c *Conn) idleCheck() (freed int) {
	cr := c.cr
	id := &cr.idle
	id.mu.Lock()
	defer id.mu.Unlock()
	if !id.ticking {
		return 0
	}
	if c.body.closed.Load() {
		id.ticking = false
		return 0
	}
	if !id.parked || id.seen != id.parks {
		id.seen = 0
		if id.parked {
			id.seen = id.parks
		}
		id.t.Reset(readIdleAfter)
		return 0
	}
	id.ticking = false
	if c.cz != nil {
		freed += cap(c.cz.rbuf)
		c.cz.rbuf = nil
	}
	small := min(initialReadBuffer, c.cfg.ReadBufferSize)
	if c.br.Size() > small {
		freed += c.br.Size() - small
		// The buffer is empty (parkIdle parks only then) and so is the
		// carry: nothing to carry over.
		c.br = bufio.NewReaderSize(cr, small)
		cr.full = false
		cr.min = growAt(small, c.cfg.ReadBufferSize)
	}
	id.shrunk = true
	id.shrinks++
	return freed
}

// readBufferSize returns the size of c's read buffer now; safe while
// another goroutine reads c (tests).
func (c *Conn) readBufferSize() int {
	if c.cr == nil {
		return c.br.Size()
	}
	c.cr.idle.mu.Lock()
	defer c.cr.idle.mu.Unlock()
	return c.br.Size()
}

// readIdleCounts returns how many idle waits c began and how many times it
// gave a grown read buffer back (tests).
func (c *Conn) readIdleCounts() (parks, shrinks int) {
	if c.cr == nil {
		return 0, 0
	}
	c.cr.idle.mu.Lock()
	defer c.cr.idle.mu.Unlock()
	return int(c.cr.idle.parks), c.cr.idle.shrinks
}

// shrinkWriter, called by growWriter after a Flush that did not grow the
// buffer, gives a grown write buffer (and CURVE's write scratch buffers)
// back once writeSmallFlushes consecutive Flushes each wrote less than a
// quarter of it: a connection that was sent a burst and is now sent only
// heartbeats or small messages costs the initial 4 KiB again. n is the
// bytes written since the previous Flush.
func (c *Conn) shrinkWriter(n int) {
	small := min(initialWriteBuffer, c.cfg.WriteBufferSize)
	size := c.bw.Size()
	big := size > small
	if cs := c.cz; cs != nil && (cap(cs.wplain) > small || cap(cs.wbox) > small) {
		big = true
	}
	if !big || n >= max(size, small)/4 || c.bw.Buffered() != 0 {
		c.smallFlushes = 0
		return
	}
	if c.smallFlushes++; c.smallFlushes < writeSmallFlushes {
		return
	}
	c.smallFlushes = 0
	freed := 0
	if size > small {
		freed += size - small
		c.bw = bufio.NewWriterSize(c.nc, small)
	}
	if cs := c.cz; cs != nil {
		if cap(cs.wplain) > small {
			freed += cap(cs.wplain)
			cs.wplain = nil
		}
		if cap(cs.wbox) > small {
			freed += cap(cs.wbox)
			cs.wbox = nil
		}
	}
	if freed > 0 && c.cfg.OnRelease != nil {
		c.cfg.OnRelease(freed)
	}
}

// idleReadBytes is ReadBufferBytes without the park buffer, safe while
// another goroutine reads c (tests).
func (c *Conn) idleReadBytes() int {
	c.cr.idle.mu.Lock()
	defer c.cr.idle.mu.Unlock()
	n := c.br.Size()
	if c.cz != nil {
		n += cap(c.cz.rbuf)
	}
	return n
}
