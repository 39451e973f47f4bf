package loop

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestZMQ4Receiver runs a loop over a real zmq4 PULL on 127.0.0.1: the
// seeds are dropped, the valid message delivered, and cancelling the
// context ends Run.
func TestZMQ4Receiver(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := socket.FromZMQ4(pull)
	defer rcv.Close()

	for _, sd := range typedSeeds {
		if len(sd.frame) == 0 {
			continue
		}
		if err := push.Send(zmq4.NewMsg(sd.frame)); err != nil {
			t.Fatal(err)
		}
	}
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	l := newStatsLoop(t, rcv, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		checkStats(t, d.Value)
		cancel()
		return nil
	}, nil)
	if err := l.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	st := l.Stats()
	if st.Delivered != 1 || st.Dropped.Total() != uint64(len(typedSeeds)-1) ||
		st.Dropped[decodeguard.ReasonOversize] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// No Recv was blocked when ctx ended: the socket still works.
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Recv(testCtx(t)); err != nil || len(m.Frames) != 1 {
		t.Fatalf("Recv after Run = %v", err)
	}
}

// TestZMQ4ReceiverClosed: closing the receiver (from any goroutine) ends
// Run with an error wrapping net.ErrClosed.
func TestZMQ4ReceiverClosed(t *testing.T) {
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := socket.FromZMQ4(pull)
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	l := newStatsLoop(t, rcv, func(context.Context, Delivery[vllmwire.Message]) error {
		go rcv.Close() // unblocks the next Recv
		return nil
	}, nil)
	err := l.Run(testCtx(t))
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Run = %v", err)
	}
	if err := rcv.Close(); err != nil {
		t.Fatal(err)
	}
	// Recv on a cancelled context returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rcv.Recv(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestZMQ4ReceiverExternalClose: a zmq4 socket closed behind the adapter's
// back reads as closed too.
func TestZMQ4ReceiverExternalClose(t *testing.T) {
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := socket.FromZMQ4(pull)
	if err := pull.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.Recv(testCtx(t)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv = %v", err)
	}
	_ = rcv.Close()
}

// TestZMQ4ReceiverPeerLeaves: with two zmq4 publishers on one PULL, one
// that exits (a clean EOF) or resets its connection (TCP RST) ends only
// its own connection: Run goes on delivering the other's messages, the
// reset is counted as a transport drop and the clean exit as nothing
// (socket's TestZMQ4ReceiverDisconnect counts it as a disconnect).
func TestZMQ4ReceiverPeerLeaves(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull, stay := zmq4Pair(t, context.Background())
	defer stay.Close()
	rcv := socket.FromZMQ4(pull)
	defer rcv.Close()

	leave := zmq4.NewPush(context.Background())
	if err := leave.Dial("tcp://" + pull.Addr().String()); err != nil {
		t.Fatal(err)
	}
	reset := rawZMTPPush(t, pull.Addr().String())

	got := make(chan struct{}, 16)
	l := newStatsLoop(t, rcv, func(context.Context, Delivery[vllmwire.Message]) error {
		got <- struct{}{}
		return nil
	}, nil)
	runErr := make(chan error, 1)
	go func() { runErr <- l.Run(ctx) }()
	wait := func(what string) {
		t.Helper()
		select {
		case <-got:
		case err := <-runErr:
			t.Fatalf("%s: Run ended: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("%s: no delivery", what)
		}
	}

	// Each peer delivers once, so zmq4 has all three connections.
	if err := leave.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	wait("leaving peer")
	reset.sendFrame(t, statsFrame)
	wait("resetting peer")
	if err := stay.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	wait("staying peer")

	// One exits cleanly, one resets; the third still gets through.
	if err := leave.Close(); err != nil {
		t.Fatal(err)
	}
	reset.abort(t)
	for l.Stats().Dropped[decodeguard.ReasonTransport] == 0 {
		select {
		case err := <-runErr:
			t.Fatalf("Run ended after a peer left: %v", err)
		case <-ctx.Done():
			t.Fatalf("stats %+v", l.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := stay.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	wait("staying peer after the others left")
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if st := l.Stats(); st.Delivered != 4 || st.Dropped[decodeguard.ReasonTransport] != 1 || st.Dropped.Total() != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// rawPush is a ZMTP 3.0 PUSH peer written by hand, so that the test can
// reset its TCP connection (zmq4 hides its net.Conn).
type rawPush struct{ c *net.TCPConn }

func rawZMTPPush(t *testing.T, addr string) *rawPush {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	ready := []byte{0x04, 0, 5, 'R', 'E', 'A', 'D', 'Y', 11}
	ready = append(ready, "Socket-Type"...)
	ready = append(ready, 0, 0, 0, 4)
	ready = append(ready, "PUSH"...)
	ready[1] = byte(len(ready) - 2)
	if _, err := c.Write(append(g, ready...)); err != nil {
		t.Fatal(err)
	}
	// The peer's greeting and READY (64 bytes + a short command).
	peer := make([]byte, 64+2)
	if _, err := io.ReadFull(c, peer); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, int(peer[65]))); err != nil {
		t.Fatal(err)
	}
	return &rawPush{c: c.(*net.TCPConn)}
}

func (p *rawPush) sendFrame(t *testing.T, b []byte) {
	t.Helper()
	if len(b) > 255 {
		t.Fatal("frame too long for a short header")
	}
	if _, err := p.c.Write(append([]byte{0, byte(len(b))}, b...)); err != nil {
		t.Fatal(err)
	}
}

// abort closes the connection with a TCP RST.
func (p *rawPush) abort(t *testing.T) {
	t.Helper()
	if err := p.c.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if err := p.c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestZMQ4ReceiverGuardedOversize: the "wrap" migration path. A zmq4 PULL
// on the guarded transport meets a frame header claiming 2^40 bytes: the
// guard closes that connection (one transport drop), nothing is allocated,
// and the loop goes on delivering another peer's messages.
func TestZMQ4ReceiverGuardedOversize(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull, rcv, l, got := guardedZMQ4Loop(t, 4)
	defer rcv.Close()
	runErr := make(chan error, 1)
	go func() { runErr <- l.Run(ctx) }()

	bad := rawZMTPPush(t, pull.Addr().String())
	defer bad.c.Close()
	if _, err := bad.c.Write([]byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0}); err != nil { // 2^40
		t.Fatal(err)
	}
	for l.Stats().Dropped[decodeguard.ReasonTransport] == 0 {
		select {
		case err := <-runErr:
			t.Fatalf("Run ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("no transport drop: %+v", l.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	good := zmq4.NewPush(context.Background())
	defer good.Close()
	if err := good.Dial("tcp://" + pull.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := good.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case err := <-runErr:
		t.Fatalf("Run ended: %v", err)
	case <-ctx.Done():
		t.Fatal("no delivery after the oversize header")
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// closingReceiver is what socket.FromZMQ4 returns.
type closingReceiver interface {
	Receiver
	Close() error
}

// guardedZMQ4Loop is the "wrap" migration path set up for a test: a zmq4
// PULL bound on the guarded transport (registered once under a test
// scheme), wrapped by socket.FromZMQ4 under a stats loop whose handler signals got
// (buffered buf) per delivery. The caller runs the loop and closes rcv.
func guardedZMQ4Loop(t *testing.T, buf int) (zmq4.Socket, closingReceiver, *Loop[vllmwire.Message], chan struct{}) {
	t.Helper()
	const scheme = "zmqguard-loop-test"
	if !slices.Contains(zmq4.Transports(), scheme) {
		if _, err := zmtpguard.RegisterTransport(scheme, nil); err != nil {
			t.Fatal(err)
		}
	}
	pull := zmq4.NewPull(context.Background())
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	rcv := socket.FromZMQ4(pull)
	got := make(chan struct{}, buf)
	l := newStatsLoop(t, rcv, func(context.Context, Delivery[vllmwire.Message]) error {
		got <- struct{}{}
		return nil
	}, nil)
	return pull, rcv, l, got
}
