package handshake

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

// BenchmarkHandshakeListener measures handshakes per second served by one
// listener to 16 concurrent Go clients, each on its own persistent REQ
// socket (vLLM opens a fresh REQ per handshake; the connection cost is left
// out here to measure the listener). V3 requests, 573-byte payloads, on
// loopback. Allocations are the whole process's: the 16 clients' and the
// listener's (see BenchmarkListenerHandle for the listener alone).
func BenchmarkHandshakeListener(b *testing.B) {
	const clients = 16
	l := startListener(b, ListenerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	socks := make([]*socket.Socket, clients)
	bodies := make([][]byte, clients)
	for i := range socks {
		s, err := socket.New("REQ", socket.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.Dial(l.Endpoint()); err != nil {
			b.Fatal(err)
		}
		bodies[i] = appendRequest(nil, Request{Variant: V3, TP: i % 2})
		// Warm up: one exchange connects the socket.
		if err := s.Send(ctx, bodies[i]); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Recv(ctx); err != nil {
			b.Fatal(err)
		}
		socks[i] = s
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := socks[i]
			for next.Add(1) <= int64(b.N) {
				if err := s.Send(ctx, bodies[i]); err != nil {
					errs <- err
					return
				}
				m, err := s.Recv(ctx)
				if err != nil {
					errs <- err
					return
				}
				if len(m.Frames) != 2 {
					errs <- errShape
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "handshakes/s")
}

var errShape = &fetchError{Kind: ErrBadReplyShape, Detail: "benchmark reply"}

// BenchmarkListenerHandle measures the listener's per-request work after
// the receive: envelope and request parse, lookup, reply build and the hand
// off to a Send that does nothing. It allocates nothing.
func BenchmarkListenerHandle(b *testing.B) {
	var s nopSender
	l := newDetachedListener(b, chanReceiver(nil), &s, ListenerConfig{})
	var req Request
	frames := [][]byte{{0, 0, 0, 0, 1}, {}, appendRequest(nil, Request{Variant: V3, TP: 1})}
	d, err := deliveryFor(b, frames, &req)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := decodeRequest(d.Envelope.Body, &req); err != nil {
			b.Fatal(err)
		}
		if err := l.handle(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

// repeatReceiver returns the same message n times, then ends the loop by
// cancelling its context.
type repeatReceiver struct {
	msg    socket.Msg
	n      int
	cancel context.CancelFunc
}

func (r *repeatReceiver) Recv(ctx context.Context) (socket.Msg, error) {
	if r.n == 0 {
		r.cancel()
		return socket.Msg{}, ctx.Err()
	}
	r.n--
	return r.msg, nil
}

// BenchmarkListenerLoop runs the listener's whole receive loop (SafeLoop:
// envelope, decode, handler, counters) over a receiver that returns the same
// V3 request b.N times, replying into a Send that does nothing: the
// listener's cost per request without the network.
func BenchmarkListenerLoop(b *testing.B) {
	for _, v := range []Variant{V1, V2, V3} {
		b.Run(v.String(), func(b *testing.B) {
			var s nopSender
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := &repeatReceiver{cancel: cancel, n: b.N, msg: socket.Msg{Frames: [][]byte{
				{0, 0, 0, 0, 1}, {}, appendRequest(nil, Request{Variant: v, TP: 1})}}}
			l := newDetachedListener(b, r, &s, ListenerConfig{})
			b.ReportAllocs()
			b.ResetTimer()
			if err := l.Serve(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if st := l.Stats(); totalServed(st) != uint64(b.N) {
				b.Fatalf("served %d of %d", totalServed(st), b.N)
			}
			runtime.KeepAlive(s)
		})
	}
}
