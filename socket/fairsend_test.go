package socket

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// Issue 29 row 2: subscribers that never read must not take the whole
// SendTotalBytes. Four subscribers subscribe and never read; an honest SUB
// reads every message. Each message is published only after the honest SUB
// received the previous one, so its queue never holds more than one
// message: it is within its share (SendTotalBytes / 5) throughout, and must
// get every one. Before the fair share, the silent subscribers filled the
// total first and the honest one was refused.
func TestXPubFairSendShare(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	xpub := mustSocket(t, NewXPub, func(o *Options) {
		o.SendTotalBytes = 1 << 20
		o.SendQueueBytes = -1 // only the total bounds a queue here
		o.HWM = 1 << 20
		o.WriteTimeout = -1 // the share alone must protect the honest peer
		o.HeartbeatInterval = -1
	})
	ep := mustBind(t, xpub)
	const hogs = 4
	for range hogs {
		c := rawPeer(t, ctx, ep, zmq4.Sub, nil)
		c.WriteCommand(zmtpwire.CmdSubscribe, nil)
		c.Flush()
	}
	sub := mustSocket(t, NewSub)
	mustDial(t, sub, ep)
	if err := sub.Subscribe(nil); err != nil {
		t.Fatal(err)
	}
	waitPeers(t, ctx, xpub, hogs+1)
	poll.WaitForCtx(t, ctx, "every subscription", func() bool { return xpub.Stats().Topics == hogs+1 })
	payload := make([]byte, 16<<10)
	// 1,200 × 16 KiB = 19 MiB per silent subscriber: far past what the
	// kernel's loopback buffers absorb, so their queues fill.
	const n = 1200
	for i := range n {
		binary.BigEndian.PutUint64(payload, uint64(i))
		if err := xpub.Send(ctx, payload); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := sub.Recv(rctx)
		cancel()
		if err != nil {
			st := xpub.Stats()
			t.Fatalf("honest subscriber did not get message %d of %d: %v (queued %d bytes, DroppedBytes %d, DroppedFairShare %d)",
				i, n, err, st.QueuedSendBytes, st.DroppedBytes, st.DroppedFairShare)
		}
		if got := binary.BigEndian.Uint64(m.Frames[0]); got != uint64(i) {
			t.Fatalf("honest subscriber got message %d, want %d", got, i)
		}
	}
	st := xpub.Stats()
	if st.DroppedFairShare == 0 {
		t.Fatalf("no message refused over a share: %+v", st)
	}
	if st.QueuedSendBytes > 1<<20+int64(len(payload))*(hogs+1) {
		t.Fatalf("queued %d bytes past SendTotalBytes", st.QueuedSendBytes)
	}
}

// Issue 29 row 2: an XPUB has a write deadline by default, and a subscriber
// that never reads is disconnected by it even while it keeps sending PINGs
// (which prove only that it writes, not that it reads).
func TestXPubDefaultWriteDeadlineIgnoresPings(t *testing.T) {
	if defaultXPubWriteTimeout <= 0 {
		t.Fatal("no default XPUB write deadline")
	}
	ctx := testCtx(t, 60*time.Second)
	var log eventLog
	xpub := mustSocket(t, NewXPub, func(o *Options) { o.OnEvent = log.add })
	if got := xpub.Options().WriteTimeout; got != defaultXPubWriteTimeout {
		t.Fatalf("XPUB WriteTimeout %v, want the default %v", got, defaultXPubWriteTimeout)
	}
	ep := mustBind(t, xpub)
	c := rawPeer(t, ctx, ep, zmq4.Sub, nil)
	c.WriteCommand(zmtpwire.CmdSubscribe, nil)
	c.Flush()
	poll.WaitForCtx(t, ctx, "the subscription", func() bool { return xpub.Stats().Topics == 1 })
	// The silent subscriber PINGs every 100 ms (TTL 0) and never reads.
	pctx, stop := context.WithCancel(ctx)
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			if c.WriteCommand(zmtpwire.CmdPing, []byte{0, 0}) != nil || c.Flush() != nil {
				return
			}
			select {
			case <-pctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	defer func() { stop(); <-pingDone }()
	start := time.Now()
	big := make([]byte, 64<<10)
	poll.WaitForCtx(t, ctx, "the write-deadline disconnect", func() bool {
		xpub.Send(ctx, big)
		return xpub.Stats().Peers == 0
	})
	took := time.Since(start)
	if st := xpub.Stats(); st.Refused[decodeguard.ReasonPolicy] == 0 {
		t.Fatalf("write deadline not counted: %+v", st)
	}
	// Bounded by the deadline plus the time to fill the kernel's buffers;
	// the test's own bound (60 s) is what fails a PING-kept peer.
	t.Logf("non-reading PINGing subscriber disconnected after %v", took.Round(time.Millisecond))
	if e, ok := log.find(EventDisconnected); !ok || e.Reason != decodeguard.ReasonPolicy {
		t.Fatalf("disconnect event %+v, want a ReasonPolicy one", e)
	}
}

// A subscriber that filled the whole SendTotalBytes while it was alone is
// over its share once an honest one joins: the honest subscriber, within its
// share, finds the total spent, and the silent one is disconnected to make
// room (SendEvictions), instead of the honest one being refused for as long
// as the silent one stays.
func TestXPubEvictsOverShareWhenTotalSpent(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	xpub := mustSocket(t, NewXPub, func(o *Options) {
		o.SendTotalBytes = 1 << 20
		o.SendQueueBytes = -1
		o.HWM = 1 << 20
		o.WriteTimeout = -1
		o.HeartbeatInterval = -1
	})
	ep := mustBind(t, xpub)
	hog := rawPeer(t, ctx, ep, zmq4.Sub, nil)
	hog.WriteCommand(zmtpwire.CmdSubscribe, nil)
	hog.Flush()
	poll.WaitForCtx(t, ctx, "the silent subscription", func() bool { return xpub.Stats().Topics == 1 })
	payload := make([]byte, 16<<10)
	// Alone, the silent subscriber's share is the whole total: fill it.
	poll.WaitForCtx(t, ctx, "the total spent", func() bool {
		xpub.Send(ctx, payload)
		return xpub.Stats().QueuedSendBytes > 1<<20-int64(len(payload))
	})
	sub := mustSocket(t, NewSub)
	mustDial(t, sub, ep)
	if err := sub.Subscribe(nil); err != nil {
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "the honest subscription", func() bool { return xpub.Stats().Topics == 2 })
	binary.BigEndian.PutUint64(payload, 42)
	if err := xpub.Send(ctx, payload); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := sub.Recv(rctx)
	if err != nil {
		t.Fatalf("honest subscriber refused while the silent one holds the total: %v (%+v)", err, xpub.Stats())
	}
	if binary.BigEndian.Uint64(m.Frames[0]) != 42 {
		t.Fatal("wrong message")
	}
	poll.WaitForCtx(t, ctx, "the silent subscriber gone", func() bool { return xpub.Stats().Peers == 1 })
	if st := xpub.Stats(); st.SendEvictions != 1 || st.Refused[decodeguard.ReasonPolicy] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Disconnect closes the named peer with the caller's cause, counted under
// its reason, and reports false for a peer already gone.
func TestDisconnect(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	var log eventLog
	router := mustSocket(t, NewRouter, func(o *Options) { o.OnEvent = log.add })
	ep := mustBind(t, router)
	c := rawPeer(t, ctx, ep, zmq4.Dealer, nil)
	c.WriteMessage([]byte("hi"))
	c.Flush()
	m, err := router.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cause := decodeguard.NewError(decodeguard.ReasonPolicy, "flooding")
	if !router.Disconnect(m.Peer, cause) {
		t.Fatal("Disconnect of a connected peer reported false")
	}
	waitPeers(t, ctx, router, 0)
	if router.Disconnect(m.Peer, cause) {
		t.Fatal("Disconnect of a departed peer reported true")
	}
	if st := router.Stats(); st.Refused[decodeguard.ReasonPolicy] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if e, ok := log.find(EventDisconnected); !ok || e.Err != cause {
		t.Fatalf("event %+v", e)
	}
}
