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
// heavyBacklog heavy messages (over 1 MiB) waiting to render is held,
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

// TestHeavyMessagesTaken (issue 37): a message over copyRetain is kept for
// its worker by taking the socket's frames (Socket.TakeFrames), not copied
// (a fresh 7.5 MB copy took the receive loop 2 to 56 ms while every other
// engine's messages waited), and a taken message is never recycled; a
// small one is copied into a recycled buffer.
func TestHeavyMessagesTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := socket.DefaultOptions()
	opts.Logger = quiet
	opts.Guard.MaxMessageSize = 8 << 20
	pull, err := socket.New("PULL", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p := pusher(t, pull.Endpoint())
	defer p.Close()
	send(t, ctx, p, []byte("head"), make([]byte, 3<<20))
	send(t, ctx, p, []byte("small"))
	r := &Receiver{sock: pull}

	m, err := pull.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, n := r.keepFrames(m.Frames)
	if n != 3<<20+4 || len(c.frames) != 2 || string(c.frames[0]) != "head" {
		t.Fatalf("kept %d bytes, %d frames", n, len(c.frames))
	}
	if !c.taken || &c.frames[1][0] != &m.Frames[1][0] {
		t.Fatal("a 3 MiB message was copied, not taken from the socket")
	}
	r.recycle(c)
	if len(r.free) != 0 {
		t.Fatal("a taken message went to the recycled copies")
	}

	m, err = pull.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, _ = r.keepFrames(m.Frames)
	if c.taken || &c.frames[0][0] == &m.Frames[0][0] || string(c.frames[0]) != "small" {
		t.Fatal("a small message was not copied")
	}
	r.recycle(c)
	if len(r.free) != 1 {
		t.Fatalf("%d recycled copies after a small one, want 1", len(r.free))
	}
}

// TestHeavyWaitingForSlotHeld (issue 37): a connection is held once one
// heavy message waits to render (queued, or taken by its worker while
// every heavy slot is busy with other engines'), with that one message
// queued. Held only at two waiting (heavyBacklog 2, before), it read and
// queued all three first: in the six engines' first burst, each engine's
// extra messages were read while the honest engine waited for a CPU.
func TestHeavyWaitingForSlotHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slots := heavySlots()
	release := make(chan struct{})
	busy := make(chan int64, slots+1)
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{
		Handler: func(hctx context.Context, m *enginecore.Message, _ *socket.Peer) error {
			busy <- m.EngineIndex
			select {
			case <-release:
			case <-hctx.Done():
			}
			return nil
		},
	})
	pad := strings.Repeat("x", heavyCost)
	heavyMsg := func(e int64, i int) [][]byte { return encode(simple(e, fmt.Sprintf("heavy-%d%s", i, pad), 1)) }
	var cost int64
	for e := 1; e <= slots; e++ {
		p := pusher(t, r.Endpoint())
		defer p.Close()
		send(t, ctx, p, heavyMsg(int64(e), 0)...)
		select {
		case <-busy:
		case <-ctx.Done():
			t.Fatalf("engine %d's heavy message not rendering (stats %+v)", e, r.Stats())
		}
		if e == 1 {
			cost = r.Stats().QueuedBytes
		}
	}
	// Every heavy slot is busy; engine slots+1 sends three heavy messages.
	p := pusher(t, r.Endpoint())
	defer p.Close()
	for i := range 3 {
		send(t, ctx, p, heavyMsg(int64(slots+1), i)...)
	}
	poll.WaitForCtx(t, ctx, "the engine waiting for a heavy slot held", func() bool { return r.Stats().Holds > 0 })
	if q, want := r.Stats().QueuedBytes, int64(slots+1)*cost; q > want {
		t.Errorf("%d bytes queued when held, want %d: the %d rendering and one waiting for a slot", q, want, slots)
	}
	close(release)
	done()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
