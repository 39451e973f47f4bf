package zmtpguard

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// dialRaw connects to addr and writes a PUSH handshake by hand.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(handshakeAs("PUSH")); err != nil {
		t.Fatal(err)
	}
	return nc
}

func acceptConn(t *testing.T, result chan *Conn, errs chan error) *Conn {
	t.Helper()
	select {
	case c := <-result:
		t.Cleanup(func() { c.Close() })
		return c
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("handshake timed out")
	}
	return nil
}

// growBody is the deterministic body of message i: sizes from 1 to 5000
// bytes, so messages straddle every buffer boundary.
func growBody(i int) []byte {
	n := 1 + (i*7919)%5000
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i + j)
	}
	return b
}

// TestReadBufferGrows: a connection starts with a small read buffer and,
// under a stream that fills it, grows it up to ReadBufferSize without
// losing or reordering a byte across the switches (the bytes the old buffer
// held are carried over).
func TestReadBufferGrows(t *testing.T) {
	cfg := &Config{ReadBufferSize: 64 << 10}
	addr, result, errs := serveOne(t, "PULL", cfg)
	nc := dialRaw(t, addr)
	c := acceptConn(t, result, errs)
	if got := c.br.Size(); got != initialReadBuffer {
		t.Fatalf("initial read buffer %d bytes, want %d", got, initialReadBuffer)
	}
	const n = 2000
	werr := make(chan error, 1)
	go func() {
		var stream []byte
		for i := range n {
			stream = append(stream, dataFrame(false, growBody(i))...)
		}
		_, err := nc.Write(stream)
		werr <- err
	}()
	c.NetConn().SetReadDeadline(time.Now().Add(30 * time.Second))
	var m Message
	for i := range n {
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m.Frames) != 1 || !bytes.Equal(m.Frames[0], growBody(i)) {
			t.Fatalf("message %d corrupted (%d frames, %d bytes)", i, len(m.Frames), len(m.Frames[0]))
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if got := c.br.Size(); got != cfg.ReadBufferSize {
		t.Errorf("read buffer %d bytes after ~5 MB, want it grown to %d", got, cfg.ReadBufferSize)
	}
}

// TestReadBufferStaysSmall: a peer whose messages never fill the buffer
// keeps the small one.
func TestReadBufferStaysSmall(t *testing.T) {
	addr, result, errs := serveOne(t, "PULL", &Config{ReadBufferSize: 1 << 20})
	nc := dialRaw(t, addr)
	c := acceptConn(t, result, errs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	var m Message
	for i := range 50 {
		if _, err := nc.Write(dataFrame(false, growBody(i%3))); err != nil {
			t.Fatal(err)
		}
		if err := c.ReadMessage(&m); err != nil || ctx.Err() != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := c.br.Size(); got != initialReadBuffer {
		t.Errorf("read buffer %d bytes for a quiet peer, want %d", got, initialReadBuffer)
	}
}

// TestReadBufferSmallConfig: a ReadBufferSize below the initial size is the
// size used from the start, and never grows.
func TestReadBufferSmallConfig(t *testing.T) {
	addr, result, errs := serveOne(t, "PULL", &Config{ReadBufferSize: 1024})
	nc := dialRaw(t, addr)
	c := acceptConn(t, result, errs)
	if got := c.br.Size(); got != 1024 {
		t.Fatalf("read buffer %d bytes, want 1024", got)
	}
	go nc.Write(bytes.Repeat(dataFrame(false, make([]byte, 200)), 100))
	c.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	var m Message
	for i := range 100 {
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if got := c.br.Size(); got != 1024 {
		t.Errorf("read buffer %d bytes, want 1024", got)
	}
}

// trickleConn is a bytesConn that returns at most one byte per Read, so a
// Conn over it never holds a whole message in its buffer and ReadMessage
// always takes its general path.
type trickleConn struct{ bytesConn }

func (c *trickleConn) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return c.r.Read(p)
}

// readOutcome reads every message of a stream and renders what came out:
// each message's command and frames, then how it ended.
func readOutcome(c *Conn) []string {
	var out []string
	var m Message
	for {
		if err := c.ReadMessage(&m); err != nil {
			var v *Violation
			if errors.As(err, &v) {
				return append(out, "violation "+v.Reason.String()+": "+v.Detail)
			}
			return append(out, "error "+err.Error())
		}
		out = append(out, fmt.Sprintf("%q %q", m.Command, m.Frames))
	}
}

// FuzzReadMessagePaths is a differential check of ReadMessage's fast path
// (the whole message already buffered, copied out at once) against its
// general path (header by header, body by body): the same stream read
// with everything buffered and one byte at a time must give the same
// messages and end the same way, under tight limits.
func FuzzReadMessagePaths(f *testing.F) {
	for _, s := range streamSeeds() {
		f.Add(s, uint16(300), uint8(4))
	}
	for _, s := range innerCommandSeeds() {
		f.Add(s, uint16(300), uint8(4))
	}
	f.Add(bytes.Repeat(dataFrame(true, []byte("ab")), 5), uint16(1000), uint8(4))
	f.Add(append(longHeader(0, 5), "hello"...), uint16(5), uint8(1))
	f.Add(append(longHeader(0, 6), "hello!"...), uint16(5), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, maxSize uint16, maxFrames uint8) {
		cfg := Config{MaxMessageSize: int64(maxSize) + 1, MaxFrames: int(maxFrames)%16 + 1}.withDefaults()
		whole := newBytesConn(data)
		fast := &Conn{nc: whole, br: bufio.NewReaderSize(whole, 64<<10), cfg: cfg, local: "PULL"}
		slow := &Conn{nc: &trickleConn{*newBytesConn(data)}, cfg: cfg, local: "PULL"}
		slow.br = bufio.NewReaderSize(slow.nc, 16)
		a, b := readOutcome(fast), readOutcome(slow)
		if !slices.Equal(a, b) {
			t.Fatalf("buffered:\n%s\none byte at a time:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	})
}
