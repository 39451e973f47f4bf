package zmtpguard

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// The stream of one transport connection: what zmq4 reads passes the
// guard's checks first, and what zmq4 writes is watched for its READY.

// Read phases of a guardConn.
const (
	rGreeting uint8 = iota // dial side: peer greeting not read yet
	rReady                 // dial side: peer READY not read yet
	rStream                // frames
)

// Write phases of a guardConn.
const (
	wGreeting uint8 = iota // zmq4's greeting comes next
	wReady                 // zmq4's READY comes next
	wStream                // frames
)

// maxLocalReady bounds the READY zmq4 writes (its own metadata).
const maxLocalReady = 64 << 10

// guardConn is the net.Conn zmq4 runs over. Reads come from one zmq4
// goroutine at a time; writes are serialised by wmu (zmq4 writes one
// connection from several goroutines over its lifetime).
type guardConn struct {
	net.Conn
	br      *bufio.Reader
	cfg     *Config
	ctr     *counters
	remote  string
	server  bool
	release func()
	// work is marked when a message passed (see hostShares).
	work *atomic.Uint32

	// Read side.
	replay []byte // validated bytes owed to zmq4
	rphase uint8
	remain int64 // body bytes of the current frame not yet passed on
	frames int   // frames of the current message before this one
	total  int64 // body bytes of those frames
	hdr    [9]byte
	stage  []byte // synthesised bytes (dial-side greeting, translated subscriptions)
	cmd    []byte // command body buffer
	rerr   error
	peer   Metadata
	// last is set while the current frame is its message's last.
	last bool
	// body is the message-body deadline and budget state (transportbody.go).
	body bodyClock
	// done is the bytes of the last complete message, charged to the
	// Budget outside any holder until zmq4 asks for the next message.
	done atomic.Int64

	// Write side, under wmu.
	wmu    sync.Mutex
	wphase uint8
	wbuf   []byte // zmq4's READY while it is being written
	out    outTracker
	werr   error
	// local is the local socket type, learnt from zmq4's READY.
	local atomic.Pointer[SocketType]
	// pong is a PONG frame waiting for a message boundary of zmq4's output.
	pong atomic.Pointer[[]byte]

	// watch closes a listening-side connection whose zmq4 handshake did
	// not complete; opened records that it did.
	watch  *time.Timer
	opened atomic.Bool

	closeOnce sync.Once
}

func newGuardConn(nc net.Conn, br *bufio.Reader, cfg *Config, ctr *counters, server bool) *guardConn {
	g := &guardConn{Conn: nc, br: br, cfg: cfg, ctr: ctr, remote: remoteString(nc), server: server}
	g.body.nc = nc
	return g
}

// Close closes the connection and releases its MaxConns slot.
func (g *guardConn) Close() error {
	// g.watch is set before g is handed to zmq4, so every Close caller
	// sees it; only the watchdog itself uses shut directly.
	if g.watch != nil {
		g.watch.Stop()
	}
	return g.shut()
}

func (g *guardConn) shut() error {
	err := g.Conn.Close()
	g.closeBody()
	g.closeOnce.Do(func() {
		if g.release != nil {
			g.release()
		}
	})
	return err
}

// violate reports v, closes the connection and returns the error zmq4's
// read or write gets: a non-timeout net.Error, so zmq4 marks its connection
// closed and removes it.
func (g *guardConn) violate(op string, err error) error {
	var v *Violation
	if errors.As(err, &v) {
		v.Remote = g.remote
		g.cfg.OnViolation(*v)
	}
	g.Close()
	return &net.OpError{Op: op, Net: "zmtpguard", Source: g.Conn.LocalAddr(), Addr: g.Conn.RemoteAddr(), Err: err}
}

func (g *guardConn) localType() SocketType {
	if p := g.local.Load(); p != nil {
		return *p
	}
	return ""
}

// Read gives zmq4 validated bytes only.
func (g *guardConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(g.replay) > 0 {
			n := copy(p, g.replay)
			g.replay = g.replay[n:]
			return n, nil
		}
		if g.rerr != nil {
			return 0, g.rerr
		}
		switch g.rphase {
		case rGreeting:
			var greet [greetingSize]byte
			if err := readGreeting(g.br, &greet, 0, nil, nil); err != nil {
				g.rerr = g.violate("read", err)
				continue
			}
			g.stage = append(g.stage[:0], greet[:]...)
			g.replay = g.stage
			g.rphase = rReady
		case rReady:
			frame, md, err := readReadyFrame(g.br, g.localType(), g.cfg)
			if err != nil {
				g.rerr = g.violate("read", err)
				continue
			}
			if err := g.Conn.SetDeadline(time.Time{}); err != nil {
				g.rerr = err
				continue
			}
			g.ctr.handshakes.Add(1)
			g.peer = md
			g.replay = frame
			g.rphase = rStream
		default:
			if !g.opened.Load() {
				g.opened.Store(true) // zmq4 has read the whole handshake
				if g.watch != nil {
					g.watch.Stop()
				}
			}
			if g.remain > 0 {
				g.bodyWait(1)
				n, err := g.br.Read(p[:min(int64(len(p)), g.remain)])
				g.remain -= int64(n)
				if err != nil && n == 0 {
					err = g.readErr(err)
					g.rerr = err
					return 0, err
				}
				if g.remain == 0 && g.last {
					g.messageDone()
				}
				return n, err
			}
			if err := g.advance(); err != nil {
				g.rerr = g.readErr(err)
			}
		}
	}
}

// advance handles the next frame header: a data frame's header is checked
// and staged for zmq4 (its body then passes through as it arrives); a
// command is read whole and handled here.
func (g *guardConn) advance() error {
	g.nextMessage()
	var b []byte
	var err error
	if n := g.br.Buffered(); n >= 9 {
		b, _ = g.br.Peek(9) // buffered: never blocks
	} else {
		if g.frames > 0 {
			g.bodyWait(2)
		}
		b, err = g.br.Peek(1)
		if err != nil {
			return err
		}
		b, err = g.br.Peek(headerLen(b[0]))
	}
	limit := g.cfg.MaxMessageSize - g.total
	if b[0]&flagCommand != 0 {
		// Not what is left of the message: a heartbeat inside one does not
		// count toward it. The command limit is checked below.
		limit = g.cfg.MaxMessageSize
	}
	hdr, ok, verr := parseFrameHeader(b, limit)
	if verr != nil {
		var v *Violation
		if errors.As(verr, &v) && v.Reason == decodeguard.ReasonOversize {
			v.Detail = "message of " + itoa(g.frames+1) + " frames claims " + formatSize(uint64(g.total)+uint64(v.Length)) +
				" bytes, over MaxMessageSize " + itoa(int(g.cfg.MaxMessageSize))
		}
		return g.violate("read", verr)
	}
	if !ok {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if hdr.Command() {
		// Commands are bounded by the command limit, inside a multipart
		// message too: there only a heartbeat may come (beats.go), and it
		// counts toward neither MaxFrames nor MaxMessageSize.
		if limit := min(int64(g.cfg.MaxHandshakeSize), g.cfg.MaxMessageSize); hdr.Size > limit {
			return g.violate("read", violation(decodeguard.ReasonOversize,
				"command of "+itoa(int(hdr.Size))+" bytes is over the command limit "+itoa(int(limit)), hdr.Size, b))
		}
		g.br.Discard(hdr.Len)
		if int64(cap(g.cmd)) < hdr.Size {
			g.cmd = make([]byte, hdr.Size) // bounded by the limit above
		}
		body := g.cmd[:hdr.Size]
		if _, err := io.ReadFull(g.br, body); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if g.frames > 0 {
			// Inside a multipart message zmq4 is between frames: only a
			// PING (answered at the next boundary of zmq4's output) or a
			// PONG may be handled here; anything else is refused.
			name, _, err := parseCommand(body)
			if err != nil {
				return g.violate("read", err)
			}
			if n := string(name); n != cmdPing && n != cmdPong {
				return g.violate("read", violation(decodeguard.ReasonTransport,
					"command frame inside a multipart message ("+quoteName(name)+"; only PING and PONG may come between frames)", int64(g.frames), body))
			}
		}
		return g.command(body)
	}
	n := g.frames + 1
	if n > g.cfg.MaxFrames {
		return g.violate("read", violation(decodeguard.ReasonOversize,
			"message has more than MaxFrames="+itoa(g.cfg.MaxFrames)+" frames", int64(n), nil))
	}
	// zmq4 allocates the whole frame when it reads this header: the
	// budget is asked first (it may stall here, before zmq4 sees it).
	if err := g.charge(hdr.Size); err != nil {
		return err
	}
	copy(g.hdr[:], b[:hdr.Len])
	g.br.Discard(hdr.Len)
	g.replay = g.hdr[:hdr.Len]
	g.remain = hdr.Size
	g.last = !hdr.More()
	if hdr.More() {
		g.frames = n
		g.total += hdr.Size
	} else {
		g.frames, g.total = 0, 0
		if hdr.Size == 0 {
			g.messageDone()
		}
	}
	return nil
}

// command handles one command frame body after the handshake.
func (g *guardConn) command(body []byte) error {
	name, data, err := parseCommand(body)
	if err != nil {
		return g.violate("read", err)
	}
	switch string(name) {
	case cmdPing:
		var pingCtx []byte
		if len(data) > 2 {
			pingCtx = data[2:min(len(data), 18)]
		}
		g.queuePong(pingCtx)
		return nil
	case cmdPong:
		return nil
	case cmdSubscribe, cmdCancel:
		if lt := g.localType(); lt != "PUB" && lt != "XPUB" {
			return g.violate("read", violation(decodeguard.ReasonTransport,
				string(name)+" command sent to a "+string(lt)+" socket", int64(len(body)), body))
		}
		// zmq4 knows only ZMTP 3.0 subscriptions: a one-frame message
		// starting with 1 (subscribe) or 0 (cancel).
		op := byte(1)
		if string(name) == cmdCancel {
			op = 0
		}
		g.stage = appendFrameHeader(g.stage[:0], 0, 1+len(data))
		g.stage = append(g.stage, op)
		g.stage = append(g.stage, data...)
		g.replay = g.stage
		return nil
	case cmdError:
		g.Close()
		return io.EOF
	}
	return g.violate("read", violation(decodeguard.ReasonTransport,
		"unknown or misplaced ZMTP command after the handshake", int64(len(body)), body))
}

// appendFrameHeader appends a ZMTP frame header for a body of n bytes.
func appendFrameHeader(b []byte, flags byte, n int) []byte {
	if n > 255 {
		var h [9]byte
		h[0] = flags | flagLong
		putUint64(h[1:], uint64(n))
		return append(b, h[:]...)
	}
	return append(b, flags, byte(n))
}

// queuePong arranges for a PONG echoing ctx to be written at the next
// message boundary of zmq4's output, without ever blocking the reader on a
// writer: if zmq4 is mid-write, the writer sends it when it is done.
func (g *guardConn) queuePong(ctx []byte) {
	frame := appendFrameHeader(nil, flagCommand, 1+len(cmdPong)+len(ctx))
	frame = append(frame, byte(len(cmdPong)))
	frame = append(frame, cmdPong...)
	frame = append(frame, ctx...)
	g.pong.Store(&frame)
	if g.wmu.TryLock() {
		g.flushPongLocked()
		g.wmu.Unlock()
	}
}

// flushPongLocked writes a pending PONG if zmq4's output is at a message
// boundary. wmu must be held.
func (g *guardConn) flushPongLocked() {
	if g.wphase != wStream || g.werr != nil || !g.out.atBoundary() {
		return
	}
	if p := g.pong.Swap(nil); p != nil {
		if _, err := g.Conn.Write(*p); err != nil {
			g.werr = err
		}
	}
}

// Write passes zmq4's output on, except its greeting: on the listening side
// the guard sent its own already, on the dialing side the guard's goes out
// in its place (both announce ZMTP 3.1); zmq4's READY is read for the local
// socket type on its way out.
func (g *guardConn) Write(p []byte) (int, error) {
	n, err := g.write(p)
	// A PONG queued while this write held the lock is sent now (the reader's
	// TryLock failed, so it relies on this check).
	if g.pong.Load() != nil && g.wmu.TryLock() {
		g.flushPongLocked()
		g.wmu.Unlock()
	}
	return n, err
}

func (g *guardConn) write(p []byte) (int, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.werr != nil {
		return 0, g.werr
	}
	switch g.wphase {
	case wGreeting:
		if !bytes.Equal(p, zmq4Greeting[:]) {
			g.werr = errors.New("zmtpguard: zmq4's greeting is not the one the guard replaces (only the NULL mechanism is supported)")
			g.Close()
			return 0, g.werr
		}
		g.wphase = wReady
		if g.server {
			return len(p), nil
		}
		// The guard's greeting goes out in place of zmq4's: ZMTP 3.1, since
		// the guard answers PINGs and converts SUBSCRIBE/CANCEL for zmq4.
		if _, err := g.Conn.Write(localGreeting[:]); err != nil {
			g.werr = err
			g.Close()
			return 0, err
		}
		return len(p), nil
	case wReady:
		return g.writeReady(p)
	}
	n, err := g.Conn.Write(p)
	g.out.track(p[:n])
	if err != nil {
		return n, err
	}
	g.flushPongLocked()
	return n, nil
}

// writeReady collects zmq4's READY command, learns the local socket type
// from it, refuses an incompatible peer, and sends it.
func (g *guardConn) writeReady(p []byte) (int, error) {
	fail := func(err error) (int, error) {
		g.werr = err
		g.Close()
		return 0, err
	}
	if len(g.wbuf)+len(p) > maxLocalReady {
		return fail(errors.New("zmtpguard: zmq4's READY is too large"))
	}
	g.wbuf = append(g.wbuf, p...)
	hdr, ok, err := parseFrameHeader(g.wbuf, maxLocalReady)
	if err != nil || (ok && !hdr.Command()) {
		return fail(errors.New("zmtpguard: zmq4 did not write a READY command"))
	}
	if !ok || int64(len(g.wbuf)) < int64(hdr.Len)+hdr.Size {
		return len(p), nil // the rest of the frame is still to come
	}
	end := hdr.Len + int(hdr.Size)
	name, props, err := parseCommand(g.wbuf[hdr.Len:end])
	if err != nil || string(name) != cmdReady {
		return fail(errors.New("zmtpguard: zmq4 did not write a READY command"))
	}
	own, err := parseReady(props, "", g.cfg)
	if err != nil {
		return fail(errors.New("zmtpguard: zmq4's own READY metadata is not valid"))
	}
	lt := own.SocketType
	g.local.Store(&lt)
	if g.server && !compatible(lt, g.peer.SocketType) {
		v := violation(decodeguard.ReasonHandshake,
			"peer socket type "+string(g.peer.SocketType)+" is not compatible with "+string(lt), -1, nil)
		err := g.violate("write", v)
		g.werr = err
		return 0, err
	}
	if _, err := g.Conn.Write(g.wbuf[:end]); err != nil {
		return fail(err)
	}
	rest := g.wbuf[end:]
	g.wphase = wStream
	if g.server {
		if err := g.Conn.SetWriteDeadline(time.Time{}); err != nil {
			return fail(err)
		}
	}
	if len(rest) > 0 {
		if _, err := g.Conn.Write(rest); err != nil {
			return fail(err)
		}
		g.out.track(rest)
	}
	g.wbuf = nil
	return len(p), nil
}

// outTracker follows the frame structure of zmq4's output (trusted bytes)
// to know when a PONG may be inserted between two messages.
type outTracker struct {
	hdr    [9]byte
	hn     int   // header bytes seen of the frame being started
	remain int64 // body bytes of the current frame still to come
	more   bool  // the last complete header had MORE set
}

func (o *outTracker) atBoundary() bool { return o.hn == 0 && o.remain == 0 && !o.more }

func (o *outTracker) track(b []byte) {
	for len(b) > 0 {
		if o.remain > 0 {
			n := min(int64(len(b)), o.remain)
			o.remain -= n
			b = b[n:]
			continue
		}
		if o.hn == 0 {
			o.hdr[0] = b[0]
			o.hn = 1
			b = b[1:]
		}
		need := headerLen(o.hdr[0])
		k := copy(o.hdr[o.hn:need], b)
		o.hn += k
		b = b[k:]
		if o.hn < need {
			return
		}
		flags, size, _, _ := zmtpwire.PeekFrameHeader(o.hdr[:need]) // whole: need bytes
		o.remain = int64(size)
		o.more = flags&flagMore != 0
		o.hn = 0
	}
}
