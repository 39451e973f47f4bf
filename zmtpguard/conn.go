package zmtpguard

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
)

// readChunk bounds how much a body read grows a buffer ahead of the bytes
// actually received, so a header claiming MaxMessageSize costs memory only as
// the peer really sends it.
const readChunk = 64 << 10

// initialReadBuffer is the read buffer a connection starts with (or
// Config.ReadBufferSize if smaller): enough for any handshake and for a
// quiet peer's messages, so that an idle connection costs a few KiB. The
// buffer grows fourfold, up to Config.ReadBufferSize, each time a read fills
// it: a busy peer soon gets the full buffer and its one-syscall-per-many-
// messages batching.
const initialReadBuffer = 4 << 10

// connReader is what a Conn's bufio.Reader reads from: the network
// connection, preceded by the bytes a smaller buffer still held when it was
// replaced by a larger one. It notes when a read filled at least half of the
// buffer, the sign of a peer sending faster than the buffer drains.
type connReader struct {
	nc    net.Conn
	carry []byte
	// min is the read size, at least, that makes full true when it fills the
	// space bufio offered; 0 once the buffer is as large as it may grow.
	min  int
	full bool
	// err is the error the idle wait (parkIdle, readbuf.go) met, returned
	// after carry.
	err error
	// idle is the idle-wait state that gives a grown buffer back (readbuf.go).
	idle readIdle
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(r.carry) > 0 {
		n := copy(p, r.carry)
		if r.carry = r.carry[n:]; len(r.carry) == 0 {
			r.carry = nil
		}
		return n, nil
	}
	if err := r.err; err != nil {
		r.err = nil
		return 0, err
	}
	n, err := r.nc.Read(p)
	if n == len(p) && r.min > 0 && n >= r.min {
		r.full = true
	}
	return n, err
}

// newConnReader returns the buffered reader a connection starts with.
func newConnReader(nc net.Conn, max int) (*bufio.Reader, *connReader) {
	size := min(initialReadBuffer, max)
	cr := &connReader{nc: nc, min: growAt(size, max)}
	return bufio.NewReaderSize(cr, size), cr
}

// growAt is connReader.min for a buffer of size bytes that may grow to max:
// half of it, or 0 once it may not grow.
func growAt(size, max int) int {
	if size < max {
		return size / 2
	}
	return 0
}

// growReader replaces c's read buffer by one four times larger (at most
// ReadBufferSize), carrying over the bytes it holds. Called between messages
// once a read has filled the buffer.
func (c *Conn) growReader() {
	c.cr.full = false
	size := min(4*c.br.Size(), c.cfg.ReadBufferSize)
	if size <= c.br.Size() {
		c.cr.min = 0
		return
	}
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n) // buffered: never blocks
		c.cr.carry = append(make([]byte, 0, n), b...)
	}
	c.cr.idle.mu.Lock() // the idle timer and readBufferSize read c.br under it
	c.br = bufio.NewReaderSize(c.cr, size)
	c.cr.idle.mu.Unlock()
	c.cr.min = growAt(size, c.cfg.ReadBufferSize)
}

// errClosed is returned by operations on a closed Conn; it wraps
// net.ErrClosed, which callers test for.
var errClosed = fmt.Errorf("zmtpguard: connection closed: %w", net.ErrClosed)

// Message is one ZMTP message read by [Conn.ReadMessage]. Its frames alias a
// buffer owned by the Message: they are valid until the next ReadMessage into
// the same Message. Copy what must outlive that.
type Message struct {
	// Frames are the message's frame bodies. For a command, Frames holds a
	// single frame: the command's data (its name removed).
	Frames [][]byte
	// Command is the command's name ("PING", "PONG", "SUBSCRIBE", "CANCEL" or
	// "ERROR"; answer a PING with a PONG, see [Conn.WriteCommand]) when the
	// message is a ZMTP command, and "" for a data message.
	Command string

	buf  []byte
	ends []int
}

// Reset empties m, keeping its buffers for reuse (large ones are released).
func (m *Message) Reset() {
	if cap(m.buf) > 4*readChunk {
		// Dropping the big buffer: the old frames must not pin it.
		m.buf = nil
		clear(m.Frames)
	}
	// Otherwise the old frames alias m.buf, which m keeps anyway: clearing
	// them would cost a pointer write barrier per frame for nothing.
	m.buf = m.buf[:0]
	m.ends = m.ends[:0]
	m.Frames = m.Frames[:0]
	m.Command = ""
}

// Size returns the total body bytes of m's frames.
func (m *Message) Size() int { return len(m.buf) }

// Footprint returns the bytes of memory m keeps for reuse: the capacity of
// its body buffer and of its frame and offset tables. A receiver that
// recycles Messages uses it to bound what idle Messages pin; assigning
// Message{} releases it all.
func (m *Message) Footprint() int {
	return cap(m.buf) + cap(m.ends)*wordSize + cap(m.Frames)*3*wordSize
}

// wordSize is the size of an int (and of a pointer) in bytes.
const wordSize = 4 << (^uint(0) >> 63)

// Conn is a ZMTP connection whose handshake passed the guard. Reads return
// whole, validated messages; writes are buffered until Flush.
//
// One goroutine may read while another writes; concurrent reads, or
// concurrent writes, must be serialised by the caller. Close may be called
// from any goroutine at any time.
type Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	cr     *connReader // under br; grows it
	bw     *bufio.Writer
	cfg    Config
	local  SocketType
	peer   Metadata
	remote string
	zc     *zmq4.Conn
	cz     *curveState // CURVE session; nil under NULL

	closeOnce sync.Once
	closeErr  error
	hdr       [9]byte
	// onClose, when set (by a Listener), runs once after the first Close.
	onClose func()
	// work, when set (by a Listener), is marked when a message passed:
	// one read (heartbeats excepted), or a Flush that wrote data
	// (wroteData). See Config.MaxConns.
	work      *atomic.Uint32
	wroteData bool
	// body is the message-body deadline and budget state (body.go).
	body bodyClock
	// wrote counts the bytes written since the last Flush (growWriter).
	wrote int
	// smallFlushes counts consecutive Flushes that wrote little (shrinkWriter).
	smallFlushes int
	// beats are heartbeats read inside a multipart message, returned by
	// the next ReadMessage (beats.go); cmdBuf holds such a command's body
	// when it does not fit the read buffer.
	beats  heldBeats
	cmdBuf []byte
}

// Peer returns the peer's validated READY metadata.
func (c *Conn) Peer() Metadata { return c.peer }

// NetConn returns the connection under c, as crypto/tls's Conn.NetConn
// does: for deadlines (SetDeadline), addresses and socket options. Reading
// from or writing to it directly corrupts the ZMTP stream (tests that play
// a hostile peer do exactly that).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the connection. It is safe to call more than once and from
// any goroutine; later calls return the first call's result.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.nc.Close()
		c.body.closed.Store(true)
		if c.cfg.Budget != nil {
			c.cfg.Budget.wakeIfWaiting() // a reader stalled on the budget
		}
		if c.onClose != nil {
			c.onClose()
		}
	})
	return c.closeErr
}

func (c *Conn) fail(v *Violation) error {
	v.Remote = c.remote
	if c.cfg.OnViolation != nil {
		c.cfg.OnViolation(*v)
	}
	c.Close()
	return v
}
