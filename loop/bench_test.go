package loop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
	"github.com/zmqguard/zmqguard/socket"
)

// The benchmarks compare a SafeLoop with the loop one writes by hand on the
// same Receiver and the same decoder (msgpscan.DecodeMsgp into a reused,
// Reset value), on the 101-byte vLLM stats message. See BENCHMARKS.md.

var errBenchDone = errors.New("bench done")

var sink int64

// handLoop is the hand-written loop: Recv, frame-count check, reset,
// guarded decode, use the value. It receives with a cancellable context, as
// any loop that can be stopped does (and as SafeLoop's Run does): a
// receiver's select on a real Done channel costs a few nanoseconds more
// than on context.Background's nil one.
func handLoop(b *testing.B, r Receiver, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := decodeguard.Limits{}
	var v vllmwire.Message
	for range n {
		m, err := r.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(m.Frames) != 1 {
			continue
		}
		v.Reset()
		if err := msgpscan.DecodeMsgp(m.Frames[0], &lim, &v); err != nil {
			continue
		}
		sink += v.SchedulerStats.NumRunningReqs
	}
}

// safeRun runs a SafeLoop until its handler has seen n messages.
func safeRun(b *testing.B, r Receiver, n int) *Loop[vllmwire.Message] {
	seen := 0
	l := newStatsLoop(b, r, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		sink += d.Value.SchedulerStats.NumRunningReqs
		if seen++; seen == n {
			return errBenchDone
		}
		return nil
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := l.Run(ctx); !errors.Is(err, errBenchDone) {
		b.Fatal(err)
	}
	return l
}

func fakeStats() *repeatRecv {
	return &repeatRecv{msg: socket.Msg{Frames: [][]byte{[]byte(vllmwire.StatsVector)}}}
}

// BenchmarkFake measures pure loop overhead: the receiver hands back the
// same message without any I/O.
func BenchmarkFake(b *testing.B) {
	b.Run("hand", func(b *testing.B) {
		r := fakeStats()
		b.ReportAllocs()
		b.SetBytes(int64(len(vllmwire.StatsVector)))
		b.ResetTimer()
		handLoop(b, r, b.N)
	})
	b.Run("safeloop", func(b *testing.B) {
		r := fakeStats()
		b.ReportAllocs()
		b.SetBytes(int64(len(vllmwire.StatsVector)))
		b.ResetTimer()
		safeRun(b, r, b.N)
	})
	b.Run("safeloop-next", func(b *testing.B) {
		l := newStatsLoop(b, fakeStats(), nil, nil)
		ctx := context.Background()
		b.ReportAllocs()
		b.SetBytes(int64(len(vllmwire.StatsVector)))
		b.ResetTimer()
		for range b.N {
			d, err := l.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sink += d.Value.SchedulerStats.NumRunningReqs
		}
	})
	b.Run("safeloop-deliver", func(b *testing.B) {
		l := newStatsLoop(b, fakeStats(), nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan Delivery[vllmwire.Message])
		done := make(chan error, 1)
		b.ReportAllocs()
		b.SetBytes(int64(len(vllmwire.StatsVector)))
		b.ResetTimer()
		go func() { done <- l.Deliver(ctx, ch) }()
		for range b.N {
			d := <-ch
			sink += d.Value.SchedulerStats.NumRunningReqs
			d.Done()
		}
		b.StopTimer()
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("safeloop-junk", func(b *testing.B) {
		// Drop path: every message is an array32 length bomb, counted and
		// rate-limit logged (to a discarding logger).
		r := &countRecv{msg: socket.Msg{Frames: [][]byte{{0xdd, 0xff, 0xff, 0xff, 0xff}}}, n: b.N}
		l := newStatsLoop(b, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil }, nil)
		b.ReportAllocs()
		b.ResetTimer()
		if err := l.Run(context.Background()); !errors.Is(err, errReceiverClosed) {
			b.Fatal(err)
		}
		if l.Stats().Dropped[decodeguard.ReasonDecode] != uint64(b.N) {
			b.Fatal(l.Stats())
		}
	})
}

// countRecv returns msg n times, then reports closed.
type countRecv struct {
	msg socket.Msg
	n   int
}

func (c *countRecv) Recv(context.Context) (socket.Msg, error) {
	if c.n == 0 {
		return socket.Msg{}, errReceiverClosed
	}
	c.n--
	return c.msg, nil
}

// BenchmarkZMQ4 runs both loops over a real zmq4 PUSH -> PULL on 127.0.0.1
// (through socket.FromZMQ4); a producer goroutine sends b.N stats messages.
func BenchmarkZMQ4(b *testing.B) {
	run := func(b *testing.B, consume func(r Receiver, n int)) {
		ctx := context.Background()
		pull := zmq4.NewPull(ctx)
		if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		push := zmq4.NewPush(ctx)
		if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
			b.Fatal(err)
		}
		rcv := socket.FromZMQ4(pull)
		frame := []byte(vllmwire.StatsVector)
		b.ReportAllocs()
		b.SetBytes(int64(len(frame)))
		b.ResetTimer()
		sent := make(chan error, 1)
		go func() {
			for range b.N {
				if err := push.Send(zmq4.NewMsg(frame)); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		consume(rcv, b.N)
		b.StopTimer()
		if err := <-sent; err != nil {
			b.Fatal(err)
		}
		_ = rcv.Close()
		_ = push.Close()
	}
	b.Run("hand", func(b *testing.B) {
		run(b, func(r Receiver, n int) { handLoop(b, r, n) })
	})
	b.Run("safeloop", func(b *testing.B) {
		run(b, func(r Receiver, n int) { safeRun(b, r, n) })
	})
}

// limitRecv passes n messages through from r, then reports closed, so
// that both loops stop the same way.
type limitRecv struct {
	r Receiver
	n int
}

func (l *limitRecv) Recv(ctx context.Context) (socket.Msg, error) {
	if l.n == 0 {
		return socket.Msg{}, errReceiverClosed
	}
	l.n--
	return l.r.Recv(ctx)
}

// handUntilClosed is handLoop that stops at the receiver's end.
func handUntilClosed(ctx context.Context, r Receiver) {
	lim := decodeguard.Limits{}
	var v vllmwire.Message
	for {
		m, err := r.Recv(ctx)
		if err != nil {
			return
		}
		if len(m.Frames) != 1 {
			continue
		}
		v.Reset()
		if err := msgpscan.DecodeMsgp(m.Frames[0], &lim, &v); err != nil {
			continue
		}
		sink += v.SchedulerStats.NumRunningReqs
	}
}

// ratioBench alternates the hand loop and a SafeLoop over chunks of
// messages from the same receiver, b.N chunks each, and reports the
// per-message time of the fastest chunk of each and their throughput ratio
// (hand time / SafeLoop time; 1.0 means no overhead). Interleaving, and
// taking each side's best chunk, keeps a busy machine's noise out of the
// ratio; "mean-ratio" is the same ratio over all chunks. Both loops stop
// when a limitRecv around the receiver reports closed, and both do the same
// work per message.
func ratioBench(b *testing.B, r Receiver, chunk int) {
	lr := &limitRecv{r: r}
	l := newStatsLoop(b, lr, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		sink += d.Value.SchedulerStats.NumRunningReqs
		return nil
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hand, safe time.Duration
	bestHand, bestSafe := time.Duration(1<<62), time.Duration(1<<62)
	b.ResetTimer()
	for i := range b.N {
		for j := range 2 {
			lr.n = chunk
			t0 := time.Now()
			if (i+j)%2 == 0 {
				handUntilClosed(ctx, lr)
				d := time.Since(t0)
				hand += d
				bestHand = min(bestHand, d)
			} else {
				if err := l.Run(ctx); !errors.Is(err, errReceiverClosed) {
					b.Fatal(err)
				}
				d := time.Since(t0)
				safe += d
				bestSafe = min(bestSafe, d)
			}
		}
	}
	b.ReportMetric(float64(bestHand.Nanoseconds())/float64(chunk), "hand-ns/msg")
	b.ReportMetric(float64(bestSafe.Nanoseconds())/float64(chunk), "safeloop-ns/msg")
	b.ReportMetric(float64(bestHand)/float64(bestSafe), "ratio")
	b.ReportMetric(float64(hand)/float64(safe), "mean-ratio")
}

// BenchmarkRatioFake is ratioBench on the I/O-free receiver.
func BenchmarkRatioFake(b *testing.B) {
	ratioBench(b, fakeStats(), 5000)
}

// BenchmarkRatioZMQ4 is ratioBench over one zmq4 PUSH -> PULL pair on
// 127.0.0.1, both loops reading the same PULL in turn.
func BenchmarkRatioZMQ4(b *testing.B) {
	const chunk = 500
	ctx := context.Background()
	pull := zmq4.NewPull(ctx)
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	push := zmq4.NewPush(ctx)
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
		b.Fatal(err)
	}
	rcv := socket.FromZMQ4(pull)
	frame := []byte(vllmwire.StatsVector)
	sent := make(chan error, 1)
	go func() {
		for range 2 * b.N * chunk {
			if err := push.Send(zmq4.NewMsg(frame)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	ratioBench(b, rcv, chunk)
	b.StopTimer()
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
	_ = rcv.Close()
	_ = push.Close()
}

// socketPair returns a zmqguard PULL bound on 127.0.0.1 and a PUSH dialled
// to it, and a function that closes both.
func socketPair(b *testing.B) (pull, push *socket.Socket, closeAll func()) {
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	push, err = socket.New("PUSH", socket.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	if err := push.Dial(pull.Endpoint()); err != nil {
		b.Fatal(err)
	}
	return pull, push, func() { push.Close(); pull.Close() }
}

// produce sends n stats messages on push from a new goroutine; the returned
// channel yields the outcome.
func produce(push *socket.Socket, n int) <-chan error {
	sent := make(chan error, 1)
	frame := []byte(vllmwire.StatsVector)
	go func() {
		ctx := context.Background()
		for range n {
			if err := push.Send(ctx, frame); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	return sent
}

// BenchmarkSocket runs both loops over zmqguard's PUSH -> PULL on
// 127.0.0.1; a producer goroutine sends b.N stats messages.
func BenchmarkSocket(b *testing.B) {
	run := func(b *testing.B, consume func(r Receiver, n int)) {
		pull, push, closeAll := socketPair(b)
		defer closeAll()
		b.ReportAllocs()
		b.SetBytes(int64(len(vllmwire.StatsVector)))
		b.ResetTimer()
		sent := produce(push, b.N)
		consume(pull, b.N)
		b.StopTimer()
		if err := <-sent; err != nil {
			b.Fatal(err)
		}
	}
	b.Run("hand", func(b *testing.B) {
		run(b, func(r Receiver, n int) { handLoop(b, r, n) })
	})
	b.Run("safeloop", func(b *testing.B) {
		run(b, func(r Receiver, n int) { safeRun(b, r, n) })
	})
}

// BenchmarkRatioSocket is ratioBench over one zmqguard PUSH -> PULL pair on
// 127.0.0.1, both loops reading the same PULL in turn.
func BenchmarkRatioSocket(b *testing.B) {
	const chunk = 2000
	pull, push, closeAll := socketPair(b)
	defer closeAll()
	sent := produce(push, 2*b.N*chunk)
	ratioBench(b, pull, chunk)
	b.StopTimer()
	if err := <-sent; err != nil {
		b.Fatal(err)
	}
}
