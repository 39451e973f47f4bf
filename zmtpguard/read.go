package zmtpguard

import (
	"errors"
	"io"
	"slices"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// The read path of a Conn: whole, validated messages, frame header before
// body, from the buffered reader.

// ReadMessage reads the next whole message into m, reusing m's buffers.
// Each frame header is checked before its body is read: a message over
// MaxMessageSize bytes or MaxFrames frames, reserved flag bits, a command
// other than PING or PONG inside a multipart message, or an unknown command
// is a *Violation, after which the connection is closed (the stream cannot
// be trusted to resync). A PING or PONG between the frames of a multipart
// message, as libzmq sends them, is returned by the next ReadMessage, after
// the message (several are coalesced to the last PING and the last PONG).
// Other errors are the connection's I/O errors (io.EOF when the peer left).
func (c *Conn) ReadMessage(m *Message) error {
	err := c.readNext(m)
	if err == nil && c.work != nil && m.Command != cmdPing && m.Command != cmdPong {
		markWork(c.work)
	}
	return err
}

// readNext is ReadMessage without the work mark.
func (c *Conn) readNext(m *Message) error {
	if c.cr != nil && c.cr.full {
		c.growReader()
	}
	m.Reset()
	if c.takeBeat(m) {
		return nil // a heartbeat read inside the last message (beats.go)
	}
	c.parkIdle()
	if c.cz != nil {
		return c.endMessage(m, c.readCurve(m))
	}
	if c.readBuffered(m) {
		return nil
	}
	if c.br.Buffered() < 2 {
		// Nothing buffered (the last message ended where the last read
		// did): wait for the next read here, where the general path would
		// wait for its header anyway, so that a message that arrives whole
		// takes the fast path too.
		if _, err := c.br.Peek(1); err == nil && c.readBuffered(m) {
			return nil
		}
	}
	return c.endMessage(m, c.readMessage(m))
}

// readMessage is ReadMessage's general path: frame by frame, each header
// checked before its body is read.
func (c *Conn) readMessage(m *Message) error {
	var total int64
	for nframes := 0; ; nframes++ {
		var b []byte
		var err error
		if n := min(c.br.Buffered(), 9); n >= 2 {
			// Fast path: the header is (most likely) buffered already;
			// Peek of buffered bytes never blocks.
			b, _ = c.br.Peek(n)
		} else {
			if nframes > 0 {
				c.bodyWait(2)
			}
			b, err = c.br.Peek(1)
			if err != nil {
				if nframes > 0 && err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
			b, err = c.br.Peek(headerLen(b[0]))
		}
		// A command between the frames of a multipart message (a heartbeat,
		// see beats.go) is bounded by the command limit, not by what is
		// left of the message's.
		inner := nframes > 0 && b[0]&flagCommand != 0
		limit := c.cfg.MaxMessageSize - total
		if inner {
			limit = commandLimit(&c.cfg)
		}
		hdr, ok, verr := parseFrameHeader(b, limit)
		if verr != nil {
			return c.fail(c.oversize(verr, nframes, total, inner))
		}
		if !ok {
			if len(b) >= 2 && err == nil {
				// Fast path found a long header not wholly buffered yet.
				b, err = c.br.Peek(headerLen(b[0]))
				hdr, ok, verr = parseFrameHeader(b, limit)
				if verr != nil {
					return c.fail(c.oversize(verr, nframes, total, inner))
				}
			}
			if !ok {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		if inner {
			if err := c.readInner(hdr, nframes); err != nil {
				return err
			}
			nframes-- // not one of the message's frames
			continue
		}
		if nframes >= c.cfg.MaxFrames {
			return c.fail(violation(decodeguard.ReasonOversize,
				"message has more than MaxFrames="+itoa(c.cfg.MaxFrames)+" frames", int64(nframes+1), nil))
		}
		c.br.Discard(hdr.Len)
		if err := c.readBody(m, hdr.Size); err != nil {
			return err
		}
		total += hdr.Size
		m.ends = append(m.ends, len(m.buf))
		if hdr.Command() {
			return c.command(m)
		}
		if !hdr.More() {
			break
		}
	}
	start := 0
	for _, end := range m.ends {
		m.Frames = append(m.Frames, m.buf[start:end:end])
		start = end
	}
	return nil
}

// readBuffered is ReadMessage's fast path: when the read buffer already
// holds a whole data message within the limits, it copies the frames out
// with one Peek and one Discard and reports true. Anything else (a message
// not wholly received, a command, reserved flag bits, a limit exceeded)
// leaves the buffer and m untouched and reports false, for the general path
// to read, or refuse with the right violation.
func (c *Conn) readBuffered(m *Message) bool {
	b, _ := c.br.Peek(c.br.Buffered()) // buffered: never blocks
	off := 0
	var total uint64
	for nframes := 0; ; nframes++ {
		if len(b)-off < 2 || nframes >= c.cfg.MaxFrames {
			break
		}
		flags, size, hl, whole := zmtpwire.PeekFrameHeader(b[off:])
		// Data frames only (a command or reserved bits: the general path
		// decides); size is checked against the limit and the bytes
		// present before anything is copied.
		if !whole || !isDataFrame(flags) || size > uint64(c.cfg.MaxMessageSize)-total || size > uint64(len(b)-off-hl) {
			break
		}
		if nframes == 0 && flags&flagMore != 0 {
			// A multipart message: size m's buffers once for all of it,
			// instead of growing them frame by frame (a cold Message would
			// reallocate each a few times for a message of many frames).
			frames, bytes, ok := c.bufferedExtent(b)
			if !ok {
				break
			}
			m.buf = slices.Grow(m.buf, bytes)
			m.ends = slices.Grow(m.ends, frames)
			m.Frames = slices.Grow(m.Frames, frames)
		}
		off += hl
		m.buf = append(m.buf, b[off:off+int(size)]...)
		m.ends = append(m.ends, len(m.buf))
		off += int(size)
		total += size
		if flags&flagMore == 0 {
			c.br.Discard(off)
			start := 0
			for _, end := range m.ends {
				m.Frames = append(m.Frames, m.buf[start:end:end])
				start = end
			}
			return true
		}
	}
	m.buf = m.buf[:0]
	m.ends = m.ends[:0]
	return false
}

// bufferedExtent walks the frame headers of the data message at the front
// of b (buffered bytes) and reports its frame count and body bytes when the
// whole message is there within MaxFrames and MaxMessageSize, with only
// data frames; ok is false otherwise (readBuffered then leaves it to the
// general path, which checks and reports whatever is wrong).
func (c *Conn) bufferedExtent(b []byte) (frames, bytes int, ok bool) {
	var total uint64
	off := 0
	for n := 0; n < c.cfg.MaxFrames; n++ {
		flags, size, hl, whole := zmtpwire.PeekFrameHeader(b[off:])
		if !whole || !isDataFrame(flags) || size > uint64(c.cfg.MaxMessageSize)-total || size > uint64(len(b)-off-hl) {
			return 0, 0, false
		}
		off += hl + int(size)
		total += size
		if flags&flagMore == 0 {
			return n + 1, int(total), true
		}
	}
	return 0, 0, false
}

// readInner reads the command frame whose header is hdr (checked against
// the command limit, not yet consumed) that came after nframes frames of a
// multipart message, and holds it if it is a heartbeat (beats.go).
func (c *Conn) readInner(hdr frameHeader, nframes int) error {
	c.br.Discard(hdr.Len)
	n := int(hdr.Size) // at most the command limit
	var body []byte
	var err error
	if n <= c.br.Size() {
		c.bodyWait(n)
		body, err = c.br.Peek(n)
	} else {
		if cap(c.cmdBuf) < n {
			c.cmdBuf = make([]byte, n) // bounded by the command limit
		}
		body = c.cmdBuf[:n]
		c.bodyWait(n)
		_, err = io.ReadFull(c.br, body)
		n = 0
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if err := c.hold(body, nframes); err != nil {
		return err
	}
	c.br.Discard(n)
	return nil
}

// oversize restates a frame-size violation in terms of the whole message,
// or of the command limit for a command inside it (inner).
func (c *Conn) oversize(verr error, nframes int, total int64, inner bool) *Violation {
	var v *Violation
	errors.As(verr, &v)
	if v.Reason == decodeguard.ReasonOversize && inner {
		v.Detail = "command of " + formatSize(uint64(v.Length)) + " bytes inside a multipart message is over the command limit " +
			itoa(int(commandLimit(&c.cfg)))
	} else if v.Reason == decodeguard.ReasonOversize {
		v.Detail = "message of " + itoa(nframes+1) + " frames claims " + formatSize(uint64(total)+uint64(v.Length)) +
			" bytes, over MaxMessageSize " + itoa(int(c.cfg.MaxMessageSize))
	}
	return v
}

func (c *Conn) readBody(m *Message, n int64) error {
	if n > bigBody {
		return c.readBigBody(m, n)
	}
	for n > 0 {
		step := min(n, readChunk)
		if err := c.bodyReserve(len(m.buf), int(step)); err != nil {
			return err
		}
		start := len(m.buf)
		m.buf = slices.Grow(m.buf, int(step))[:start+int(step)]
		if _, err := io.ReadFull(c.br, m.buf[start:]); err != nil {
			m.buf = m.buf[:start]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		n -= step
	}
	return nil
}

var commandNames = [...]string{cmdPing, cmdPong, cmdSubscribe, cmdCancel, cmdError}

func (c *Conn) command(m *Message) error {
	name, data, err := parseCommand(m.buf)
	if err != nil {
		var v *Violation
		errors.As(err, &v)
		return c.fail(v)
	}
	for _, known := range commandNames {
		if string(name) == known {
			m.Command = known
			m.Frames = append(m.Frames, data)
			return nil
		}
	}
	return c.fail(violation(decodeguard.ReasonTransport, "unknown or misplaced ZMTP command after the handshake", int64(len(m.buf)), m.buf))
}

// messageBuffered reports whether the read buffer already holds at least one
// whole message, so that the next ReadMessage will not wait on the network.
// A reader that batches messages uses it to hand a batch on instead of
// holding it while a peer's next message is still arriving. It only looks at
// frame headers already received and never blocks or allocates. (A message
// larger than the read buffer is never reported as buffered.)
func (c *Conn) messageBuffered() bool {
	if c.beats.any() {
		return true
	}
	if c.cz != nil {
		return c.curveMessageBuffered()
	}
	b, _ := c.br.Peek(c.br.Buffered())
	inside := false // past the first frame of a multipart message
	for off := 0; off < len(b); {
		flags, size, hl, whole := zmtpwire.PeekFrameHeader(b[off:])
		if !whole || size > uint64(len(b)-off-hl) {
			return false
		}
		off += hl + int(size)
		if flags&flagCommand != 0 && inside {
			continue // a heartbeat: the message goes on (beats.go)
		}
		if flags&flagMore == 0 || flags&flagCommand != 0 {
			return true
		}
		inside = true
	}
	return false
}

// TryReadMessage is ReadMessage for a reader that batches: when the read
// buffer already holds the next whole message it reads it into m as
// ReadMessage would (same checks, same violations) and reports true;
// otherwise it consumes nothing, leaves m reset and reports false, without
// waiting on the network. It never blocks, so a reader can hand on what it
// has instead of holding it while the peer's next message is arriving.
func (c *Conn) TryReadMessage(m *Message) (bool, error) {
	m.Reset()
	if c.beats.any() {
		return true, c.ReadMessage(m)
	}
	if c.cz == nil && (c.cr == nil || !c.cr.full) {
		if c.readBuffered(m) {
			markWork(c.work)
			return true, nil
		}
	}
	// Anything else that is whole (a command, a message the general path
	// refuses, a buffer about to grow, CURVE) goes through ReadMessage.
	if !c.messageBuffered() {
		return false, nil
	}
	return true, c.ReadMessage(m)
}
