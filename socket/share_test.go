package socket

import (
	"bytes"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// TestPeerRecvShare (issue 37): a connection sending large messages back
// to back, with nobody calling Recv, reads one message beyond its share of
// the receive queue (peerRecvShare) and then waits, instead of filling the
// queue (RecvQueueBytes, 64 MiB) that every connection shares; another
// connection's message, sent afterwards, is therefore received second, not
// behind every large message already read. Without the share the check
// fails: 6 MiB were read when it looked, and the queue would take 32 of
// the 2 MiB messages.
func TestPeerRecvShare(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const big, n = 2 << 20, 12
	pull := mustSocket(t, NewPull, func(o *Options) { o.Guard.MaxMessageSize = 4 << 20 })
	ep := mustBind(t, pull)
	heavy := mustSocket(t, NewPush, func(o *Options) { o.Guard.MaxMessageSize = 4 << 20 })
	mustDial(t, heavy, ep)
	sent := make(chan error, 1)
	go func() {
		for i := range n {
			msg := bytes.Repeat([]byte{byte('a' + i)}, big)
			if err := heavy.Send(ctx, msg); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// The heavy reader stops (paused) once it holds its share, or, without
	// the share, reads on until the queue holds far more than one message.
	poll.WaitForCtx(t, ctx, "the heavy connection's reader waiting, or over 4 MiB read",
		func() bool {
			if pull.Stats().QueuedRecvBytes > 2*big {
				return true
			}
			pull.mu.Lock()
			defer pull.mu.Unlock()
			for _, p := range pull.peers {
				if p.paused.Load() && p.recvHeld.Load() > 0 {
					return true
				}
			}
			return false
		})
	if q := pull.Stats().QueuedRecvBytes; q > big {
		t.Fatalf("%d bytes of one connection wait for Recv, want at most one %d-byte message", q, big)
	}
	honest := mustSocket(t, NewPush)
	mustDial(t, honest, ep)
	if err := honest.Send(ctx, []byte("honest")); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the other connection's message read", func() bool {
		return pull.Stats().QueuedRecvBytes > big
	})
	got := -1
	for i := 0; got < 0; i++ {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Frames[0]) == "honest" {
			got = i
		}
	}
	if got > 1 {
		t.Fatalf("the other connection's message came %d-th, behind %d large ones", got+1, got)
	}
	for range n - got {
		if _, err := pull.Recv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
