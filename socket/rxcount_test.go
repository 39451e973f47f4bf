package socket

import (
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// TestCommandsOnlyPeerStaysAlive: a peer whose only traffic is ZMTP commands
// (PINGs and PONGs, never delivered to Recv) is alive. The reader adds what
// it read to the liveness counter once per batch, before it waits for the
// next bytes (issue 41); a command that is not delivered ends its batch
// empty, and must be counted all the same, or a live idle peer would be
// dropped HeartbeatInterval + HeartbeatTimeout after its last data message.
// The wait runs past that eight times over.
func TestCommandsOnlyPeerStaysAlive(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	hb := func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.HeartbeatTimeout = 300 * time.Millisecond
	}
	r := mustSocket(t, NewRouter, hb)
	ep := mustBind(t, r)
	d := mustSocket(t, NewDealer, hb)
	mustDial(t, d, ep)
	waitPeers(t, ctx, r, 1)
	waitPeers(t, ctx, d, 1)
	start := time.Now()
	// Eight timeouts' worth of silence in data.
	poll.WaitForCtx(t, ctx, "pongs for 8 heartbeat timeouts", func() bool {
		a, b := r.Stats(), d.Stats()
		return time.Since(start) > 8*320*time.Millisecond && a.PongsReceived >= 20 && b.PongsReceived >= 20
	})
	for _, s := range []*Socket{r, d} {
		if st := s.Stats(); st.HeartbeatTimeouts != 0 || st.Disconnects != 0 || st.Connects != 1 {
			t.Fatalf("%s stats %+v: a peer sending only PINGs and PONGs was dropped", s.Type(), st)
		}
	}
}

// TestBatchSlotsGrow: a batch starts with firstSlots slots and doubles up
// to batchMsgs as messages arrive, keeping what its slots hold, so that a
// batch of one message (a ROUTER's, a REQ's) costs 16 slots, not 512.
func TestBatchSlotsGrow(t *testing.T) {
	var b batch
	b.at(0).scratch = []byte("first")
	if len(b.slots) != firstSlots {
		t.Fatalf("a fresh batch has %d slots, want %d", len(b.slots), firstSlots)
	}
	b.at(firstSlots).scratch = []byte("second")
	if len(b.slots) != 2*firstSlots {
		t.Fatalf("after slot %d: %d slots, want %d", firstSlots, len(b.slots), 2*firstSlots)
	}
	b.at(batchMsgs - 1)
	if len(b.slots) != batchMsgs {
		t.Fatalf("after slot %d: %d slots, want %d", batchMsgs-1, len(b.slots), batchMsgs)
	}
	if string(b.slots[0].scratch) != "first" || string(b.slots[firstSlots].scratch) != "second" {
		t.Fatal("growing lost what the slots held")
	}
}

// TestRouterBatchStaysSmall: a ROUTER receiving one request at a time
// hands over batches of one message, whose slots never grow past the first
// firstSlots.
func TestRouterBatchStaysSmall(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	r := mustSocket(t, NewRouter)
	ep := mustBind(t, r)
	d := mustSocket(t, NewDealer)
	mustDial(t, d, ep)
	for i := range 5 {
		if err := d.Send(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		r.recvMu.Lock()
		n := len(r.cur.slots)
		r.recvMu.Unlock()
		if n != firstSlots {
			t.Fatalf("message %d came in a batch of %d slots, want %d", i, n, firstSlots)
		}
	}
}
