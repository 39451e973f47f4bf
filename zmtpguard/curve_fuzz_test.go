package zmtpguard

import (
	"bufio"
	"encoding/binary"
	"testing"

	"golang.org/x/crypto/nacl/box"
)

// Fixed keys make the fuzz targets deterministic: the libzmq manual's test
// server key, a fixed client short-term key and a fixed session key.
var (
	fuzzServerSecret = func() CurveKey { k, _ := ParseCurveKey(manServerSecret); return k }()
	fuzzServerPublic = func() CurveKey { k, _ := ParseCurveKey(manServerPublic); return k }()
	fuzzShortSecret  = [32]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}
	fuzzSession      = [32]byte{0x5e, 0x55, 0x10, 0x4e}
)

// fuzzHelloBody is a valid HELLO body for the fuzz server key.
func fuzzHelloBody() []byte {
	pub, _ := curvePublicKey(CurveKey(fuzzShortSecret))
	hello := append([]byte("\x05HELLO\x01\x00"), make([]byte, 72)...)
	hello = append(hello, pub[:]...)
	hello = binary.BigEndian.AppendUint64(hello, 1)
	var n [24]byte
	shortNonce(&n, noncePrefixHello, 1)
	srv := [32]byte(fuzzServerPublic)
	return box.Seal(hello, make([]byte, 64), &n, &srv, &fuzzShortSecret)
}

func frameOf(flags byte, body []byte) []byte {
	return append(appendFrameHeader(nil, flags, len(body)), body...)
}

// fuzzMessage boxes one frame under the fuzz session key, as a client sends.
func fuzzMessage(nonce uint64, flags byte, data []byte) []byte {
	var n [24]byte
	shortNonce(&n, noncePrefixMsgC, nonce)
	body := binary.BigEndian.AppendUint64([]byte("\x07MESSAGE"), nonce)
	body = box.SealAfterPrecomputation(body, append([]byte{flags}, data...), &n, &fuzzSession)
	return frameOf(0, body)
}

func fuzzCurveServerConfig() *Config {
	c := Config{Curve: &CurveConfig{Server: true, SecretKey: fuzzServerSecret, Authorize: allowAnyClient, Logger: discardLogger()},
		MaxHandshakeSize: 1024}.withDefaults()
	return &c
}

// FuzzCurveServerHandshake feeds the bytes a client sends after its
// greeting (HELLO, INITIATE, ...) to the CURVE server handshake. Without
// this connection's cookie no input can complete it; every failure is a
// Violation or an I/O error, and memory follows the bytes present.
func FuzzCurveServerHandshake(f *testing.F) {
	hello := frameOf(flagCommand, fuzzHelloBody())
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), "\x04\x05GARBAGE"...))
	f.Add(append(append([]byte{}, hello...), frameOf(flagCommand, append([]byte("\x08INITIATE"), make([]byte, 300)...))...))
	f.Add(append(append([]byte{}, hello...), longHeader(flagCommand, 1<<40)...))
	f.Add(longHeader(flagCommand, 200))
	f.Add(frameOf(flagCommand, []byte("\x05ERROR\x03400")))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := fuzzCurveServerConfig()
		nc := newBytesConn(data)
		_, _, err := curveServerHandshake(nc, bufio.NewReaderSize(nc, 64), cfg, "PULL", nil)
		if err == nil {
			t.Fatal("handshake completed without this connection's cookie")
		}
		mustViolation(t, err)
	})
}

// FuzzCurveClientHandshake feeds a server's bytes after its greeting
// (WELCOME, READY, ERROR) to the CURVE client handshake.
func FuzzCurveClientHandshake(f *testing.F) {
	welcome := append([]byte("\x07WELCOME"), make([]byte, 160)...)
	f.Add(frameOf(flagCommand, welcome))
	f.Add(frameOf(flagCommand, []byte("\x05ERROR\x03400")))
	f.Add(append(frameOf(flagCommand, welcome), frameOf(flagCommand, append([]byte("\x05READY"), make([]byte, 40)...))...))
	f.Add(longHeader(flagCommand, 1<<33))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Config{Curve: &CurveConfig{SecretKey: CurveKey(fuzzShortSecret), ServerKey: fuzzServerPublic}}.withDefaults()
		nc := newBytesConn(data)
		_, _, err := curveClientHandshake(nc, bufio.NewReaderSize(nc, 64), &c, "PUSH", nil)
		if err == nil {
			t.Fatal("handshake completed with a server that holds no key")
		}
		mustViolation(t, err)
	})
}

// FuzzCurveHello checks parseHello on any HELLO body.
func FuzzCurveHello(f *testing.F) {
	good := fuzzHelloBody()
	f.Add(good)
	bad := append([]byte{}, good...)
	bad[150] ^= 1
	f.Add(bad)
	f.Add(good[:199])
	f.Fuzz(func(t *testing.T, body []byte) {
		sec := [32]byte(fuzzServerSecret)
		_, _, err := parseHello(body, &sec)
		if err != nil {
			mustViolation(t, err)
		}
	})
}

// FuzzCurveMessage feeds bytes after a completed CURVE handshake (fixed
// session key) into ReadMessage: every message within the limits, every
// error a Violation or the end of the input, memory following the bytes
// present.
func FuzzCurveMessage(f *testing.F) {
	f.Add(fuzzMessage(3, 0, []byte("hello")))
	f.Add(append(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, 0, make([]byte, 300))...))
	f.Add(fuzzMessage(3, curveFlagCommand, []byte("\x04PING\x00\x00")))
	// Heartbeats (and a READY) between the frames of a message (beats.go).
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagCommand, []byte("\x04PING\x00\x00ctx")), fuzzMessage(5, 0, []byte("b"))))
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagCommand, []byte("\x04PONGctx")), fuzzMessage(5, 0, []byte("b"))))
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagCommand, []byte("\x05READY")), fuzzMessage(5, 0, []byte("b"))))
	m := fuzzMessage(3, 0, []byte("x"))
	f.Add(append(append([]byte{}, m...), m...))                      // replay
	f.Add(append(fuzzMessage(9, 0, nil), fuzzMessage(8, 0, nil)...)) // reorder
	forged := fuzzMessage(3, 0, []byte("forged"))
	forged[len(forged)-1] ^= 1
	f.Add(forged)
	f.Add(longHeader(0, 1<<40))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{MaxMessageSize: 4096, MaxFrames: 8}.withDefaults()
		nc := newBytesConn(data)
		cs := newCurveState(&fuzzSession, true)
		cs.recvNonce = 2
		c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64), cfg: cfg, local: "PULL", cz: cs}
		readAll(t, c, len(data))
	})
}

// FuzzCurveMessageBuffered checks MessageBuffered's promise under CURVE:
// when it reports a whole message, the next ReadMessage reads nothing more
// from the connection.
func FuzzCurveMessageBuffered(f *testing.F) {
	f.Add(cat(fuzzMessage(3, 0, []byte("a")), fuzzMessage(4, curveFlagMore, []byte("b")), fuzzMessage(5, 0, []byte("c"))))
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagMore, make([]byte, 300))))
	f.Add(cat(fuzzMessage(3, 0, nil), fuzzMessage(3, 0, nil)))
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagCommand, []byte("\x04PING\x00\x00")), fuzzMessage(5, 0, []byte("b"))))
	f.Add(cat(fuzzMessage(3, curveFlagMore, []byte("a")), fuzzMessage(4, curveFlagCommand, []byte("\x04PING\x00\x00"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{MaxMessageSize: 4096, MaxFrames: 8}.withDefaults()
		rc := &readCounter{bytesConn: newBytesConn(data)}
		cs := newCurveState(&fuzzSession, true)
		cs.recvNonce = 2
		c := &Conn{nc: rc, br: bufio.NewReaderSize(rc, 1024), cfg: cfg, local: "PULL", cz: cs}
		var m Message
		for {
			whole := c.messageBuffered()
			before := rc.reads
			err := c.ReadMessage(&m)
			if whole && rc.reads != before {
				t.Fatalf("MessageBuffered reported a whole message, but ReadMessage read the connection (err %v)", err)
			}
			if err != nil {
				return
			}
		}
	})
}

// readCounter counts the reads of a bytesConn.
type readCounter struct {
	*bytesConn
	reads int
}

func (r *readCounter) Read(p []byte) (int, error) {
	r.reads++
	return r.bytesConn.Read(p)
}
