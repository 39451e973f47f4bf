package outputs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
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
	waitFor(t, ctx, "a hold on engine 1's connection", func() bool { return r.Stats().Holds > 0 })

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
