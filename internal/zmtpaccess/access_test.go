package zmtpaccess_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/zmtpaccess"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConnAccess drives a loopback pair through the lent methods: a PING
// written with WriteCommand arrives as a PING, MessageBuffered sees it
// once it is in the read buffer, and NetConn is the connection under the
// Conn.
func TestConnAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := zmtpguard.Listen(ctx, "tcp", "127.0.0.1:0", zmtpguard.Pull, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialed := make(chan *zmtpguard.Conn, 1)
	go func() {
		c, err := zmtpguard.Dial(ctx, "tcp", l.Addr().String(), zmtpguard.Push, nil, nil)
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

	if zmtpaccess.NetConn(cli).LocalAddr().String() != cli.LocalAddr().String() {
		t.Fatal("NetConn is not the connection under the Conn")
	}
	if zmtpaccess.MessageBuffered(srv) {
		t.Fatal("a message is buffered before any was sent")
	}
	if err := zmtpaccess.WriteCommand(cli, zmtpwire.CmdPing, []byte{0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	if err := zmtpaccess.WriteCommand(cli, zmtpwire.CmdPing, []byte{0, 1, 'y'}); err != nil {
		t.Fatal(err)
	}
	if err := cli.Flush(); err != nil {
		t.Fatal(err)
	}
	srv.SetDeadline(time.Now().Add(20 * time.Second))
	var m zmtpguard.Message
	if err := srv.ReadMessage(&m); err != nil || m.Command != zmtpwire.CmdPing {
		t.Fatalf("read %q %v, want a PING", m.Command, err)
	}
	// Both PINGs left in one write (one Flush of 12 bytes on loopback), so
	// the first read took both: the second is buffered.
	if !zmtpaccess.MessageBuffered(srv) {
		t.Fatal("the second PING is not reported as buffered")
	}
	if zmtpaccess.ReadBufferBytes(srv) == 0 {
		t.Fatal("no read buffer while reading")
	}
	if err := srv.ReadMessage(&m); err != nil || m.Command != zmtpwire.CmdPing || string(m.Frames[0]) != "\x00\x01y" {
		t.Fatalf("read %q %q %v, want the second PING", m.Command, m.Frames, err)
	}
	if zmtpaccess.Stalled(srv) {
		t.Fatal("stalled without a budget")
	}
}

// TestParsers checks the lent parsers on a valid READY and on bad input.
func TestParsers(t *testing.T) {
	g := zmtpwire.LocalGreeting()
	if err := zmtpaccess.CheckGreeting(g[:]); err != nil {
		t.Fatalf("own greeting refused: %v", err)
	}
	if err := zmtpaccess.CheckGreeting([]byte("GET / HTTP/1.1")); err == nil {
		t.Fatal("HTTP accepted as a greeting")
	}
	if size, ok, err := zmtpaccess.ParseFrameHeader([]byte{zmtpwire.FlagCommand, 5}, 10); !ok || err != nil || size != 5 {
		t.Fatalf("short header: %d %v %v", size, ok, err)
	}
	if _, _, err := zmtpaccess.ParseFrameHeader([]byte{zmtpwire.FlagLong, 0, 0, 0, 1, 0, 0, 0, 0}, 1<<20); err == nil {
		t.Fatal("a 2^32-byte frame passed a 1 MiB limit")
	}
	props := append([]byte{11}, "Socket-Type"...)
	props = append(props, 0, 0, 0, 4)
	props = append(props, "PUSH"...)
	cmd := append([]byte{5}, zmtpwire.CmdReady...)
	name, data, err := zmtpaccess.ParseCommand(append(cmd, props...))
	if err != nil || string(name) != zmtpwire.CmdReady {
		t.Fatalf("ParseCommand: %q %v", name, err)
	}
	if typ, err := zmtpaccess.ReadyType(data); err != nil || typ != "PUSH" {
		t.Fatalf("ReadyType: %q %v", typ, err)
	}
	if _, err := zmtpaccess.ReadyType(data[:len(data)-1]); err == nil {
		t.Fatal("a truncated READY passed")
	}
}
