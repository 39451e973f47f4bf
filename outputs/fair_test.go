package outputs

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
)

// TestSlowEngineDoesNotHoldOthers (issue 29 row 11): engine 1's handler is
// busy with a message (here it blocks until released, standing in for a
// huge message that takes seconds to handle) and engine 1 keeps sending.
// Engine 0's messages are still delivered meanwhile (with one receive loop
// they waited behind engine 1's), engine 1's connection is held once its
// queue reaches ConnQueueBytes, the queued bytes stay bounded, and once
// released every engine-1 message is delivered in its order.
func TestSlowEngineDoesNotHoldOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slowMsgs = 200
	release := make(chan struct{})
	busy := make(chan struct{}, 1)
	honest := make(chan string, 16)
	var slowIDs []string
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{
		ConnQueueBytes: 4 << 10,
		Handler: func(hctx context.Context, m *enginecore.Message, _ *socket.Peer) error {
			id := string(m.Outputs[0].RequestID)
			if m.EngineIndex == 0 {
				honest <- id
				return nil
			}
			if len(slowIDs) == 0 {
				busy <- struct{}{}
				select {
				case <-release:
				case <-hctx.Done():
					return hctx.Err()
				}
			}
			slowIDs = append(slowIDs, id)
			if len(slowIDs) == slowMsgs {
				done()
			}
			return nil
		},
	})
	slow := pusher(t, r.Endpoint())
	defer slow.Close()
	pad := make([]int64, 64) // about 600 bytes a message
	for i := 0; i < slowMsgs; i++ {
		send(t, ctx, slow, encode(simple(1, fmt.Sprintf("slow-%d", i), pad...))...)
		if i == 0 {
			select {
			case <-busy:
			case <-ctx.Done():
				t.Fatal("engine 1's first message never reached its handler")
			}
		}
	}
	poll.WaitForCtx(t, ctx, "a hold on engine 1's connection", func() bool { return r.Stats().Holds > 0 })

	fast := pusher(t, r.Endpoint())
	defer fast.Close()
	for i := 0; i < 3; i++ {
		send(t, ctx, fast, encode(simple(0, fmt.Sprintf("honest-%d", i), 1))...)
		select {
		case id := <-honest:
			if id != fmt.Sprintf("honest-%d", i) {
				t.Fatalf("engine 0 delivered %s, want honest-%d", id, i)
			}
		case <-ctx.Done():
			t.Fatalf("engine 0's message %d was not delivered while engine 1's handler was busy", i)
		}
	}
	st := r.Stats()
	// Engine 1's queue: under ConnQueueBytes when it was held, plus what
	// the socket had already read (its receive queue, 64 MiB at most).
	if st.QueuedBytes > 4<<10+socket.DefaultOptions().RecvQueueBytes {
		t.Fatalf("queued %d bytes", st.QueuedBytes)
	}
	close(release)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if len(slowIDs) != slowMsgs {
		t.Fatalf("engine 1: %d of %d messages delivered", len(slowIDs), slowMsgs)
	}
	for i, id := range slowIDs {
		if id != fmt.Sprintf("slow-%d", i) {
			t.Fatalf("engine 1's message %d is %s: out of order", i, id)
		}
	}
}

// TestEngineWithinShareNotSlowedByTotal (issue 37, six heavy engines):
// several engines whose handlers are stuck fill QueueBytes together; an
// engine within its share of QueueBytes is still received and handled, and
// the heavy engines' connections are held instead. Before, the receive loop waited for the total
// to fall, so every engine stopped with the heavy ones.
func TestEngineWithinShareNotSlowedByTotal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const heavy, perHeavy, limit = 6, 12, 256 << 10
	release := make(chan struct{})
	honest := make(chan string, 16)
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{
		ConnQueueBytes: limit, QueueBytes: limit,
		Handler: func(hctx context.Context, m *enginecore.Message, _ *socket.Peer) error {
			if m.EngineIndex == 0 {
				honest <- string(m.Outputs[0].RequestID)
				return nil
			}
			select {
			case <-release:
			case <-hctx.Done():
			}
			return nil
		},
	})
	big := strings.Repeat("x", 60<<10)
	for e := 1; e <= heavy; e++ {
		p := pusher(t, r.Endpoint())
		defer p.Close()
		for i := range perHeavy {
			send(t, ctx, p, encode(simple(int64(e), fmt.Sprint(big, i), 1))...)
		}
	}
	poll.WaitForCtx(t, ctx, "the heavy engines' queues past QueueBytes", func() bool { return r.Stats().QueuedBytes > limit })
	h := pusher(t, r.Endpoint())
	defer h.Close()
	for i := range 5 {
		want := fmt.Sprint("honest-", i)
		send(t, ctx, h, encode(simple(0, want, 1))...)
		select {
		case got := <-honest:
			if got != want {
				t.Fatalf("honest engine: got %q, want %q", got, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("honest message %d not handled while the heavy engines fill QueueBytes (stats %+v)", i, r.Stats())
		}
	}
	// Every heavy engine is held once its queue passes its share; the last
	// ones may still be sending on a loaded machine: wait for the holds, then
	// check the receive loop never waited for the total.
	poll.WaitForCtx(t, ctx, "one hold per heavy engine", func() bool { return r.Stats().Holds >= heavy })
	if st := r.Stats(); st.QueueWaits != 0 {
		t.Errorf("%d holds, %d waits of the receive loop (want 0)", st.Holds, st.QueueWaits)
	}
	close(release)
	done()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestHeavyBacklogHeld (issue 37, six heavy engines): a connection with
// heavyBacklog heavy messages (over 1 MiB) waiting for its worker is held,
// far below ConnQueueBytes, so that its messages do not fill the socket's
// receive queue ahead of the other engines'; once its handler catches up
// every message is delivered in its order.
func TestHeavyBacklogHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const msgs = 8
	release := make(chan struct{})
	got := make(chan string, msgs)
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{
		Handler: func(hctx context.Context, m *enginecore.Message, _ *socket.Peer) error {
			select {
			case <-release:
			case <-hctx.Done():
				return nil
			}
			got <- string(m.Outputs[0].RequestID[:8])
			return nil
		},
	})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	pad := strings.Repeat("x", heavyCost)
	for i := range msgs {
		send(t, ctx, p, encode(simple(1, fmt.Sprintf("heavy-%02d%s", i, pad), 1))...)
	}
	poll.WaitForCtx(t, ctx, "engine 1 held with "+fmt.Sprint(heavyBacklog)+" heavy messages waiting (ConnQueueBytes is 64 MiB)",
		func() bool { return r.Stats().Holds > 0 })
	if q := r.Stats().QueuedBytes; q >= msgs*heavyCost {
		t.Errorf("%d bytes queued when held, want fewer than the %d messages' %d", q, msgs, msgs*heavyCost)
	}
	close(release)
	for i := range msgs {
		select {
		case id := <-got:
			if want := fmt.Sprintf("heavy-%02d", i); id != want {
				t.Fatalf("delivered %s, want %s", id, want)
			}
		case <-ctx.Done():
			t.Fatalf("message %d not delivered after the handler caught up (stats %+v)", i, r.Stats())
		}
	}
	done()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

// TestBigCopiesRecycled: a copy of a message over copyRetain is reused
// for the next big message (allocating a fresh 7.5 MB copy in the receive
// loop took 3-7 ms, issue 37), and never handed to a small message; when
// the receive loop takes the last big copy, a spare is allocated outside
// it (a large allocation may wait for the collector's cycle: up to 480 ms
// on a loaded machine).
func TestBigCopiesRecycled(t *testing.T) {
	r := &Receiver{}
	big := [][]byte{make([]byte, 100), make([]byte, 3<<20)}
	c1, n := r.copyFrames(big)
	if n != 3<<20+100 {
		t.Fatalf("copied %d bytes", n)
	}
	r.workers.Wait()
	if len(r.bigFree) != 1 || cap(r.bigFree[0].buf) < int(n) {
		t.Fatalf("after the first big copy: %d spare copies, want one of at least %d bytes", len(r.bigFree), n)
	}
	spare := &r.bigFree[0].buf[:1][0]
	first := &c1.buf[0]
	r.recycle(c1)
	if len(r.bigFree) != 2 {
		t.Fatalf("%d big copies kept after recycling one, want 2", len(r.bigFree))
	}
	c2, _ := r.copyFrames([][]byte{make([]byte, 10)})
	if len(r.bigFree) != 2 || len(c2.buf) > 0 && (&c2.buf[0] == first || &c2.buf[0] == spare) {
		t.Fatal("a small message took a big copy")
	}
	c3, _ := r.copyFrames(big)
	if p := &c3.buf[0]; p != first && p != spare {
		t.Error("a big message did not reuse a kept copy")
	}
	if len(c3.frames) != 2 || len(c3.frames[1]) != 3<<20 {
		t.Errorf("reused copy frames: %d", len(c3.frames))
	}
	r.workers.Wait()
}
