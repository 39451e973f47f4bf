package zmtpguard

import (
	"bufio"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// chunkConn is a bytesConn whose reads return at most n bytes, so a Conn
// over it often holds a message only in part.
type chunkConn struct {
	bytesConn
	n int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// tryReadOutcome reads a stream the way the socket's reader does: one
// ReadMessage, then TryReadMessage until it finds nothing whole, and so on.
// It renders what came out like readOutcome, and checks that a false
// TryReadMessage consumed nothing.
func tryReadOutcome(t *testing.T, c *Conn) []string {
	var out []string
	var m Message
	end := func(err error) []string {
		var v *Violation
		if errors.As(err, &v) {
			return append(out, "violation "+v.Reason.String()+": "+v.Detail)
		}
		return append(out, "error "+err.Error())
	}
	for {
		if err := c.ReadMessage(&m); err != nil {
			return end(err)
		}
		out = append(out, fmt.Sprintf("%q %q", m.Command, m.Frames))
		for {
			before := c.br.Buffered()
			got, err := c.TryReadMessage(&m)
			if err != nil {
				return end(err)
			}
			if !got {
				if c.br.Buffered() != before || len(m.Frames) != 0 || m.Size() != 0 {
					t.Fatalf("TryReadMessage found nothing but consumed %d bytes or left %d frames", before-c.br.Buffered(), len(m.Frames))
				}
				break
			}
			out = append(out, fmt.Sprintf("%q %q", m.Command, m.Frames))
		}
	}
}

// FuzzTryReadMessage is a differential check of TryReadMessage: a stream
// read by ReadMessage alone and read the socket reader's way (ReadMessage,
// then TryReadMessage while whole messages are buffered), arriving in
// chunks of a fuzzed size, must give the same messages and end the same
// way (the same violation), under tight limits.
func FuzzTryReadMessage(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(s, uint16(300), uint8(4), uint8(7))
	}
	for _, s := range innerCommandSeeds() {
		f.Add(s, uint16(300), uint8(4), uint8(7))
	}
	f.Add(slices.Concat(dataFrame(false, []byte("a")), dataFrame(true, []byte("bc")), dataFrame(false, []byte("d")),
		commandFrame(cmdPing, []byte{0, 1})), uint16(1000), uint8(4), uint8(3))
	f.Add(slices.Concat(dataFrame(false, []byte("ok")), append(longHeader(0, 6), "hello!"...)), uint16(5), uint8(1), uint8(64))
	f.Add(slices.Concat(dataFrame(false, []byte("ok")), dataFrame(true, []byte("1")), dataFrame(true, []byte("2")),
		dataFrame(false, []byte("3"))), uint16(100), uint8(2), uint8(64))
	f.Fuzz(func(t *testing.T, data []byte, maxSize uint16, maxFrames uint8, chunk uint8) {
		cfg := Config{MaxMessageSize: int64(maxSize) + 1, MaxFrames: int(maxFrames)%16 + 1}.withDefaults()
		whole := newBytesConn(data)
		plain := &Conn{nc: whole, br: bufio.NewReaderSize(whole, 64<<10), cfg: cfg, local: "PULL"}
		cc := &chunkConn{*newBytesConn(data), int(chunk)%64 + 1}
		try := &Conn{nc: cc, br: bufio.NewReaderSize(cc, 64<<10), cfg: cfg, local: "PULL"}
		a, b := readOutcome(plain), tryReadOutcome(t, try)
		if !slices.Equal(a, b) {
			t.Fatalf("ReadMessage:\n%s\nTryReadMessage:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	})
}

// TestTryReadMessage: a whole data message is read, a partial one is left
// alone, a command comes through, and a refused message is the violation
// ReadMessage gives.
func TestTryReadMessage(t *testing.T) {
	stream := slices.Concat(dataFrame(false, []byte("one")), commandFrame(cmdPing, []byte{0, 1}),
		dataFrame(true, []byte("a")), dataFrame(false, []byte("b")))
	nc := newBytesConn(stream)
	c := &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), cfg: Config{}.withDefaults(), local: "PULL"}
	var m Message
	if got, err := c.TryReadMessage(&m); got || err != nil {
		t.Fatalf("empty buffer: got %v, %v", got, err)
	}
	if err := c.ReadMessage(&m); err != nil || string(m.Frames[0]) != "one" {
		t.Fatalf("ReadMessage = %v %q", err, m.Frames)
	}
	if got, err := c.TryReadMessage(&m); !got || err != nil || m.Command != cmdPing {
		t.Fatalf("PING: got %v, %v, %q", got, err, m.Command)
	}
	if got, err := c.TryReadMessage(&m); !got || err != nil || len(m.Frames) != 2 || string(m.Frames[1]) != "b" {
		t.Fatalf("multipart: got %v, %v, %q", got, err, m.Frames)
	}
	if got, err := c.TryReadMessage(&m); got || err != nil {
		t.Fatalf("end of buffer: got %v, %v", got, err)
	}

	bad := slices.Concat(dataFrame(false, []byte("ok")), []byte{0x20, 1, 'x'}) // reserved flag bit
	nc = newBytesConn(bad)
	c = &Conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), cfg: Config{}.withDefaults(), local: "PULL"}
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	got, err := c.TryReadMessage(&m)
	var v *Violation
	if !got || !errors.As(err, &v) {
		t.Fatalf("reserved bits: got %v, %v, want a violation", got, err)
	}
}

// BenchmarkTryReadMessage100 is BenchmarkReadMessage100 the socket reader's
// way: every message after the first of a read comes from TryReadMessage.
func BenchmarkTryReadMessage100(b *testing.B) {
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
		got, err := c.TryReadMessage(&m)
		if err != nil {
			b.Fatal(err)
		}
		if !got {
			if err := c.ReadMessage(&m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkMessageBufferedThenRead100 is the pattern TryReadMessage
// replaces, for comparison with BenchmarkTryReadMessage100: MessageBuffered
// to decide, then ReadMessage (two walks of each message's headers).
func BenchmarkMessageBufferedThenRead100(b *testing.B) {
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
		_ = c.messageBuffered()
		if err := c.ReadMessage(&m); err != nil {
			b.Fatal(err)
		}
	}
}
