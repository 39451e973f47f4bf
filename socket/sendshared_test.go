package socket

import (
	"bytes"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// SendShared delivers the same bytes as Send to every subscriber, and a
// queue lets go of the shared frame once it is written (issue 37: a
// publisher's payload is held once, not once per subscriber).
func TestSendSharedDeliversAndReleases(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	pub := mustSocket(t, NewXPub)
	ep := mustBind(t, pub)
	var subs []*Socket
	for range 3 {
		s := mustSocket(t, NewSub)
		s.Subscribe([]byte("t"))
		mustDial(t, s, ep)
		subs = append(subs, s)
	}
	waitPeers(t, ctx, pub, 3)
	// Wait until every subscription is in place: a probe published until
	// each subscriber has one.
	payload := bytes.Repeat([]byte("p"), 100_000)
	for i, s := range subs {
		for {
			if err := pub.SendShared(ctx, []byte("t"), []byte("probe")); err != nil {
				t.Fatal(err)
			}
			rctx := testCtx(t, 50*time.Millisecond)
			if _, err := s.Recv(rctx); err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("subscriber %d got no probe", i)
			}
		}
	}
	// Drain probes that arrived late, then send the real message.
	for _, s := range subs {
		for {
			rctx := testCtx(t, 50*time.Millisecond)
			if _, err := s.Recv(rctx); err != nil {
				break
			}
		}
	}
	if err := pub.SendShared(ctx, []byte("t"), []byte("seq"), payload); err != nil {
		t.Fatal(err)
	}
	for i, s := range subs {
		m, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || string(m.Frames[0]) != "t" || string(m.Frames[1]) != "seq" || !bytes.Equal(m.Frames[2], payload) {
			t.Fatalf("subscriber %d got %d frames, want [t seq payload of %d bytes]", i, len(m.Frames), len(payload))
		}
	}
	// Every queue has written its copy: no slot still references a frame.
	poll.WaitForCtx(t, ctx, "queues drained", func() bool { return pub.Stats().QueuedSendBytes == 0 })
	for _, p := range *pub.snap.Load() {
		p.qmu.Lock()
		for i := range p.ring {
			if p.ring[i].last != nil {
				p.qmu.Unlock()
				t.Fatalf("a written slot still holds the shared frame (%d bytes)", len(p.ring[i].last))
			}
		}
		p.qmu.Unlock()
	}
}
