package zmtpguard

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestGreetingAnnounces31: every greeting the guard sends (Handshake on
// either side, the CURVE greeting, the transport's listening and dialing
// sides) says ZMTP 3.1, so zmqguard peers heartbeat each other; zmq4's own
// greeting, which the guard swallows, says 3.0.
func TestGreetingAnnounces31(t *testing.T) {
	if localGreeting[10] != 3 || localGreeting[11] != 1 {
		t.Fatalf("local greeting announces %d.%d, want 3.1", localGreeting[10], localGreeting[11])
	}
	if g := curveGreeting(true); g[10] != 3 || g[11] != 1 {
		t.Fatalf("CURVE greeting announces %d.%d, want 3.1", g[10], g[11])
	}
	if zmq4Greeting[10] != 3 || zmq4Greeting[11] != 0 {
		t.Fatalf("zmq4 greeting announces %d.%d, want 3.0", zmq4Greeting[10], zmq4Greeting[11])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// A raw peer reads the greeting Handshake writes first.
	addr, result, errs := serveOne(t, "PULL", nil)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	var g [greetingSize]byte
	if _, err := io.ReadFull(nc, g[:]); err != nil {
		t.Fatal(err)
	}
	if g[10] != 3 || g[11] != 1 {
		t.Fatalf("Handshake sent version %d.%d, want 3.1", g[10], g[11])
	}
	nc.Close()
	select {
	case c := <-result:
		c.Close()
	case <-errs:
	case <-ctx.Done():
		t.Fatal("handshake did not end")
	}

	// The transport's dialing side: a zmq4 PUSH dialing on the guarded
	// scheme reaches a Listener as a 3.1 peer (the guard's greeting went
	// out in place of zmq4's).
	_, scheme := registerTestTransport(t, "tcp", nil)
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	if err := push.Dial(scheme + "://" + l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if major, minor := c.Peer().Major, c.Peer().Minor; major != 3 || minor != 1 {
		t.Fatalf("transport-dialed zmq4 PUSH announced %d.%d, want 3.1", major, minor)
	}
	// The zmq4 PUSH still works through it.
	if err := push.Send(zmq4.NewMsgFrom([]byte("hi"))); err != nil {
		t.Fatal(err)
	}
	var m Message
	c.NetConn().SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.ReadMessage(&m); err != nil || len(m.Frames) != 1 || string(m.Frames[0]) != "hi" {
		t.Fatalf("read %q, %v", m.Frames, err)
	}

	// The transport's listening side: a Dial to a transport-bound zmq4
	// PULL sees a 3.1 peer.
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	dc, err := Dial(ctx, "tcp", pull.Addr().String(), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if major, minor := dc.Peer().Major, dc.Peer().Minor; major != 3 || minor != 1 {
		t.Fatalf("transport-bound zmq4 PULL announced %d.%d, want 3.1", major, minor)
	}
}

// TestPeerVersion: a plain zmq4 peer is seen at ZMTP 3.0, a zmtpguard peer
// at 3.1.
func TestPeerVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	if err := push.Dial("tcp://" + l.Addr().String()); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if major, minor := c.Peer().Major, c.Peer().Minor; major != 3 || minor != 0 {
		t.Fatalf("zmq4 PUSH announced %d.%d, want 3.0", major, minor)
	}
	d, err := Dial(ctx, "tcp", l.Addr().String(), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c2, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if major, minor := c2.Peer().Major, c2.Peer().Minor; major != 3 || minor != 1 {
		t.Fatalf("zmtpguard Dial announced %d.%d, want 3.1", major, minor)
	}
	if major, minor := d.Peer().Major, d.Peer().Minor; major != 3 || minor != 1 {
		t.Fatalf("zmtpguard Listener announced %d.%d, want 3.1", major, minor)
	}
}
