package zmtpguard

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
)

// serveOne accepts one connection on a loopback listener and runs Handshake.
func serveOne(t *testing.T, local SocketType, cfg *Config) (addr string, result chan *Conn, errs chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	result = make(chan *Conn, 1)
	errs = make(chan error, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := Handshake(ctx, nc, local, nil, cfg)
		if err != nil {
			errs <- err
			return
		}
		result <- c
	}()
	return ln.Addr().String(), result, errs
}

func TestHandshakeWithZmq4Push(t *testing.T) {
	addr, result, errs := serveOne(t, "PULL", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	var c *Conn
	select {
	case c = <-result:
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("timeout")
	}
	defer c.Close()
	if c.Peer().SocketType != "PUSH" {
		t.Fatalf("peer type %q", c.Peer().SocketType)
	}
	if err := push.Send(zmq4.NewMsgFrom([]byte("hello"), []byte("world"))); err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 2 || string(m.Frames[0]) != "hello" || string(m.Frames[1]) != "world" {
		t.Fatalf("got %q", m.Frames)
	}
}

// TestOpenZMQRecover: if a READY the validator passed still made zmq4
// panic, the panic would cost one connection, not the process. The
// validator is bypassed here (ready already set) to reach zmq4 with a
// READY it panics on.
func TestOpenZMQRecover(t *testing.T) {
	g := localGreeting
	bad := readyFrame(prop("SOCKET-TYPE", "PUSH")) // zmq4 files it under another key and panics
	nc := newBytesConn(nil)
	hs := &handshakeConn{Conn: nc, cfg: &Config{}, local: "PULL", replay: append(g[:], bad...), swallow: true, ready: true}
	zc, err := openZMQ(hs, "PULL", nil)
	if zc != nil || decodeguard.ReasonOf(err) != decodeguard.ReasonDecoderPanic {
		t.Fatalf("openZMQ = %v, %v; want a decoder-panic violation", zc, err)
	}
}
