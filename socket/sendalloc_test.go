package socket

import (
	"testing"
	"time"
)

// TestOutMsgSetAllocs: queuing a message into a send slot allocates nothing
// once the slot has held a message as large, and a fresh slot (or one whose
// oversized buffer was released after its write) costs one allocation for
// the bytes and one for the frame table, however many frames there are.
func TestOutMsgSetAllocs(t *testing.T) {
	id, body, ts := []byte("\x00\x01\x02\x03\x04"), make([]byte, 300), make([]byte, 9)
	reply := [][]byte{id, nil, body, ts}
	var m outMsg
	m.set(nil, false, reply, false)
	if n := testing.AllocsPerRun(200, func() { m.set(nil, false, reply, false) }); n != 0 {
		t.Errorf("reused slot: %v allocations per message, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() { m.set([]byte{}, true, reply[2:], false) }); n != 0 {
		t.Errorf("reused slot with a prefix: %v allocations per message, want 0", n)
	}
	big := make([]byte, 3*slotRetain)
	frames := [][]byte{big[:slotRetain], big[:slotRetain], big, ts}
	if n := testing.AllocsPerRun(50, func() {
		m.buf, m.ends = nil, nil // as after the writer released an oversized buffer
		m.set(nil, false, frames, false)
	}); n != 2 {
		t.Errorf("fresh slot, 4 frames of %d bytes: %v allocations, want 2", len(big)*2, n)
	}
	got := m.frames(nil)
	if len(got) != 4 || len(got[0]) != slotRetain || len(got[2]) != len(big) || len(got[3]) != len(ts) {
		t.Fatalf("frames after set: %d", len(got))
	}
}

// TestSendPathAllocs: in steady state the whole send path — Send, the
// peer's queue, the writer goroutine writing to the connection, and the
// receiving socket's reader and Recv — allocates nothing per message, for
// a PUSH's single frame and for a ROUTER's reply to a REQ (identity,
// delimiter, payload, timestamp). AllocsPerRun counts every goroutine's
// allocations, so background work would show here too.
func TestSendPathAllocs(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	t.Run("push", func(t *testing.T) {
		pull := mustSocket(t, NewPull)
		push := mustSocket(t, NewPush)
		mustDial(t, push, mustBind(t, pull))
		waitPeers(t, ctx, push, 1)
		body := make([]byte, 100)
		round := func() {
			if err := push.Send(ctx, body); err != nil {
				t.Fatal(err)
			}
			if _, err := pull.Recv(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for range 500 { // every send slot and receive batch used once
			round()
		}
		if n := testing.AllocsPerRun(2000, round); n != 0 {
			t.Errorf("PUSH -> PULL: %v allocations per message, want 0", n)
		}
	})
	t.Run("router-reply", func(t *testing.T) {
		router := mustSocket(t, NewRouter)
		req := mustSocket(t, NewReq)
		mustDial(t, req, mustBind(t, router))
		waitPeers(t, ctx, req, 1)
		body, payload, ts := make([]byte, 40), make([]byte, 300), make([]byte, 9)
		id := make([]byte, 0, 256)
		round := func() {
			if err := req.Send(ctx, body); err != nil {
				t.Fatal(err)
			}
			m, err := router.Recv(ctx)
			if err != nil {
				t.Fatal(err)
			}
			id = append(id[:0], m.Frames[0]...)
			if err := router.Send(ctx, id, nil, payload, ts); err != nil {
				t.Fatal(err)
			}
			if _, err := req.Recv(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for range 500 {
			round()
		}
		if n := testing.AllocsPerRun(2000, round); n != 0 {
			t.Errorf("REQ -> ROUTER -> REQ: %v allocations per round trip, want 0", n)
		}
	})
}
