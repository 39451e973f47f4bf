package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// bytesConn is a net.Conn whose reads come from a byte slice (then io.EOF)
// and whose writes are counted and dropped.
type bytesConn struct {
	r       *bytes.Reader
	written int
}

func newBytesConn(b []byte) *bytesConn { return &bytesConn{r: bytes.NewReader(b)} }

func (c *bytesConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error)        { c.written += len(p); return len(p), nil }
func (c *bytesConn) Close() error                       { return nil }
func (c *bytesConn) LocalAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *bytesConn) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2} }
func (c *bytesConn) SetDeadline(t time.Time) error      { return nil }
func (c *bytesConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *bytesConn) SetWriteDeadline(t time.Time) error { return nil }

// fuzzTypes maps a fuzzer byte to a local socket type.
var fuzzTypes = []SocketType{"PULL", "ROUTER", "DEALER", "REP", "REQ",
	"PUB", "XPUB", "SUB", "XSUB", "PUSH", "PAIR"}

func fuzzType(b byte) SocketType { return fuzzTypes[int(b)%len(fuzzTypes)] }

// mustViolation fails unless err is a classified *Violation.
func mustViolation(t *testing.T, err error) *Violation {
	t.Helper()
	var v *Violation
	if !errors.As(err, &v) || !v.Reason.Valid() || decodeguard.ReasonOf(err) != v.Reason {
		t.Fatalf("error is not a classified violation: %T %v", err, err)
	}
	if len(v.Prefix) > maxPrefix {
		t.Fatalf("violation prefix of %d bytes", len(v.Prefix))
	}
	return v
}

// --- seeds, shared with the committed corpora ---

func greetingSeeds() [][]byte {
	return [][]byte{
		greetingWith(3, 0, "NULL"),
		greetingWith(3, 1, "NULL"),
		greetingWith(3, 0, "PLAIN"),
		greetingWith(3, 0, "CURVE"),
		greetingWith(2, 0, "NULL"),
		greetingWith(3, 0, "NUL\x00L"),
		[]byte(httpRequest),
		tlsClientHello[:64],
		{0x01, 0x00},
		{0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 0x01, 0x08, 0x00, 0x00},
		greetingWith(3, 0, "NULL")[:33],
	}
}

func handshakeSeeds() [][]byte {
	null := greetingWith(3, 0, "NULL")
	hs := handshakeAs("PUSH")
	st := prop("Socket-Type", "PUSH")
	return [][]byte{
		hs,
		cat(hs, dataFrame(false, []byte("hello"))),
		cat(hs, commandFrame(cmdPing, []byte{0, 1, 'c'})),
		cat(hs, longHeader(0, 1<<40)),
		cat(null, longHeader(flagCommand, 1<<31)),
		cat(null, readyFrame(st[:len(st)-2])),
		cat(null, readyFrame(prop("SOCKET-TYPE", "PUSH"))),
		cat(null, readyFrame(prop("Socket-Type", "BOGUS"))),
		cat(null, readyFrame(prop("Identity", string(make([]byte, 256))), st)),
		cat(null, commandFrame(cmdError, []byte("\x05nope!"))),
		cat(null, dataFrame(false, []byte("READY"))),
		cat(greetingWith(3, 1, "NULL"), readyFrame(prop("socket-type", "DEALER"), prop("X-Custom", "v"))),
	}
}

func readySeeds() [][]byte {
	st := prop("Socket-Type", "PUSH")
	near := []byte{11}
	near = append(near, "Socket-Type"...)
	near = append(near, 0xFF, 0xFF, 0xFF, 0xF0)
	return [][]byte{
		st,
		cat(st, prop("Identity", "abc")),
		st[:len(st)-2],
		{byte(len(st))},
		near,
		prop("SOCKET-TYPE", "PUSH"),
		prop("socket-type", "PUSH"),
		cat(st, prop("socket-TYPE", "PUSH")),
		prop("Socket-Type", "BOGUS"),
		cat(prop("Identity", string(make([]byte, 300))), st),
		{0},
	}
}

func streamSeeds() [][]byte {
	var tenK []byte
	for i := range 100 {
		tenK = append(tenK, dataFrame(i < 99, []byte{'x'})...)
	}
	return [][]byte{
		dataFrame(false, []byte("hello")),
		cat(dataFrame(true, []byte("a")), dataFrame(false, make([]byte, 300))),
		longHeader(0, 1<<40),
		longHeader(0, 1<<64-1),
		cat(dataFrame(true, nil), longHeader(0, 1<<20)),
		commandFrame(cmdPing, []byte{0, 1, 'c', 't', 'x'}),
		commandFrame(cmdPong, []byte("ctx")),
		commandFrame(cmdSubscribe, []byte("topic")),
		commandFrame(cmdCancel, []byte("topic")),
		commandFrame(cmdError, []byte("\x03bad")),
		commandFrame("HELLO", nil),
		cat(dataFrame(true, []byte("a")), commandFrame(cmdPing, []byte{0, 1})),
		cat(dataFrame(true, []byte("a")), commandFrame(cmdPing, []byte{0, 1}), dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), commandFrame(cmdReady, nil), dataFrame(false, []byte("b"))),
		{0x40, 0x01, 'x'},
		{0x05, 0x00},
		tenK,
	}
}

// innerCommandSeeds are streams with commands between the frames of a
// multipart message: heartbeats (taken out of the message, beats.go),
// whole or cut short, and commands refused there.
func innerCommandSeeds() [][]byte {
	ping := commandFrame(cmdPing, []byte{0, 1, 'c', 't', 'x'})
	pong := commandFrame(cmdPong, []byte("ctx"))
	return [][]byte{
		cat(dataFrame(true, []byte("a")), ping, dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), pong, dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), ping, pong, ping, dataFrame(true, []byte("b")), ping, dataFrame(false, []byte("c")), dataFrame(false, []byte("d"))),
		cat(dataFrame(true, []byte("a")), ping[:4]),
		cat(dataFrame(true, []byte("a")), ping),
		cat(dataFrame(true, []byte("a")), commandFrame(cmdReady, prop("Socket-Type", "PUSH")), dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), commandFrame(cmdSubscribe, []byte("t")), dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), commandFrame("NOPE", nil), dataFrame(false, []byte("b"))),
		cat(dataFrame(true, []byte("a")), longHeader(flagCommand, 1<<20), dataFrame(false, []byte("b"))),
		cat(dataFrame(true, make([]byte, 290)), ping, dataFrame(false, make([]byte, 10))),
	}
}

func frameHeaderSeeds() [][]byte {
	return [][]byte{
		{0x00, 0x05},
		{0x01, 0xFF},
		{0x04, 0x06},
		{0x05, 0x01},
		{0x80, 0x00},
		longHeader(0, 300),
		longHeader(0, 1<<31),
		longHeader(0, 1<<40),
		longHeader(0, 1<<62),
		longHeader(0, 1<<64-1),
		longHeader(flagCommand, 1<<63),
		{0x02, 0x00, 0x00},
	}
}

// --- targets ---

func FuzzCheckGreeting(f *testing.F) {
	for _, s := range greetingSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := checkGreeting(b, nil)
		if err != nil {
			mustViolation(t, err)
		}
		// A refused prefix is never accepted once longer.
		for k := 0; k < len(b) && k <= greetingSize; k++ {
			if checkGreeting(b[:k], nil) != nil && err == nil {
				t.Fatalf("prefix of %d bytes refused, whole accepted", k)
			}
		}
		if err == nil && len(b) >= greetingSize {
			if b[0] != 0xFF || b[9] != 0x7F || b[10] < 3 || b[32] > 1 ||
				!bytes.Equal(b[12:32], append([]byte("NULL"), make([]byte, 16)...)) {
				t.Fatalf("accepted a greeting zmq4 would refuse: % x", b[:greetingSize])
			}
		}
	})
}

// FuzzHandshake feeds bytes as a peer into Handshake: the result is a Conn
// whose peer is known and compatible, or a classified violation; never a
// panic. On success the rest of the bytes go through ReadMessage.
func FuzzHandshake(f *testing.F) {
	for i, s := range handshakeSeeds() {
		f.Add(s, byte(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, lt byte) {
		local := fuzzType(lt)
		cfg := &Config{HandshakeTimeout: time.Second, MaxHandshakeSize: 1024, MaxMessageSize: 4096, MaxFrames: 8}
		c, err := Handshake(context.Background(), newBytesConn(data), local, []byte("me"), cfg)
		if err != nil {
			mustViolation(t, err)
			return
		}
		defer c.Close()
		if !compatible(local, c.Peer().SocketType) || len(c.Peer().Identity) > maxIdentity {
			t.Fatalf("accepted peer %q for local %q", c.Peer().SocketType, local)
		}
		readAll(t, c, len(data))
	})
}

// readAll reads messages from c until an error and checks each against c's
// limits.
func readAll(t *testing.T, c *Conn, present int) {
	t.Helper()
	var m Message
	for {
		err := c.ReadMessage(&m)
		if err != nil {
			if err != io.EOF && err != io.ErrUnexpectedEOF {
				mustViolation(t, err)
			}
			return
		}
		if len(m.Frames) > c.cfg.MaxFrames || int64(m.Size()) > c.cfg.MaxMessageSize {
			t.Fatalf("message of %d frames, %d bytes passed the limits", len(m.Frames), m.Size())
		}
		if m.Size() > present {
			t.Fatalf("message of %d bytes from %d bytes of input", m.Size(), present)
		}
		// Memory follows the bytes present, not the lengths claimed.
		if cap(m.buf) > 2*(present+readChunk) {
			t.Fatalf("buffer of %d bytes for %d bytes of input", cap(m.buf), present)
		}
		if m.Command != "" && len(m.Frames) != 1 {
			t.Fatalf("command %q with %d frames", m.Command, len(m.Frames))
		}
	}
}

// FuzzParseReady checks ParseReady and compares what it accepts with what
// zmq4 reads from the same bytes, so nothing passes that zmq4 would read
// differently (or panic on).
func FuzzParseReady(f *testing.F) {
	for i, s := range readySeeds() {
		f.Add(s, byte(i))
	}
	f.Fuzz(func(t *testing.T, props []byte, lt byte) {
		local := fuzzType(lt)
		md, err := parseReady(props, local, &Config{MaxPropertySize: 512, MaxProperties: 8})
		if err != nil {
			mustViolation(t, err)
			return
		}
		if !compatible(local, md.SocketType) || len(md.Identity) > maxIdentity || len(md.Properties) > 8 {
			t.Fatalf("accepted %+v for %q", md, local)
		}
		zm := make(zmq4.Metadata)
		if err := zm.UnmarshalZMTP(props); err != nil {
			t.Fatalf("zmq4 refuses metadata the guard accepted: %v", err)
		}
		if SocketType(zm["Socket-Type"]) != md.SocketType || zm["Identity"] != md.Identity {
			t.Fatalf("zmq4 reads Socket-Type %q Identity %q, guard %q %q",
				zm["Socket-Type"], zm["Identity"], md.SocketType, md.Identity)
		}
		if !zmq4.SocketType(md.SocketType).IsCompatible(zmq4.SocketType(local)) { // zmq4's own check, which panics on unknown types
			t.Fatalf("zmq4 finds %q incompatible with %q", md.SocketType, local)
		}
	})
}

// FuzzReadMessage feeds bytes after a completed handshake into ReadMessage.
func FuzzReadMessage(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{}.withDefaults()
		nc := newBytesConn(data)
		c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64), cfg: cfg, local: "PULL"}
		readAll(t, c, len(data))
	})
}

func FuzzParseFrameHeader(f *testing.F) {
	for _, s := range frameHeaderSeeds() {
		f.Add(s, int64(1<<20))
	}
	f.Fuzz(func(t *testing.T, b []byte, max int64) {
		h, ok, err := parseFrameHeader(b, max)
		if err != nil {
			if ok {
				t.Fatal("ok with an error")
			}
			mustViolation(t, err)
			return
		}
		if !ok {
			if len(b) >= 1 && len(b) >= headerLen(b[0]) {
				t.Fatalf("incomplete with %d bytes", len(b))
			}
			return
		}
		if h.Len != headerLen(b[0]) || h.Len > len(b) || h.Size < 0 || h.Size > max || h.Flags&0xF8 != 0 {
			t.Fatalf("header %+v from % x (max %d)", h, b, max)
		}
		if h.Command() && h.More() {
			t.Fatal("command with MORE accepted")
		}
	})
}

// FuzzScanStream runs bytes through the transport's passive scanner, read
// in chunks of a fuzzed size, and checks that what reaches zmq4 is a frame
// stream within the limits, with no command in it.
func FuzzScanStream(f *testing.F) {
	for i, s := range streamSeeds() {
		f.Add(s, byte(i), byte(i%2))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk byte, pub byte) {
		var ctr counters
		cfg := countingConfig(&Config{MaxMessageSize: 4096, MaxFrames: 8, MaxHandshakeSize: 512}, &ctr)
		nc := newBytesConn(data)
		g := newGuardConn(nc, bufio.NewReaderSize(nc, 64), &cfg, &ctr, true)
		g.rphase, g.wphase = rStream, wStream
		lt := SocketType("PULL")
		if pub&1 == 1 {
			lt = "XPUB"
		}
		g.local.Store(&lt)
		var out []byte
		buf := make([]byte, int(chunk)%97+1)
		for {
			n, err := g.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				var oe *net.OpError
				if errors.As(err, &oe) {
					mustViolation(t, oe.Err)
				} else if err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("scanner error %T %v", err, err)
				}
				break
			}
			if n == 0 {
				t.Fatal("Read returned 0, nil")
			}
		}
		checkStream(t, out, cfg.MaxMessageSize, cfg.MaxFrames)
	})
}

// checkStream verifies that out is a sequence of data frames within the
// limits (a truncated last frame allowed).
func checkStream(t *testing.T, out []byte, maxSize int64, maxFrames int) {
	t.Helper()
	frames, total := 0, int64(0)
	for len(out) > 0 {
		h, ok, err := parseFrameHeader(out, maxSize-total)
		if err != nil {
			t.Fatalf("scanner released a bad header: %v", err)
		}
		if !ok {
			t.Fatalf("scanner released a partial header % x", out)
		}
		if h.Command() {
			t.Fatal("scanner released a command frame")
		}
		frames++
		if frames > maxFrames {
			t.Fatalf("scanner released a message of %d frames", frames)
		}
		out = out[h.Len:]
		if int64(len(out)) < h.Size {
			return // truncated by the end of the input
		}
		out = out[h.Size:]
		total += h.Size
		if !h.More() {
			frames, total = 0, 0
		}
	}
}
