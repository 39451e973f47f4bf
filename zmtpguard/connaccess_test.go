package zmtpguard

import (
	"context"
	"testing"
	"time"
)

// TestConnAccess drives a loopback pair through the methods zmqguard's socket uses: a PING
// written with WriteCommand arrives as a PING, MessageBuffered sees it
// once it is in the read buffer, and NetConn is the connection under the
// Conn.
func TestConnAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialed := make(chan *Conn, 1)
	go func() {
		c, err := Dial(ctx, "tcp", l.Addr().String(), "PUSH", nil, nil)
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	srv, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli := <-dialed
	if cli == nil {
		t.FailNow()
	}
	defer cli.Close()

	// The client's NetConn is the TCP connection the server accepted: its
	// local address is the address the server's NetConn sees as remote.
	if cli.NetConn().LocalAddr().String() != srv.NetConn().RemoteAddr().String() {
		t.Fatal("NetConn is not the connection under the Conn")
	}
	if srv.messageBuffered() {
		t.Fatal("a message is buffered before any was sent")
	}
	if err := cli.WriteCommand(cmdPing, []byte{0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	if err := cli.WriteCommand(cmdPing, []byte{0, 1, 'y'}); err != nil {
		t.Fatal(err)
	}
	if err := cli.Flush(); err != nil {
		t.Fatal(err)
	}
	srv.NetConn().SetDeadline(time.Now().Add(20 * time.Second))
	var m Message
	if err := srv.ReadMessage(&m); err != nil || m.Command != cmdPing {
		t.Fatalf("read %q %v, want a PING", m.Command, err)
	}
	// Both PINGs left in one write (one Flush of 12 bytes on loopback), so
	// the first read took both: the second is buffered.
	if !srv.messageBuffered() {
		t.Fatal("the second PING is not reported as buffered")
	}
	if srv.ReadBufferBytes() == 0 {
		t.Fatal("no read buffer while reading")
	}
	if err := srv.ReadMessage(&m); err != nil || m.Command != cmdPing || string(m.Frames[0]) != "\x00\x01y" {
		t.Fatalf("read %q %q %v, want the second PING", m.Command, m.Frames, err)
	}
	if srv.Stalled() {
		t.Fatal("stalled without a budget")
	}
}
