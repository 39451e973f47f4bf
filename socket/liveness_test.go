package socket

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// rawRouter is a bare zmtpguard listener standing for a peer whose process
// is frozen: it completes handshakes and then reads or writes only what the
// test tells it to (the kernel still ACKs).
func rawRouter(t *testing.T, typ zmq4.SocketType) (*zmtpguard.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := zmtpguard.NewListener(ln, zmtpguard.SocketType(typ), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, "tcp://" + ln.Addr().String()
}

func accept(t *testing.T, ctx context.Context, l *zmtpguard.Listener) *zmtpguard.Conn {
	t.Helper()
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hbLog collects events for a test.
type hbLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *hbLog) add(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *hbLog) find(f func(Event) bool) (Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.ev {
		if f(e) {
			return e, true
		}
	}
	return Event{}, false
}

func isHeartbeatTimeout(e Event) bool {
	return e.Kind == EventDisconnected && errors.Is(e.Err, ErrHeartbeatTimeout)
}

func TestHeartbeatTimeoutDisconnectsFrozenPeerAndRedials(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l, ep := rawRouter(t, zmq4.Router)
	var log hbLog
	var logBuf syncBuffer
	d := mustSocket(t, NewDealer, func(o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.HeartbeatTimeout = 150 * time.Millisecond
		o.HeartbeatTTL = 500 * time.Millisecond
		o.OnEvent = log.add
		o.Logger = slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	mustDial(t, d, ep)
	c := accept(t, ctx, l)
	start := time.Now()

	// The frozen peer receives our PING (with TTL and context) but never
	// answers.
	var m zmtpguard.Message
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	if m.Command != zmtpwire.CmdPing || len(m.Frames) != 1 || len(m.Frames[0]) != 10 {
		t.Fatalf("first message from an idle DEALER: command %q frames %q, want a PING with TTL and 8-byte context", m.Command, m.Frames)
	}
	if ttl := int(m.Frames[0][0])<<8 | int(m.Frames[0][1]); ttl != 5 {
		t.Fatalf("PING TTL %d deciseconds, want 5", ttl)
	}
	poll.WaitForCtx(t, ctx, "heartbeat disconnect", func() bool { _, ok := log.find(isHeartbeatTimeout); return ok })
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("frozen peer noticed after %v", el)
	}
	e, _ := log.find(isHeartbeatTimeout)
	if !strings.Contains(e.Err.Error(), "heartbeat interval 50ms + timeout 150ms") {
		t.Fatalf("cause %q does not name the rule", e.Err)
	}
	// A peer gone silent is logged at warn, with the cause.
	poll.WaitForCtx(t, ctx, "warn line", func() bool { return strings.Contains(logBuf.String(), "silent past the heartbeat timeout") })
	if l := logBuf.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "event=disconnected") {
		t.Fatalf("log %q: want a warn-level disconnect line", l)
	}
	st := d.Stats()
	if st.HeartbeatTimeouts < 1 || st.PingsSent < 1 {
		t.Fatalf("stats %+v: want heartbeat timeout and pings counted", st)
	}
	// The dialer reconnects.
	c2 := accept(t, ctx, l)
	_ = c2
	poll.WaitForCtx(t, ctx, "reconnect", func() bool { return d.Stats().Connects >= 2 })
}

func TestHeartbeatKeepsIdlePeersAlive(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	hb := func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.HeartbeatTimeout = 200 * time.Millisecond
	}
	r := mustSocket(t, NewRouter, hb)
	ep := mustBind(t, r)
	d := mustSocket(t, NewDealer, hb)
	mustDial(t, d, ep)
	waitPeers(t, ctx, r, 1)
	waitPeers(t, ctx, d, 1)
	// Idle for many intervals: PINGs go both ways, PONGs come back, nobody
	// is dropped.
	poll.WaitForCtx(t, ctx, "pings and pongs", func() bool {
		a, b := r.Stats(), d.Stats()
		return a.PingsSent >= 10 && b.PingsSent >= 10 && a.PongsReceived >= 10 && b.PongsReceived >= 10
	})
	for _, s := range []*Socket{r, d} {
		if st := s.Stats(); st.HeartbeatTimeouts != 0 || st.Disconnects != 0 || st.Connects != 1 {
			t.Fatalf("%s stats %+v: an idle, live peer was dropped", s.Type(), st)
		}
	}
}

func TestPeerTTLEnforcedWithOwnHeartbeatsOff(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l, ep := rawRouter(t, zmq4.Router)
	var log hbLog
	d := mustSocket(t, NewDealer, func(o *Options) {
		o.HeartbeatInterval = -1
		o.OnEvent = log.add
	})
	mustDial(t, d, ep)
	c := accept(t, ctx, l)
	// PING with TTL 2 ds (200 ms) and context "ab": we must PONG "ab", then
	// drop the peer once it is silent past 200 ms.
	if err := c.WriteCommand(zmtpwire.CmdPing, []byte{0, 2, 'a', 'b'}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	var m zmtpguard.Message
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	if m.Command != zmtpwire.CmdPong || len(m.Frames) != 1 || string(m.Frames[0]) != "ab" {
		t.Fatalf("answer to PING: command %q frames %q, want PONG echoing the context", m.Command, m.Frames)
	}
	poll.WaitForCtx(t, ctx, "TTL disconnect", func() bool { _, ok := log.find(isHeartbeatTimeout); return ok })
	e, _ := log.find(isHeartbeatTimeout)
	if !strings.Contains(e.Err.Error(), "TTL 200ms") {
		t.Fatalf("cause %q does not name the TTL", e.Err)
	}
	if d.Stats().PingsSent != 0 {
		t.Fatal("heartbeats off, yet PINGs were sent")
	}
}

// An application that does not call Recv must not stop the socket from
// answering PINGs: the reader hands full inboxes over in the background.
func TestPingsAnsweredWhileRecvPaused(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	pull := mustSocket(t, NewPull, func(o *Options) { o.HeartbeatInterval = -1 })
	ep := mustBind(t, pull)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 40 messages, each flushed alone: each becomes its own batch, more
	// than the inbox holds, and nobody calls Recv.
	for i := range 40 {
		if err := c.WriteMessage([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 3 {
		if err := c.WriteCommand(zmtpwire.CmdPing, []byte{0, 0, byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		c.NetConn().SetReadDeadline(time.Now().Add(20 * time.Second))
		var m zmtpguard.Message
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("PING %d not answered while Recv is not called: %v", i, err)
		}
		if m.Command != zmtpwire.CmdPong || string(m.Frames[0]) != string([]byte{byte(i)}) {
			t.Fatalf("got %q %q, want PONG %d", m.Command, m.Frames, i)
		}
	}
	// Every message is still delivered, in order.
	for i := range 40 {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 1 || len(m.Frames[0]) != 1 || m.Frames[0][0] != byte(i) {
			t.Fatalf("message %d: got %q", i, m.Frames)
		}
	}
}

func TestRouterHandoverAndRefusal(t *testing.T) {
	for _, handover := range []bool{false, true} {
		name := "refuse"
		if handover {
			name = "handover"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			var log hbLog
			r := mustSocket(t, NewRouter, func(o *Options) {
				o.RouterHandover = handover
				o.OnEvent = log.add
			})
			ep := mustBind(t, r)
			addr := strings.TrimPrefix(ep, "tcp://")
			// The "frozen" first engine: handshaken, then silent.
			old, err := zmtpguard.Dial(ctx, "tcp", addr, "DEALER", []byte("rank-0"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			waitPeers(t, ctx, r, 1)
			// Its restarted self presents the same identity.
			d := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("rank-0") })
			mustDial(t, d, ep)
			if !handover {
				poll.WaitForCtx(t, ctx, "refusal", func() bool { return r.Stats().IdentityRefusals >= 1 })
				if st := r.Stats(); st.Handovers != 0 || st.Peers != 1 {
					t.Fatalf("stats %+v", st)
				}
				return
			}
			poll.WaitForCtx(t, ctx, "handover", func() bool { return r.Stats().Handovers == 1 })
			// The counter moves before the displaced peer's disconnect event
			// is emitted: wait for the event, then check what it says.
			isHandover := func(e Event) bool { return e.Kind == EventDisconnected && errors.Is(e.Err, errHandover) }
			poll.WaitForCtx(t, ctx, "handover disconnect event", func() bool { _, ok := log.find(isHandover); return ok })
			e, ok := log.find(isHandover)
			if !ok || !strings.Contains(e.Err.Error(), "72616e6b2d30") {
				t.Fatalf("no handover disconnect naming the identity: %+v", e)
			}
			// The new connection holds the identity: a reply reaches it.
			poll.WaitForCtx(t, ctx, "one peer", func() bool { return r.Stats().Peers == 1 })
			if err := r.Send(ctx, []byte("rank-0"), []byte("ready")); err != nil {
				t.Fatal(err)
			}
			m, err := d.Recv(ctx)
			if err != nil || string(m.Frames[0]) != "ready" {
				t.Fatalf("reply after handover: %q %v", m.Frames, err)
			}
			if st := r.Stats(); st.IdentityRefusals != 0 {
				t.Fatalf("stats %+v: handover also refused", st)
			}
		})
	}
}

func TestSendQueueByteBound(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l, ep := rawRouter(t, zmq4.Dealer)
	r := mustSocket(t, NewRouter, func(o *Options) {
		o.SendQueueBytes = 64 << 10
		o.WriteTimeout = 0
		o.HeartbeatInterval = -1
	})
	mustDial(t, r, ep)
	c := accept(t, ctx, l) // never reads: the queue fills
	_ = c
	waitPeers(t, ctx, r, 1)
	id := r.Peers()[0].Identity()
	big := make([]byte, 32<<10)
	for range 2000 {
		if err := r.Send(ctx, id, big); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	if st.DroppedBytes == 0 || st.DroppedHWM == 0 {
		t.Fatalf("stats %+v: 64 MiB offered to a 64 KiB queue of a peer that does not read, nothing dropped", st)
	}
	// What stays queued is the byte bound plus whatever the kernel took:
	// at most the two 32 KiB messages the byte bound allows. Once the
	// kernel's buffers toward the peer are full for good, at least one
	// waits. The writer may still be handing queued messages to the kernel
	// when the loop above ends (it drains the queue into one write), so
	// keep offering one message at a time until one stays queued; the bound
	// is checked at every step.
	for {
		if st.QueuedSendBytes > 64<<10 {
			t.Fatalf("%d bytes queued, over SendQueueBytes 65536", st.QueuedSendBytes)
		}
		if st.QueuedSendMessages > 2 {
			t.Fatalf("%d messages queued, want at most 2 (QueuedSendBytes %d)", st.QueuedSendMessages, st.QueuedSendBytes)
		}
		if st.QueuedSendMessages >= 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("stats %+v: no message ever stayed queued for a peer that reads nothing", st)
		}
		time.Sleep(10 * time.Millisecond)
		if err := r.Send(ctx, id, big); err != nil {
			t.Fatal(err)
		}
		st = r.Stats()
	}
}

func TestSendTotalBytesBound(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l, ep := rawRouter(t, zmq4.Dealer)
	r := mustSocket(t, NewRouter, func(o *Options) {
		o.SendTotalBytes = 100 << 10
		o.HeartbeatInterval = -1
	})
	for range 4 {
		mustDial(t, r, ep)
		accept(t, ctx, l)
	}
	waitPeers(t, ctx, r, 4)
	big := make([]byte, 30<<10)
	for range 200 {
		for _, p := range r.Peers() {
			r.Send(ctx, p.Identity(), big)
		}
	}
	if st := r.Stats(); st.QueuedSendBytes > 100<<10 || st.DroppedBytes == 0 {
		t.Fatalf("stats %+v: want at most 100 KiB queued over all peers and byte drops counted", st)
	}
}

func TestRecvQueueByteBound(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	pull := mustSocket(t, NewPull, func(o *Options) { o.RecvQueueBytes = 256 << 10 })
	ep := mustBind(t, pull)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	msg := make([]byte, 16<<10)
	const n = 400 // 6.4 MiB offered, nobody receiving yet
	sendDone := make(chan error, 1)
	go func() {
		for i := range n {
			msg[0] = byte(i)
			if err := push.Send(ctx, msg); err != nil {
				sendDone <- err
				return
			}
		}
		sendDone <- nil
	}()
	// Let the receive side fill up, then check its bound.
	poll.WaitForCtx(t, ctx, "receive queue filled", func() bool { return pull.Stats().QueuedRecvBytes >= 256<<10 })
	time.Sleep(200 * time.Millisecond)
	if q := pull.Stats().QueuedRecvBytes; q > 256<<10+16<<10 {
		t.Fatalf("%d bytes wait for Recv, over RecvQueueBytes 256 KiB + one message", q)
	}
	for i := range n {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Frames[0][0] != byte(i) {
			t.Fatalf("message %d out of order", i)
		}
	}
	if err := <-sendDone; err != nil {
		t.Fatal(err)
	}
}

func TestReconnectJitterFormula(t *testing.T) {
	s := mustSocket(t, NewDealer, func(o *Options) {
		o.ReconnectMin = 100 * time.Millisecond
		o.ReconnectMax = time.Second
	})
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		d := s.jittered(500 * time.Millisecond)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 400*time.Millisecond || hi > 600*time.Millisecond || hi-lo < 100*time.Millisecond {
		t.Fatalf("jittered 500ms spans [%v, %v], want within ±20%% and spread", lo, hi)
	}
	if d := s.jittered(time.Second); d > time.Second {
		t.Fatalf("jittered wait %v over ReconnectMax", d)
	}
	off := mustSocket(t, NewDealer, func(o *Options) { o.ReconnectJitter = -1 })
	if d := off.jittered(150 * time.Millisecond); d != 150*time.Millisecond {
		t.Fatalf("jitter off: %v", d)
	}
}

func TestLivenessOptionsVerify(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.ReconnectJitter = 1.5 }, "ReconnectJitter 1.5"},
		{func(o *Options) { o.HeartbeatTimeout = -time.Second }, "Options.HeartbeatTimeout -1s is negative"},
		{func(o *Options) { o.HeartbeatTTL = 2 * time.Hour }, "HeartbeatTTL 2h0m0s"},
		{func(o *Options) { o.HeartbeatInterval = time.Second; o.HeartbeatTTL = time.Second }, "must exceed HeartbeatInterval"},
		{func(o *Options) { o.HeartbeatInterval = time.Microsecond }, "HeartbeatInterval 1µs"},
	} {
		o := DefaultOptions()
		c.mod(&o)
		err := checkOptions(o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Verify: %v, want %q", err, c.want)
		}
	}
	o := DefaultOptions()
	if o.HeartbeatInterval != defaultHeartbeatInterval || o.HeartbeatTimeout != defaultHeartbeatTimeout ||
		!o.TCPKeepAlive.Enable || o.SendQueueBytes != defaultSendQueueBytes || o.RecvQueueBytes != defaultRecvQueueBytes {
		t.Fatalf("defaults %+v", o)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// With a TTL announced, a socket that only listens to a chatty peer still
// PINGs it every interval: libzmq would otherwise drop it once the TTL of
// its last PING expired.
func TestTTLKeepsPingingAChattyPeer(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	l, ep := rawRouter(t, zmq4.Push)
	pull := mustSocket(t, NewPull, func(o *Options) {
		o.HeartbeatInterval = 50 * time.Millisecond
		o.HeartbeatTimeout = 500 * time.Millisecond
		o.HeartbeatTTL = 300 * time.Millisecond
	})
	mustDial(t, pull, ep)
	c := accept(t, ctx, l)
	go func() {
		for ctx.Err() == nil {
			if c.WriteMessage([]byte("data")) != nil || c.Flush() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	go func() {
		for ctx.Err() == nil {
			if _, err := pull.Recv(ctx); err != nil {
				return
			}
		}
	}()
	pings := 0
	for pings < 5 {
		var m zmtpguard.Message
		c.NetConn().SetReadDeadline(time.Now().Add(20 * time.Second))
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("after %d PINGs: %v", pings, err)
		}
		if m.Command == zmtpwire.CmdPing {
			if ttl := int(m.Frames[0][0])<<8 | int(m.Frames[0][1]); ttl != 3 {
				t.Fatalf("PING TTL %d ds, want 3", ttl)
			}
			pings++
		}
	}
	if st := pull.Stats(); st.HeartbeatTimeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBudgetReserveExactWhenQueued: the reader charges MemoryBudget ahead in
// budgetStep steps while it assembles a batch, and gives back what it did not
// use when it hands the batch over. So with messages waiting for Recv the
// budget holds exactly their bytes (never fewer: it must not under-count), and
// nothing once they are received.
func TestBudgetReserveExactWhenQueued(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	// 100-byte messages: several per batch, and all within what a reader
	// queues without Recv even if each batch holds one (16 batches in the
	// inbox and 128 messages merged for the drain goroutine): with 1,000,
	// a reader whose batches came out small stopped before reading them
	// all, and the wait below timed out (once in 3 runs under -race).
	const n = 100
	msg := make([]byte, 100)
	for i := range n {
		msg[0] = byte(i)
		if err := push.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitForCtx(t, ctx, "all messages queued for Recv", func() bool { return pull.Stats().QueuedRecvBytes == n*100 })
	// The reader has handed every batch over: no reserve is left.
	poll.WaitForCtx(t, ctx, "budget equal to the queued bytes", func() bool {
		st := pull.Stats()
		if st.BudgetBytes < st.QueuedRecvBytes {
			t.Fatalf("budget %d under the %d bytes queued for Recv", st.BudgetBytes, st.QueuedRecvBytes)
		}
		return st.BudgetBytes == st.QueuedRecvBytes
	})
	for i := range n {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Frames[0][0] != byte(i) {
			t.Fatalf("message %d out of order", i)
		}
	}
	// The last message stays valid until the next Recv, and with it its
	// batch: the next Recv (here one that times out) releases it.
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := pull.Recv(rctx); err == nil {
		t.Fatal("a message after the last one sent")
	}
	if st := pull.Stats(); st.BudgetBytes != 0 || st.QueuedRecvBytes != 0 {
		t.Fatalf("budget %d, queued %d after every message was received", st.BudgetBytes, st.QueuedRecvBytes)
	}
}
