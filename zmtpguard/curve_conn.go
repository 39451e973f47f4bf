package zmtpguard

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"slices"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// The flags byte inside a CURVE MESSAGE box (RFC 25).
const (
	curveFlagMore    = 0x01
	curveFlagCommand = 0x02
)

// curveOuterFlags are the frame flags a MESSAGE is sent with: a data frame
// without MORE, as libzmq 4.3.4 sends it (seen on the wire in the interop
// tests; it drops a connection whose MESSAGE comes in a command frame).
// Receiving, either kind is accepted.
const curveOuterFlags = 0

// curveRetain is the scratch capacity a CURVE connection keeps after a
// large frame; more is released.
const curveRetain = 4 * readChunk

// errNonceExhausted is returned when a connection has sent 2^64-1 frames.
var errNonceExhausted = errors.New("zmtpguard: CURVE send nonce exhausted; reconnect")

// writeCurve boxes one frame (flags, then name and data for a command or
// data alone) into a MESSAGE and buffers it.
func (c *Conn) writeCurve(flags byte, name, data []byte) error {
	cs := c.cz
	if cs.sendNonce == math.MaxUint64 {
		return errNonceExhausted
	}
	cs.sendNonce++
	p := append(cs.wplain[:0], flags)
	if flags&curveFlagCommand != 0 {
		p = append(p, byte(len(name)))
		p = append(p, name...)
	}
	p = append(p, data...)
	out := append(cs.wbox[:0], "\x07MESSAGE"...)
	out = binary.BigEndian.AppendUint64(out, cs.sendNonce)
	out = cs.sendBox.seal(out, p, cs.sendNonce)
	w := c.writer()
	c.wrote += len(out)
	h := c.hdr[:]
	if len(out) > 255 {
		h[0] = curveOuterFlags | flagLong
		putUint64(h[1:9], uint64(len(out)))
		h = h[:9]
	} else {
		h[0] = curveOuterFlags
		h[1] = byte(len(out))
		h = h[:2]
	}
	_, err := w.Write(h)
	if err == nil {
		_, err = w.Write(out)
	}
	cs.wplain, cs.wbox = p[:0], out[:0]
	if cap(p) > curveRetain {
		cs.wplain = nil
	}
	if cap(out) > curveRetain {
		cs.wbox = nil
	}
	return err
}

// readCurve is ReadMessage under CURVE: each frame arrives as one MESSAGE
// command whose box holds the frame's flags and body. Every header is
// checked against the limits (plus the MESSAGE overhead) before its body is
// read; a MESSAGE whose nonce is not above the last one received (replayed
// or reordered) or whose box does not open (forged, corrupted) is a
// ReasonAuth violation and closes the connection.
func (c *Conn) readCurve(m *Message) error {
	cs := c.cz
	var total int64
	for nframes := 0; ; nframes++ {
		if nframes > 0 {
			c.bodyWait(2)
		}
		b, err := c.br.Peek(1)
		if err != nil {
			if nframes > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		b, err = c.br.Peek(headerLen(b[0]))
		// Inside a multipart message the next frame may be a heartbeat
		// (beats.go), which does not count toward the message's size: the
		// box is allowed up to the command limit when that is more than
		// what is left, and a data frame is checked again once opened.
		left := c.cfg.MaxMessageSize - total
		limit := left
		if nframes > 0 {
			limit = max(left, commandLimit(&c.cfg))
		}
		hdr, ok, verr := parseFrameHeader(b, limit+curveMessageOverhead)
		if verr != nil {
			return c.fail(c.oversize(verr, nframes, total, false))
		}
		if !ok {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if hdr.More() {
			return c.fail(violation(decodeguard.ReasonTransport, "CURVE MESSAGE frame has MORE set (MORE travels inside the box)", hdr.Size, b))
		}
		if nframes >= c.cfg.MaxFrames {
			return c.fail(violation(decodeguard.ReasonOversize,
				"message has more than MaxFrames="+itoa(c.cfg.MaxFrames)+" frames", int64(nframes+1), nil))
		}
		if hdr.Size < curveMessageOverhead {
			return c.fail(violation(decodeguard.ReasonTransport, "CURVE MESSAGE of "+itoa(int(hdr.Size))+" bytes is shorter than "+itoa(curveMessageOverhead), hdr.Size, b))
		}
		c.br.Discard(hdr.Len)
		n := int(hdr.Size)
		var body []byte
		peeked := n <= c.br.Size()
		if peeked {
			// The whole MESSAGE fits in the read buffer: open it there. A
			// body not yet buffered is waited for under BodyTimeout, as on
			// NULL (readBody): its header has arrived.
			c.bodyWait(n)
			if body, err = c.br.Peek(n); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		} else {
			if body, err = c.readCurveBody(n); err != nil {
				return err
			}
		}
		if string(body[:8]) != "\x07MESSAGE" {
			return c.fail(violation(decodeguard.ReasonTransport, "expected a MESSAGE command after the CURVE handshake", int64(n), body))
		}
		nonce := binary.BigEndian.Uint64(body[8:16])
		if nonce <= cs.recvNonce {
			return c.fail(violation(decodeguard.ReasonAuth, "CURVE MESSAGE nonce "+formatSize(nonce)+" is not above the last one received ("+
				formatSize(cs.recvNonce)+"): replayed or reordered", int64(n), nil))
		}
		start := len(m.buf)
		out, flags, ok := cs.recvBox.openFrame(m.buf, body[16:], nonce)
		if !ok {
			return c.fail(violation(decodeguard.ReasonAuth, "CURVE MESSAGE fails authentication (forged or corrupted)", int64(n), nil))
		}
		if peeked {
			c.br.Discard(n)
		} else if cap(cs.rbuf) > curveRetain {
			cs.rbuf = nil
		}
		cs.recvNonce = nonce
		m.buf = out
		if flags&^(curveFlagMore|curveFlagCommand) != 0 {
			return c.fail(violation(decodeguard.ReasonTransport, "CURVE frame flags have reserved bits set", int64(n), []byte{flags}))
		}
		if flags&curveFlagCommand != 0 {
			if flags&curveFlagMore != 0 {
				return c.fail(violation(decodeguard.ReasonTransport, "CURVE command frame has MORE set", int64(nframes), nil))
			}
			if nframes > 0 {
				if int64(len(m.buf)-start) > commandLimit(&c.cfg) {
					return c.fail(violation(decodeguard.ReasonOversize, "command of "+itoa(len(m.buf)-start)+
						" bytes inside a multipart message is over the command limit "+itoa(int(commandLimit(&c.cfg))), int64(len(m.buf)-start), nil))
				}
				err := c.hold(m.buf[start:], nframes)
				m.buf = m.buf[:start]
				if err != nil {
					return err
				}
				nframes-- // not one of the message's frames
				continue
			}
			m.ends = append(m.ends, len(m.buf))
			return c.command(m)
		}
		if int64(len(m.buf)-start) > left {
			return c.fail(c.oversize(violation(decodeguard.ReasonOversize, "", int64(len(m.buf)-start), nil), nframes, total, false))
		}
		total += int64(len(m.buf) - start)
		m.ends = append(m.ends, len(m.buf))
		if flags&curveFlagMore == 0 {
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

// readCurveBody reads a MESSAGE larger than the read buffer into the
// connection's scratch buffer, growing it only as bytes arrive.
func (c *Conn) readCurveBody(n int) ([]byte, error) {
	cs := c.cz
	buf := cs.rbuf[:0]
	for len(buf) < n {
		step := min(n-len(buf), readChunk)
		if err := c.bodyReserve(len(buf), step); err != nil {
			cs.rbuf = buf[:0]
			return nil, err
		}
		start := len(buf)
		buf = slices.Grow(buf, step)[:start+step]
		if _, err := io.ReadFull(c.br, buf[start:]); err != nil {
			cs.rbuf = buf[:0]
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	cs.rbuf = buf[:0]
	return buf, nil
}

// curveMessageBuffered is messageBuffered under CURVE, where a frame's MORE
// flag travels inside its box: it decrypts the flags byte of each buffered
// MESSAGE (one Salsa20 block, no authentication: it is a hint) to find
// where the next message ends. A frame ReadMessage will refuse at once (a
// nonce not above the last, a short or foreign frame) also reports true:
// reading it cannot wait on the network. It never blocks or allocates.
func (c *Conn) curveMessageBuffered() bool {
	cs := c.cz
	b, _ := c.br.Peek(c.br.Buffered())
	last := cs.recvNonce
	inside := false // past the first frame of a multipart message
	for off := 0; off < len(b); {
		flags, size, hl, whole := zmtpwire.PeekFrameHeader(b[off:])
		if !whole {
			return false
		}
		if size < curveMessageOverhead || flags&flagMore != 0 {
			return true // refused as soon as it is read
		}
		if size > uint64(len(b)-off-hl) {
			return false
		}
		body := b[off+hl : off+hl+int(size)]
		if string(body[:8]) != "\x07MESSAGE" {
			return true
		}
		n := binary.BigEndian.Uint64(body[8:16])
		if n <= last {
			return true
		}
		last = n
		var counter [16]byte
		first := cs.recvBox.firstBlock(&counter, n)
		inner := body[32] ^ first[32] // body: name, nonce, tag, then the boxed flags byte
		off += hl + int(size)
		if inner == curveFlagCommand && inside {
			continue // a heartbeat inside a message: it goes on (beats.go)
		}
		if inner&curveFlagMore == 0 || inner&curveFlagCommand != 0 {
			return true
		}
		inside = true
	}
	return false
}
