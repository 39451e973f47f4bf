package socket

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// eventLog collects events for assertions.
type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) count(k EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.ev {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func (l *eventLog) find(k EventKind) (Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.ev {
		if e.Kind == k {
			return e, true
		}
	}
	return Event{}, false
}

func TestRouterDuplicateIdentityRejected(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	var log eventLog
	router := mustSocket(t, NewRouter, func(o *Options) { o.OnEvent = log.add })
	ep := mustBind(t, router)
	first := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("dup") })
	mustDial(t, first, ep)
	waitPeers(t, ctx, router, 1)
	second := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("dup") })
	mustDial(t, second, ep)
	poll.WaitForCtx(t, ctx, "rejection", func() bool { return log.count(EventRejected) > 0 })
	e, _ := log.find(EventRejected)
	if !errors.Is(e.Err, errDuplicateIdentity) || e.Reason != decodeguard.ReasonPolicy {
		t.Fatalf("rejection event %v reason %v", e.Err, e.Reason)
	}
	if router.Stats().Refused[decodeguard.ReasonPolicy] == 0 {
		t.Fatal("duplicate identity not counted as policy")
	}
	// The first peer still owns the identity.
	if err := router.Send(ctx, []byte("dup"), []byte("for-first")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, first); !eq(got, "for-first") {
		t.Fatalf("first got %q", got)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if m, err := second.Recv(short); err == nil {
		t.Fatalf("second peer received %q meant for the first", m.Frames)
	}
}

func TestRouterAssignedIdentity(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	ids := map[string]bool{}
	for i := 0; i < 3; i++ {
		d := mustSocket(t, NewDealer)
		mustDial(t, d, ep)
		if err := d.Send(ctx, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		m, err := router.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id := m.Frames[0]
		if len(id) != 5 || id[0] != 0 {
			t.Fatalf("assigned identity %x", id)
		}
		if string(m.Peer.Identity()) != string(id) {
			t.Fatalf("Peer.Identity %x != frame %x", m.Peer.Identity(), id)
		}
		ids[string(id)] = true
	}
	if len(ids) != 3 {
		t.Fatalf("identities not unique: %d", len(ids))
	}
}

func TestRouterUnroutableAndFrameCount(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	err := router.Send(ctx, []byte("nobody"), []byte("x"))
	if !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), "6e6f626f6479") {
		t.Fatalf("unknown identity: %v", err)
	}
	if err := router.Send(ctx, []byte("only-identity")); !errors.Is(err, errRouterFrames) {
		t.Fatalf("1 frame: %v", err)
	}
	if err := router.Send(ctx); !errors.Is(err, errEmptyMessage) {
		t.Fatalf("0 frames: %v", err)
	}
	// A departed identity is unroutable too.
	d := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("gone") })
	mustDial(t, d, ep)
	waitPeers(t, ctx, router, 1)
	d.Close()
	waitPeers(t, ctx, router, 0)
	if err := router.Send(ctx, []byte("gone"), []byte("x")); !errors.Is(err, ErrUnroutable) {
		t.Fatalf("departed identity: %v", err)
	}

	drop := mustSocket(t, NewRouter, func(o *Options) { o.RouterDropUnroutable = true })
	if err := drop.Send(ctx, []byte("nobody"), []byte("x")); err != nil {
		t.Fatalf("drop mode: %v", err)
	}
	if got := drop.Stats().DroppedUnroutable; got != 1 {
		t.Fatalf("DroppedUnroutable %d", got)
	}
}

func TestPushRoundRobin(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	push := mustSocket(t, NewPush)
	var pulls []*Socket
	for i := 0; i < 2; i++ {
		p := mustSocket(t, NewPull)
		mustDial(t, push, mustBind(t, p))
		pulls = append(pulls, p)
	}
	waitPeers(t, ctx, push, 2)
	const n = 1000
	for i := 0; i < n; i++ {
		if err := push.Send(ctx, []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pulls {
		for i := 0; i < n/2; i++ {
			recvString(t, ctx, p)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if m, err := p.Recv(short); err == nil {
			t.Fatalf("a PULL got more than its half: %q", m.Frames)
		}
		cancel()
	}
}

func TestPushWaitsForPeerWithContext(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	push := mustSocket(t, NewPush, func(o *Options) { o.HWM = 4 })
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := push.Send(short, []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no peer: %v", err)
	}
	// A peer that never reads: once its queue (and the kernel's buffers)
	// are full, Send waits for room and gives up with ctx.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer hcancel()
		c, err := zmtpguard.Handshake(hctx, nc, "PULL", nil, nil)
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c.NetConn() // never read from
	}()
	mustDial(t, push, "tcp://"+ln.Addr().String())
	waitPeers(t, ctx, push, 1)
	big := make([]byte, 256<<10)
	blocked := false
	for i := 0; i < 400 && !blocked; i++ {
		c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		err := push.Send(c, big)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			blocked = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !blocked {
		t.Fatal("PUSH never blocked on a peer that does not read")
	}
	// Close releases a Send waiting for room.
	done := make(chan error, 1)
	go func() { done <- push.Send(ctx, big) }()
	// Close as soon as the Send waits for room: a fixed sleep here let the
	// kernel's growing buffers make room first on a loaded machine.
	poll.WaitForCtx(t, ctx, "Send to wait for room", func() bool { return push.waiters.Load() > 0 })
	push.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Send across Close: %v", err)
	}
	if nc, ok := <-accepted; ok {
		nc.Close()
	}
}

func TestCloseReleasesGoroutinesAndFDs(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	baseG, baseFD := runtime.NumGoroutine(), countFDs()
	router, _ := NewRouter(DefaultOptions())
	router.Bind("tcp://127.0.0.1:0")
	router.Bind("ipc://" + filepath.Join(t.TempDir(), "r.sock"))
	var dealers []*Socket
	for i := 0; i < 3; i++ {
		d, _ := NewDealer(DefaultOptions())
		d.Dial(router.Endpoint())
		d.Dial("tcp://127.0.0.1:1") // refused: a dialer in back-off
		dealers = append(dealers, d)
		d.Send(ctx, []byte("x"))
		router.Recv(ctx)
	}
	idle, err := net.Dial("tcp", strings.TrimPrefix(router.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close() // a pending handshake at Close time
	router.Close()
	for _, d := range dealers {
		d.Close()
	}
	poll.WaitForCtx(t, ctx, "goroutines and fds released", func() bool {
		return runtime.NumGoroutine() <= baseG && countFDs() <= baseFD+1 // +1: idle
	})
}

func TestReqAlternationAndReset(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	req := mustSocket(t, NewReq)
	mustDial(t, req, ep)
	if _, err := req.Recv(ctx); !errors.Is(err, errState) {
		t.Fatalf("Recv before Send: %v", err)
	}
	if err := req.Send(ctx, []byte("q1")); err != nil {
		t.Fatal(err)
	}
	if err := req.Send(ctx, []byte("q1b")); !errors.Is(err, errState) {
		t.Fatalf("second Send: %v", err)
	}
	m, err := router.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldID := append([]byte(nil), m.Frames[0]...)
	// The reply does not come in time.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = req.Recv(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv timeout: %v", err)
	}
	if err := req.Send(ctx, []byte("q2")); !errors.Is(err, errState) {
		t.Fatalf("Send without Reset: %v", err)
	}
	if err := req.Reset(); err != nil {
		t.Fatal(err)
	}
	// The late reply goes nowhere: the old connection is gone.
	router.Send(ctx, oldID, nil, []byte("late"))
	if err := req.Send(ctx, []byte("q2")); err != nil {
		t.Fatal(err)
	}
	m, err = router.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Frames[len(m.Frames)-1]) != "q2" {
		t.Fatalf("router got %q", m.Frames)
	}
	if err := router.Send(ctx, m.Frames[0], nil, []byte("a2")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, req); !eq(got, "a2") {
		t.Fatalf("req got %q", got)
	}
}

func TestReqDropsReplyWithoutDelimiter(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	router := mustSocket(t, NewRouter)
	req := mustSocket(t, NewReq)
	mustDial(t, req, mustBind(t, router))
	req.Send(ctx, []byte("q"))
	m, err := router.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := append([]byte(nil), m.Frames[0]...)
	router.Send(ctx, id, []byte("no-delimiter"))
	router.Send(ctx, id, nil, []byte("good"))
	if got := recvString(t, ctx, req); !eq(got, "good") {
		t.Fatalf("req got %q", got)
	}
	if req.Stats().Refused[decodeguard.ReasonEnvelope] != 1 {
		t.Fatalf("envelope violations %d", req.Stats().Refused[decodeguard.ReasonEnvelope])
	}
}

func TestReconnectAfterPeerRestart(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	var log eventLog
	push := mustSocket(t, NewPush, func(o *Options) { o.OnEvent = log.add })
	mustDial(t, push, ep)
	push.Send(ctx, []byte("one"))
	if got := recvString(t, ctx, pull); !eq(got, "one") {
		t.Fatalf("got %q", got)
	}
	pull.Close()
	waitPeers(t, ctx, push, 0)
	pull2 := mustSocket(t, NewPull)
	if err := pull2.Bind(ep); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, pull2); !eq(got, "two") {
		t.Fatalf("got %q", got)
	}
	if log.count(EventConnected) < 2 || log.count(EventDisconnected) < 1 {
		t.Fatalf("events: %d connected, %d disconnected", log.count(EventConnected), log.count(EventDisconnected))
	}
}

func TestSubResubscribesAfterReconnect(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	xpub := mustSocket(t, NewXPub)
	ep := mustBind(t, xpub)
	sub := mustSocket(t, NewSub)
	if err := sub.Subscribe([]byte("a")); err != nil {
		t.Fatal(err)
	}
	mustDial(t, sub, ep)
	if got := recvString(t, ctx, xpub); !eq(got, "\x01a") {
		t.Fatalf("xpub got %q", got)
	}
	xpub.Close()
	waitPeers(t, ctx, sub, 0)
	xpub2 := mustSocket(t, NewXPub)
	if err := xpub2.Bind(ep); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, xpub2); !eq(got, "\x01a") {
		t.Fatalf("restarted xpub got %q", got)
	}
	xpub2.Send(ctx, []byte("b-not-for-you"))
	xpub2.Send(ctx, []byte("a-yes"))
	if got := recvString(t, ctx, sub); !eq(got, "a-yes") {
		t.Fatalf("sub got %q", got)
	}
}

func TestSubFilterAndUnsubscribe(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	xpub := mustSocket(t, NewXPub)
	sub := mustSocket(t, NewSub)
	mustDial(t, sub, mustBind(t, xpub))
	sub.Subscribe([]byte("x"))
	sub.Subscribe([]byte("y"))
	recvString(t, ctx, xpub)
	recvString(t, ctx, xpub)
	xpub.Send(ctx, []byte("x1"))
	xpub.Send(ctx, []byte("y1"))
	if got := recvString(t, ctx, sub); !eq(got, "x1") {
		t.Fatalf("got %q", got)
	}
	if got := recvString(t, ctx, sub); !eq(got, "y1") {
		t.Fatalf("got %q", got)
	}
	sub.Unsubscribe([]byte("x"))
	if got := recvString(t, ctx, xpub); !eq(got, "\x00x") {
		t.Fatalf("xpub got %q", got)
	}
	xpub.Send(ctx, []byte("x2"))
	xpub.Send(ctx, []byte("y2"))
	if got := recvString(t, ctx, sub); !eq(got, "y2") {
		t.Fatalf("got %q", got)
	}
	if err := sub.Send(ctx, []byte("x")); !errors.Is(err, errNotSupported) {
		t.Fatalf("SUB Send: %v", err)
	}
}

// rawPeer completes a guarded handshake with ep as socket type typ and
// returns the connection for hand-written traffic.
func rawPeer(t testing.TB, ctx context.Context, ep string, typ zmq4.SocketType, identity []byte) *zmtpguard.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := zmtpguard.Handshake(ctx, nc, zmtpguard.SocketType(typ), identity, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestXPubVerboseSubscriptions(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	xpub := mustSocket(t, NewXPub)
	ep := mustBind(t, xpub)
	c := rawPeer(t, ctx, ep, zmq4.XSub, nil)
	c.WriteMessage([]byte("\x01t"))
	c.WriteMessage([]byte("\x01t")) // again: verbose, delivered again
	c.WriteCommand(zmtpwire.CmdSubscribe, []byte("cmd"))
	c.WriteCommand(zmtpwire.CmdCancel, []byte("cmd"))
	c.WriteMessage([]byte("\x00t"))
	c.WriteMessage([]byte("hello"), []byte("data"))
	c.Flush()
	want := [][]string{{"\x01t"}, {"\x01t"}, {"\x01cmd"}, {"\x00cmd"}, {"\x00t"}, {"hello", "data"}}
	for _, w := range want {
		if got := recvString(t, ctx, xpub); !eq(got, w...) {
			t.Fatalf("got %q want %q", got, w)
		}
	}
	// Still subscribed once to "t": a publication reaches the peer.
	xpub.Send(ctx, []byte("tx"))
	var m zmtpguard.Message
	c.NetConn().SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := c.ReadMessage(&m); err != nil || string(m.Frames[0]) != "tx" {
		t.Fatalf("subscriber read %q, %v", m.Frames, err)
	}
	// Departure: the remaining topic is reported unsubscribed.
	c.Close()
	if got := recvString(t, ctx, xpub); !eq(got, "\x00t") {
		t.Fatalf("after departure got %q", got)
	}
}

func TestXPubPrefixFilter(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	xpub := mustSocket(t, NewXPub)
	ep := mustBind(t, xpub)
	a := mustSocket(t, NewSub)
	a.Subscribe([]byte("a"))
	mustDial(t, a, ep)
	all := mustSocket(t, NewSub)
	all.Subscribe(nil)
	mustDial(t, all, ep)
	recvString(t, ctx, xpub)
	recvString(t, ctx, xpub)
	xpub.Send(ctx, []byte("b1"))
	xpub.Send(ctx, []byte("a1"))
	if got := recvString(t, ctx, a); !eq(got, "a1") {
		t.Fatalf("a got %q", got)
	}
	if got := recvString(t, ctx, all); !eq(got, "b1") {
		t.Fatalf("all got %q", got)
	}
	if got := recvString(t, ctx, all); !eq(got, "a1") {
		t.Fatalf("all got %q", got)
	}
}

func TestPingAnsweredWithPong(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	pull := mustSocket(t, NewPull)
	c := rawPeer(t, ctx, mustBind(t, pull), zmq4.Push, nil)
	c.WriteCommand(zmtpwire.CmdPing, []byte{0, 10, 'c', 't', 'x'})
	c.WriteMessage([]byte("after-ping"))
	c.Flush()
	var m zmtpguard.Message
	c.NetConn().SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	if m.Command != zmtpwire.CmdPong || string(m.Frames[0]) != "ctx" {
		t.Fatalf("got command %q %q", m.Command, m.Frames)
	}
	if got := recvString(t, ctx, pull); !eq(got, "after-ping") {
		t.Fatalf("pull got %q", got)
	}
}

func TestCloseSemantics(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	waitPeers(t, ctx, pull, 1)
	blocked := make(chan error, 1)
	go func() {
		_, err := pull.Recv(ctx)
		blocked <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := pull.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Recv across Close: %v", err)
	}
	for i := 0; i < 3; i++ {
		if m, err := pull.Recv(ctx); !errors.Is(err, ErrClosed) || m.Frames != nil {
			t.Fatalf("Recv after Close: %q, %v", m.Frames, err)
		}
	}
	if err := pull.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := pull.Bind("tcp://127.0.0.1:0"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Bind after Close: %v", err)
	}
	if err := pull.Dial(ep); !errors.Is(err, ErrClosed) {
		t.Fatalf("Dial after Close: %v", err)
	}
	push.Close()
	if err := push.Send(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

func TestRecvContextCancel(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	pull := mustSocket(t, NewPull)
	mustBind(t, pull)
	c, cancel := context.WithCancel(ctx)
	go func() {
		time.Sleep(10 * time.Millisecond)
		cancel()
	}()
	if _, err := pull.Recv(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv: %v", err)
	}
	push := mustSocket(t, NewPush)
	if _, err := push.Recv(ctx); !errors.Is(err, errNotSupported) {
		t.Fatalf("PUSH Recv: %v", err)
	}
}

func TestEventsHandshakeFailure(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	var log eventLog
	pull := mustSocket(t, NewPull, func(o *Options) { o.OnEvent = log.add })
	ep := mustBind(t, pull)
	nc, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	defer nc.Close()
	poll.WaitForCtx(t, ctx, "handshake-failed event", func() bool { return log.count(EventHandshakeFailed) > 0 })
	e, _ := log.find(EventHandshakeFailed)
	if e.Reason != decodeguard.ReasonTransport || e.Remote != nc.LocalAddr().String() {
		t.Fatalf("event %v", e)
	}
	if pull.Stats().Refused[decodeguard.ReasonTransport] != 1 {
		t.Fatalf("violations %v", pull.Stats().Refused)
	}
	// A violation after the handshake is a disconnect with its reason.
	c := rawPeer(t, ctx, ep, zmq4.Push, nil)
	c.NetConn().Write([]byte{0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	poll.WaitForCtx(t, ctx, "disconnect event", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, e := range log.ev {
			if e.Kind == EventDisconnected && e.Reason == decodeguard.ReasonOversize {
				return true
			}
		}
		return false
	})
	if pull.Stats().Refused[decodeguard.ReasonOversize] != 1 {
		t.Fatalf("violations %v", pull.Stats().Refused)
	}
	if log.count(EventHandshakeFailed) != 1 {
		t.Fatalf("post-handshake violation reported as handshake failure")
	}
}

func TestDialFailureEventsAndBackoff(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	ln.Close()
	var log eventLog
	push := mustSocket(t, NewPush, func(o *Options) { o.OnEvent = log.add })
	mustDial(t, push, ep)
	poll.WaitForCtx(t, ctx, "dial failures", func() bool { return log.count(EventDialFailed) >= 2 })
}

func TestIPC(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	path := filepath.Join(t.TempDir(), "s.sock")
	// A stale socket file is replaced.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	pull := mustSocket(t, NewPull)
	if err := pull.Bind("ipc://" + path); err != nil {
		t.Fatal(err)
	}
	if pull.Endpoint() != "ipc://"+path {
		t.Fatalf("endpoint %q", pull.Endpoint())
	}
	push := mustSocket(t, NewPush)
	mustDial(t, push, "ipc://"+path)
	push.Send(ctx, []byte("over-ipc"))
	m, err := pull.Recv(ctx)
	if err != nil || string(m.Frames[0]) != "over-ipc" {
		t.Fatalf("%q %v", m.Frames, err)
	}
	if !strings.HasPrefix(m.Peer.Addr(), path+"#") {
		t.Fatalf("ipc peer addr %q", m.Peer.Addr())
	}
	// A live socket is not stolen.
	other := mustSocket(t, NewPull)
	if err := other.Bind("ipc://" + path); err == nil {
		t.Fatal("bound over a live ipc socket")
	}
}

func TestOptionsVerify(t *testing.T) {
	bad := []Options{
		{HWM: -1},
		{Identity: make([]byte, 256)},
		{ReconnectMin: -1},
		{BudgetWait: -time.Second},
		{Guard: zmtpguard.Config{MaxFrames: -1}},
	}
	for i, o := range bad {
		if err := checkOptions(o); err == nil {
			t.Errorf("case %d verified", i)
		}
		if _, err := NewPull(o); err == nil {
			t.Errorf("case %d: constructor accepted", i)
		}
	}
	o := DefaultOptions()
	if err := checkOptions(o); err != nil {
		t.Fatal(err)
	}
	if o.HWM != 1000 || o.ReconnectMin != 100*time.Millisecond || o.ReconnectMax != 5*time.Second {
		t.Fatalf("defaults %+v", o)
	}
}

func TestNotSupported(t *testing.T) {
	ctx := testCtx(t, 5*time.Second)
	pull := mustSocket(t, NewPull)
	if err := pull.Send(ctx, []byte("x")); !errors.Is(err, errNotSupported) {
		t.Fatal(err)
	}
	if err := pull.Subscribe([]byte("x")); !errors.Is(err, errNotSupported) {
		t.Fatal(err)
	}
	if err := pull.Reset(); !errors.Is(err, errNotSupported) {
		t.Fatal(err)
	}
}

func TestWriteTimeoutDisconnectsStuckPeer(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	var log eventLog
	router := mustSocket(t, NewRouter, func(o *Options) {
		o.WriteTimeout = 100 * time.Millisecond
		o.OnEvent = log.add
	})
	ep := mustBind(t, router)
	rawPeer(t, ctx, ep, zmq4.Dealer, []byte("stuck")) // never reads
	waitPeers(t, ctx, router, 1)
	big := make([]byte, 64<<10)
	poll.WaitForCtx(t, ctx, "write-timeout disconnect", func() bool {
		router.Send(ctx, []byte("stuck"), big)
		return router.Stats().Peers == 0
	})
	if router.Stats().Refused[decodeguard.ReasonPolicy] == 0 {
		t.Fatal("write timeout not counted")
	}
}

// A whole message followed by the first half of the next one, then a stall:
// the whole message must reach Recv at once, not wait for the second to
// complete (the reader batches only messages that are already buffered).
func TestPullDeliversBeforeSplitMessage(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	pull := mustSocket(t, NewPull)
	c := rawPeer(t, ctx, mustBind(t, pull), zmq4.Push, nil)
	defer c.Close()
	// Frame 1: "first" complete. Frame 2: header claims 100 bytes, 3 sent.
	raw := []byte{0, 5, 'f', 'i', 'r', 's', 't', 0, 100, 'a', 'b', 'c'}
	if _, err := c.NetConn().Write(raw); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	m, err := pull.Recv(rctx)
	if err != nil {
		t.Fatalf("first message held back behind a split one: %v", err)
	}
	if len(m.Frames) != 1 || string(m.Frames[0]) != "first" {
		t.Fatalf("got %q", m.Frames)
	}
}
