package zmtpguard

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// burst returns the stream of messages first..first+n-1 (growBody).
func burst(first, n int) []byte {
	var b []byte
	for i := first; i < first+n; i++ {
		b = append(b, dataFrame(false, growBody(i))...)
	}
	return b
}

// idleReader reads c in the background, checking every message against
// growBody in order, and records the largest read buffer it saw.
type idleReader struct {
	c       *Conn
	got     atomic.Int64
	maxSize atomic.Int64
	err     chan error
}

func readInBackground(t *testing.T, c *Conn) *idleReader {
	r := &idleReader{c: c, err: make(chan error, 1)}
	go func() {
		var m Message
		for i := 0; ; i++ {
			if err := c.ReadMessage(&m); err != nil {
				r.err <- err
				return
			}
			if len(m.Frames) != 1 || !bytes.Equal(m.Frames[0], growBody(i)) {
				r.err <- errors18("message corrupted", i)
				return
			}
			r.maxSize.Store(max(r.maxSize.Load(), int64(c.br.Size())))
			r.got.Add(1)
		}
	}()
	t.Cleanup(func() {
		c.Close()
		select {
		case <-r.err:
		case <-time.After(10 * time.Second):
			t.Error("reader did not stop")
		}
	})
	return r
}

type msgErr struct {
	what string
	i    int
}

func (e *msgErr) Error() string { return e.what + " at message " + itoa(e.i) }

func errors18(what string, i int) error { return &msgErr{what, i} }

func (r *idleReader) waitGot(t *testing.T, n int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for r.got.Load() < n {
		select {
		case err := <-r.err:
			t.Fatalf("reader stopped after %d messages: %v", r.got.Load(), err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages read within %v", r.got.Load(), n, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadBufferShrinksWhenIdle: a peer's burst grows the read buffer to
// ReadBufferSize; once it goes quiet the buffer goes back to the initial
// size (before, it stayed grown for as long as the connection was open).
// The stream survives the switch, and a second burst grows it again.
func TestReadBufferShrinksWhenIdle(t *testing.T) {
	cfg := &Config{ReadBufferSize: 256 << 10}
	addr, result, errs := serveOne(t, "PULL", cfg)
	nc := dialRaw(t, addr)
	c := acceptConn(t, result, errs)
	r := readInBackground(t, c)
	const n = 2000 // about 5 MB
	if _, err := nc.Write(burst(0, n)); err != nil {
		t.Fatal(err)
	}
	r.waitGot(t, n, 30*time.Second)
	if got := r.maxSize.Load(); got != int64(cfg.ReadBufferSize) {
		t.Fatalf("read buffer grew to %d bytes under the burst, want %d", got, cfg.ReadBufferSize)
	}
	poll.WaitFor(t, 20*time.Second, "the idle connection's read buffer to shrink", func() bool {
		return c.readBufferSize() == initialReadBuffer
	})
	if _, shrinks := c.readIdleCounts(); shrinks == 0 {
		t.Fatal("buffer small again without a shrink")
	}
	// The stream goes on across the switch, and grows the buffer again.
	if _, err := nc.Write(burst(n, n)); err != nil {
		t.Fatal(err)
	}
	r.waitGot(t, 2*n, 30*time.Second)
	poll.WaitFor(t, 20*time.Second, "the read buffer to shrink after the second burst", func() bool {
		_, shrinks := c.readIdleCounts()
		return shrinks >= 2 && c.readBufferSize() == initialReadBuffer
	})
}

// TestReadBufferKeptWhileBusy: a peer that keeps sending (pauses of a few
// milliseconds, far below readIdleAfter) keeps its grown buffer, although
// the reader catches up and waits between its writes.
func TestReadBufferKeptWhileBusy(t *testing.T) {
	cfg := &Config{ReadBufferSize: 256 << 10}
	addr, result, errs := serveOne(t, "PULL", cfg)
	nc := dialRaw(t, addr)
	c := acceptConn(t, result, errs)
	r := readInBackground(t, c)
	const chunk = 200
	sent := 0
	start := time.Now()
	for time.Since(start) < 3*readIdleAfter {
		nc.SetWriteDeadline(time.Now().Add(20 * time.Second))
		if _, err := nc.Write(burst(sent, chunk)); err != nil {
			t.Fatal(err)
		}
		sent += chunk
		time.Sleep(5 * time.Millisecond)
	}
	r.waitGot(t, int64(sent), 30*time.Second)
	parks, shrinks := c.readIdleCounts()
	if parks == 0 {
		t.Fatal("the reader never waited on an empty grown buffer: the test did not exercise the idle wait")
	}
	if shrinks != 0 {
		t.Fatalf("a busy connection's buffer was given back %d times (%d idle waits)", shrinks, parks)
	}
	if got := r.maxSize.Load(); got != int64(cfg.ReadBufferSize) {
		t.Fatalf("read buffer %d bytes under steady traffic, want %d", got, cfg.ReadBufferSize)
	}
	t.Logf("%d messages, %d idle waits, no shrink", sent, parks)
}

// TestIdleReadBuffersReleased: 500 connections each send a burst that
// grows their read buffer to 256 KiB, then stay open and silent. The heap
// in use (after a collection) must drop by most of the 500 × 256 KiB = 125
// MiB they held (before, it stayed: every buffer was pinned by its
// connection's blocked read).
func TestIdleReadBuffersReleased(t *testing.T) {
	const n = 500
	const size = 256 << 10
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", &Config{ReadBufferSize: size, MaxConns: 2 * n, MaxPendingHandshakes: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []*Conn
	var wg sync.WaitGroup
	var got atomic.Int64
	defer func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				var m Message
				for c.ReadMessage(&m) == nil {
					got.Add(1)
				}
			}()
		}
	}()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	// The stream: 48 messages of about 8 KiB, 384 KiB in all, enough for
	// every buffer to reach 256 KiB (growth needs reads filling half of it:
	// 4, 16 and 64 KiB, then 256).
	const perPeer = 48
	stream := bytes.Repeat(dataFrame(false, make([]byte, 8000)), perPeer)
	peers := make([]net.Conn, 0, n)
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	var wwg sync.WaitGroup
	defer wwg.Wait()
	for range n {
		p, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, p)
		p.SetWriteDeadline(time.Now().Add(60 * time.Second))
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			if _, err := p.Write(handshakeAs("PUSH")); err == nil {
				p.Write(stream)
			}
		}()
	}
	var peak uint64
	var ms runtime.MemStats
	deadline := time.Now().Add(60 * time.Second)
	for got.Load() < perPeer*n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages read", got.Load(), perPeer*n)
		}
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	grown := 0
	for _, c := range conns {
		if _, shrinks := c.readIdleCounts(); c.readBufferSize() == size || shrinks > 0 {
			grown++
		}
	}
	mu.Unlock()
	if grown < n*9/10 {
		t.Fatalf("only %d of %d read buffers grew to %d bytes: the test does not measure what it should", grown, n, size)
	}
	// Grown, the buffers alone are 125 MiB over the baseline; idle, each
	// connection keeps a 4 KiB buffer, its 8 KiB Message and a few small
	// objects: well under 40 MiB for all of them.
	limit := base.HeapInuse + 40<<20
	small := 0
	deadline = time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		small = 0
		for _, c := range conns {
			if c.readBufferSize() == initialReadBuffer {
				small++
			}
		}
		mu.Unlock()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse <= limit && small == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the peers went idle: %d of %d read buffers back to %d bytes, heap in use %d MiB (baseline %d MiB, peak %d MiB while they sent), want at most %d MiB",
				small, n, initialReadBuffer, ms.HeapInuse>>20, base.HeapInuse>>20, peak>>20, limit>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("heap in use: baseline %d MiB, peak %d MiB while %d buffers grew, %d MiB once idle (%d of %d buffers back to %d bytes)",
		base.HeapInuse>>20, peak>>20, grown, ms.HeapInuse>>20, small, n, initialReadBuffer)
}

// writeBufferBytes is the write buffer and CURVE write scratch c keeps.
func writeBufferBytes(c *Conn) int {
	n := 0
	if c.bw != nil {
		n = c.bw.Size()
	}
	if c.cz != nil {
		n += cap(c.cz.wplain) + cap(c.cz.wbox)
	}
	return n
}

// TestWriteBufferShrinks: a burst of writes grows the write buffer; a few
// Flushes of heartbeat-sized writes give it back; another burst grows it
// again.
func TestWriteBufferShrinks(t *testing.T) {
	cfg := &Config{WriteBufferSize: 64 << 10}
	addr, result, errs := serveOne(t, "PUSH", cfg)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(handshakeAs("PULL")); err != nil {
		t.Fatal(err)
	}
	c := acceptConn(t, result, errs)
	go func() { // the peer reads everything
		b := make([]byte, 64<<10)
		for {
			if _, err := nc.Read(b); err != nil {
				return
			}
		}
	}()
	c.NetConn().SetWriteDeadline(time.Now().Add(20 * time.Second))
	grow := func() {
		for range 4 {
			for range 40 {
				if err := c.WriteMessage(make([]byte, 2000)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.bw.Size(); got != cfg.WriteBufferSize {
			t.Fatalf("write buffer %d bytes after bursts, want %d", got, cfg.WriteBufferSize)
		}
	}
	small := func() {
		for i := range writeSmallFlushes {
			if got := c.bw.Size(); got != cfg.WriteBufferSize {
				t.Fatalf("write buffer %d bytes after %d small Flushes, want it kept (%d)", got, i, cfg.WriteBufferSize)
			}
			if err := c.WriteCommand(cmdPing, []byte("\x00\x00")); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.bw.Size(); got != initialWriteBuffer {
			t.Fatalf("write buffer %d bytes after %d heartbeat Flushes, want %d", got, writeSmallFlushes, initialWriteBuffer)
		}
	}
	grow()
	small()
	grow()
	small()
}

// TestCurveBuffersShrink: under CURVE, a large message grows the reader's
// scratch buffer and the writer's box buffers; idle, the reader gives its
// buffers back, and small Flushes the writer's.
func TestCurveBuffersShrink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := newCurvePair(t, ctx, "PULL", nil)
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := p.l.Accept(ctx)
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cli, err := Dial(ctx, "tcp", p.l.Addr().String(), "PUSH", nil, p.clientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	defer srv.Close()
	got := make(chan int, 16)
	go func() {
		var m Message
		for srv.ReadMessage(&m) == nil {
			got <- m.Size()
		}
		close(got)
	}()
	big := bytes.Repeat([]byte("z"), 200<<10) // larger than the 16 KiB read buffer
	send := func(b []byte) {
		t.Helper()
		if err := cli.WriteMessage(b); err != nil {
			t.Fatal(err)
		}
		if err := cli.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-got:
			if n != len(b) {
				t.Fatalf("read %d bytes, want %d", n, len(b))
			}
		case <-time.After(20 * time.Second):
			t.Fatal("message not read within 20 s")
		}
	}
	send(big)
	small := min(initialReadBuffer, defaultReadBufferSize)
	poll.WaitFor(t, 20*time.Second, "the idle CURVE reader's buffers to shrink", func() bool {
		return srv.idleReadBytes() == small
	})
	if w := writeBufferBytes(cli); w < len(big) {
		t.Fatalf("writer keeps %d bytes after a %d-byte message: the test does not exercise the write scratch", w, len(big))
	}
	for range writeSmallFlushes {
		send([]byte("tiny"))
	}
	if w := writeBufferBytes(cli); w > 3*initialWriteBuffer {
		t.Fatalf("writer keeps %d bytes after %d small Flushes", w, writeSmallFlushes)
	}
	send(big) // still works after both shrank
}
