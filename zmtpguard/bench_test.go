package zmtpguard

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"
)

// loopConn is a bytesConn whose reads cycle over a fixed stream forever,
// without allocating.
type loopConn struct {
	bytesConn
	b   []byte
	off int
}

func (c *loopConn) Read(p []byte) (int, error) {
	n := copy(p, c.b[c.off:])
	c.off = (c.off + n) % len(c.b)
	return n, nil
}

// stream100 is many back-to-back messages of one 100-byte frame each.
func stream100() []byte {
	var s []byte
	for range 160 {
		s = append(s, dataFrame(false, make([]byte, 100))...)
	}
	return s
}

// BenchmarkReadMessage100 measures the guard's per-frame cost on the
// reading path it owns: header checks plus copying 100 body bytes into the
// reused Message. Goal: no allocation.
func BenchmarkReadMessage100(b *testing.B) {
	nc := &loopConn{b: stream100()}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, defaultReadBufferSize), cfg: Config{}.withDefaults(), local: "PULL"}
	var m Message
	if err := c.ReadMessage(&m); err != nil { // warm the buffers
		b.Fatal(err)
	}
	b.SetBytes(102)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadMessage100x8 reads 8-frame messages of 100-byte frames
// (cost per message; divide by 8 for per frame).
func BenchmarkReadMessage100x8(b *testing.B) {
	var s []byte
	for range 20 {
		for i := range 8 {
			s = append(s, dataFrame(i < 7, make([]byte, 100))...)
		}
	}
	nc := &loopConn{b: s}
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, defaultReadBufferSize), cfg: Config{}.withDefaults(), local: "PULL"}
	var m Message
	if err := c.ReadMessage(&m); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(8 * 102)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanStream100 measures the transport's passive scanner per
// frame, read the way zmq4 reads (2-byte header, then the body).
func BenchmarkScanStream100(b *testing.B) {
	var ctr counters
	cfg := countingConfig(nil, &ctr)
	nc := &loopConn{b: stream100()}
	g := newGuardConn(nc, bufio.NewReaderSize(nc, defaultReadBufferSize), &cfg, &ctr, true)
	g.rphase, g.wphase = rStream, wStream
	var hdr [2]byte
	body := make([]byte, 100)
	b.SetBytes(102)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := io.ReadFull(g, hdr[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(g, body[:hdr[1]]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseFrameHeader(b *testing.B) {
	for _, tc := range []struct {
		name string
		hdr  []byte
	}{{"short", []byte{0x01, 100}}, {"long", longHeader(0, 70000)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, ok, err := parseFrameHeader(tc.hdr, 1<<20); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkCheckGreeting is the cost of validating one whole greeting.
func BenchmarkCheckGreeting(b *testing.B) {
	g := greetingWith(3, 1, "NULL")
	b.ReportAllocs()
	for range b.N {
		if err := checkGreeting(g, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawRead100 is the baseline for BenchmarkReadMessage100: the same
// stream read through the same bufio.Reader with no checks at all (header,
// then the body copied out), so the difference is the guard's own cost.
func BenchmarkRawRead100(b *testing.B) {
	nc := &loopConn{b: stream100()}
	br := bufio.NewReaderSize(nc, defaultReadBufferSize)
	var hdr [2]byte
	body := make([]byte, 256)
	b.SetBytes(102)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, body[:hdr[1]]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListenerHandshake measures the whole accept path of a Listener:
// a guarded Dial over loopback, the listener's admission (pending-pool
// bookkeeping included) and handshake, Accept, and both closes. The
// deadlines are long: this measures cost, and a loaded machine can stall
// one loopback handshake past the 1 s default GreetingTimeout.
func BenchmarkListenerHandshake(b *testing.B) {
	ctx := context.Background()
	cfg := &Config{GreetingTimeout: 10 * time.Second, HandshakeTimeout: 10 * time.Second}
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	b.ReportAllocs()
	for b.Loop() {
		c, err := Dial(ctx, "tcp", addr, "PUSH", nil, cfg)
		if err != nil {
			b.Fatal(err)
		}
		s, err := l.Accept(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		s.Close()
	}
}
