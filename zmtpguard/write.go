package zmtpguard

import (
	"bufio"
	"errors"
)

// The write path of a Conn: messages and commands into a buffered writer
// that Flush sends.

func (c *Conn) writer() *bufio.Writer {
	if c.bw == nil {
		// Small first (see initialWriteBuffer); Flush grows it.
		c.bw = bufio.NewWriterSize(c.nc, min(initialWriteBuffer, c.cfg.WriteBufferSize))
	}
	return c.bw
}

func (c *Conn) writeFrame(flags byte, body []byte) error {
	if c.cz != nil {
		return c.writeCurve(flags&flagMore, nil, body)
	}
	w := c.writer()
	c.wrote += len(body)
	h := c.hdr[:]
	if len(body) > 255 {
		h[0] = flags | flagLong
		putUint64(h[1:9], uint64(len(body)))
		h = h[:9]
	} else {
		h[0] = flags
		h[1] = byte(len(body))
		h = h[:2]
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// errEmptyMessage is returned when asked to write a message with no frames.
var errEmptyMessage = errors.New("zmtpguard: a message needs at least one frame")

// WriteMessage buffers one message of the given frames. Call Flush to send.
func (c *Conn) WriteMessage(frames ...[]byte) error {
	if len(frames) == 0 {
		return errEmptyMessage
	}
	c.wroteData = true
	last := len(frames) - 1
	for i, f := range frames {
		var flags byte
		if i < last {
			flags = flagMore
		}
		if err := c.writeFrame(flags, f); err != nil {
			return err
		}
	}
	return nil
}

// WriteCommand buffers one ZMTP command (name, 1..255 bytes, and data), for
// example a PING of ZMTP 3.1 (RFC 37) or a SUBSCRIBE; call Flush to send.
// Send PING only to a peer whose greeting announced 3.1 or later
// (Metadata.Minor): a 3.0 peer takes it for a data message. A peer's PING
// (a Message whose Command is "PING") is answered with a "PONG" whose data
// is the PING's context: Frames[0] after its 2-byte TTL, at most 16 bytes.
func (c *Conn) WriteCommand(name string, data []byte) error {
	if len(name) == 0 || len(name) > 255 {
		return errors.New("zmtpguard: command name must be 1..255 bytes")
	}
	if c.cz != nil {
		return c.writeCurve(curveFlagCommand, []byte(name), data)
	}
	w := c.writer()
	size := 1 + len(name) + len(data)
	c.wrote += size
	h := c.hdr[:]
	if size > 255 {
		h[0] = flagCommand | flagLong
		putUint64(h[1:9], uint64(size))
		h = h[:9]
	} else {
		h[0] = flagCommand
		h[1] = byte(size)
		h = h[:2]
	}
	w.Write(h)
	w.WriteByte(byte(len(name)))
	w.WriteString(name)
	_, err := w.Write(data)
	return err
}

// Flush sends buffered writes.
func (c *Conn) Flush() error {
	if c.bw == nil {
		return nil
	}
	err := c.bw.Flush()
	if err == nil && c.wroteData {
		c.wroteData = false
		markWork(c.work)
	}
	c.growWriter()
	return err
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	b[0] = byte(v >> 56)
	b[1] = byte(v >> 48)
	b[2] = byte(v >> 40)
	b[3] = byte(v >> 32)
	b[4] = byte(v >> 24)
	b[5] = byte(v >> 16)
	b[6] = byte(v >> 8)
	b[7] = byte(v)
}
