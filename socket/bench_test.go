package socket

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// preEncodedSender connects to addr as a ZMTP PUSH (guarded handshake), then
// writes n single-frame messages of size bytes, pre-encoded, in chunks of
// about 64 KiB, so the receiver is the bottleneck. It returns a channel that
// yields the sender's error (nil on success) once done.
func preEncodedSender(ctx context.Context, addr string, n, size int) <-chan error {
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			c, err := zmtpguard.Handshake(ctx, nc, "PUSH", nil, nil)
			if err != nil {
				return err
			}
			defer c.Close()
			stop := context.AfterFunc(ctx, func() { c.Close() })
			defer stop()
			msg := make([]byte, 0, size+9)
			if size > 255 {
				panic("preEncodedSender: size > 255")
			}
			msg = append(msg, 0, byte(size))
			for i := 0; i < size; i++ {
				msg = append(msg, byte('a'+i%26))
			}
			per := max(1, (64<<10)/len(msg))
			chunk := make([]byte, 0, per*len(msg))
			for i := 0; i < per; i++ {
				chunk = append(chunk, msg...)
			}
			w := c.NetConn()
			for n > 0 {
				k := min(n, per)
				if _, err := w.Write(chunk[:k*len(msg)]); err != nil {
					return err
				}
				n -= k
			}
			// Keep the connection open until the receiver is done.
			<-ctx.Done()
			return nil
		}()
	}()
	return errc
}

func BenchmarkPullRecv100(b *testing.B) {
	b.ReportAllocs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pull, err := NewPull(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	addr := strings.TrimPrefix(pull.Endpoint(), "tcp://")
	errc := preEncodedSender(ctx, addr, b.N+1, 100)
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	// The first message completes the connection set-up.
	if _, err := pull.Recv(rctx); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := pull.Recv(rctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(m.Frames) != 1 || len(m.Frames[0]) != 100 {
			b.Fatalf("bad message %d", len(m.Frames))
		}
	}
	b.StopTimer()
	cancel()
	if err := <-errc; err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
}

func BenchmarkZmq4PullRecv100(b *testing.B) {
	b.ReportAllocs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	errc := preEncodedSender(ctx, pull.Addr().String(), b.N+1, 100)
	if _, err := pull.Recv(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, err := pull.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if len(m.Frames) != 1 || len(m.Frames[0]) != 100 {
			b.Fatalf("bad message %d", len(m.Frames))
		}
	}
	b.StopTimer()
	cancel()
	<-errc
}

func BenchmarkRouterReqRoundTrip(b *testing.B) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	router, err := NewRouter(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer router.Close()
	if err := router.Bind("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	req, err := NewReq(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer req.Close()
	if err := req.Dial(router.Endpoint()); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 100)
	id := make([]byte, 0, 256)
	b.ResetTimer()
	for i := -1; i < b.N; i++ {
		if i == 0 {
			b.ResetTimer() // the first round trip waited for the connection
		}
		if err := req.Send(ctx, body); err != nil {
			b.Fatal(err)
		}
		m, err := router.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		id = append(id[:0], m.Frames[0]...)
		if err := router.Send(ctx, id, nil, body); err != nil {
			b.Fatal(err)
		}
		if _, err := req.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPushSend100: our PUSH sending 100-byte messages to a Go sink that
// completed a ZMTP handshake and then discards bytes; the timer stops when
// the sink has received every byte.
func BenchmarkPushSend100(b *testing.B) {
	b.ReportAllocs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	want := int64(b.N) * 102
	got := make(chan int64, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		c, err := zmtpguard.Handshake(ctx, nc, "PULL", nil, nil)
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		buf := make([]byte, 256<<10)
		var n int64
		for n < want {
			k, err := c.NetConn().Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		got <- n
	}()
	push, err := NewPush(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer push.Close()
	push.Dial("tcp://" + ln.Addr().String())
	waitPeers(b, ctx, push, 1)
	body := make([]byte, 100)
	b.SetBytes(100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := push.Send(ctx, body); err != nil {
			b.Fatal(err)
		}
	}
	if n := <-got; n != want {
		b.Fatalf("sink got %d bytes, want %d", n, want)
	}
}

// BenchmarkIdlePeers measures what one idle connected peer costs a PULL
// socket: heap in use and goroutine stacks, per peer, after 200 raw TCP
// peers have completed the ZMTP handshake (greeting and READY written by
// hand, so the peers themselves cost next to nothing in this process) and
// then gone silent. The per-op time is meaningless; read the per-peer
// metrics.
func BenchmarkIdlePeers(b *testing.B) {
	const peers = 200
	b.ReportAllocs()
	g := zmtpwire.LocalGreeting()
	hello := append(g[:], readyCommand("PUSH")...)
	for range b.N {
		func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pull, err := NewPull(DefaultOptions())
			if err != nil {
				b.Fatal(err)
			}
			defer pull.Close()
			if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
				b.Fatal(err)
			}
			addr := strings.TrimPrefix(pull.Endpoint(), "tcp://")
			before := idleMem()
			conns := make([]net.Conn, 0, peers)
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			var d net.Dialer
			for range peers {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
				if _, err := c.Write(hello); err != nil {
					b.Fatal(err)
				}
			}
			for pull.Stats().Peers < peers {
				if ctx.Err() != nil {
					b.Fatal("peers did not connect")
				}
				time.Sleep(5 * time.Millisecond)
			}
			after := idleMem()
			b.ReportMetric(float64(after.heap-before.heap)/peers/1024, "heap-KiB/peer")
			b.ReportMetric(float64(after.stack-before.stack)/peers/1024, "stack-KiB/peer")
		}()
	}
}

type memSnap struct{ heap, stack uint64 }

// idleMem returns the live heap and the goroutine stacks in use, after a GC.
func idleMem() memSnap {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memSnap{heap: m.HeapAlloc, stack: m.StackInuse}
}

// readyCommand is the READY command frame of a socket of type t with no
// identity.
func readyCommand(t string) []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = append(body, 0, 0, 0, byte(len(t)))
	body = append(body, t...)
	return append([]byte{zmtpwire.FlagCommand, byte(len(body))}, body...)
}

// BenchmarkRecvBuffered measures Recv alone on a PULL socket whose batches
// are already queued (no network, no reader goroutine): the per-message cost
// a receive loop pays on top of decoding when messages arrive in bursts.
func BenchmarkRecvBuffered(b *testing.B) {
	s, err := NewPull(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := &peerConn{s: s, info: &Peer{}}
	body := make([]byte, 100)
	fill := func() {
		bt := s.getBatch(p)
		for i := range bt.slots {
			bt.slots[i].out = append(bt.slots[i].out[:0], body)
		}
		bt.n = len(bt.slots)
		s.inbox <- bt
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%batchMsgs == 0 {
			fill()
		}
		if _, err := s.Recv(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatchCycle1 takes a batch, fills one slot and recycles it: what
// a ROUTER or REQ peer, whose batches hold one message each, pays per
// message for the batch itself.
func BenchmarkBatchCycle1(b *testing.B) {
	s, err := NewRouter(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := &peerConn{s: s, info: &Peer{}}
	body := make([]byte, 100)
	b.ReportAllocs()
	for range b.N {
		bt := s.getBatch(p)
		bt.slots[0].out = append(bt.slots[0].out[:0], body)
		bt.n = 1
		s.putBatch(bt)
	}
}
