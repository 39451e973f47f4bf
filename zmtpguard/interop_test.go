package zmtpguard

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

const python = "/usr/bin/python3"

func requirePyzmq(t *testing.T) {
	t.Helper()
	pypeer.Require(t, "zmq")
}

// runPython runs script with the endpoint as its argument and returns a
// channel that yields its combined output and error when it exits.
func runPython(t *testing.T, ctx context.Context, script, endpoint string) <-chan error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "peer.py")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	cmd := exec.CommandContext(ctx, python, path, endpoint)
	go func() {
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = errors.New(err.Error() + ": " + string(out))
		} else {
			t.Logf("python: %s", strings.TrimSpace(string(out)))
		}
		done <- err
	}()
	return done
}

func acceptOne(t *testing.T, ctx context.Context, l *Listener) *Conn {
	t.Helper()
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	return c
}

const pyDealer = `
import sys, time, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.IDENTITY, b"py-dealer")
s.setsockopt(zmq.HEARTBEAT_IVL, 20)
s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
s.setsockopt(zmq.RCVTIMEO, 10000)
s.setsockopt(zmq.LINGER, 2000)
s.connect(sys.argv[1])
s.send_multipart([b"hello", b"x" * 1000])
reply = s.recv_multipart()
assert reply == [b"reply", b"ok"], reply
time.sleep(0.3)  # long enough for several heartbeats
s.send_multipart([b"bye"])
s.close()
ctx.term()
print("dealer ok", zmq.zmq_version())
`

func TestInteropPyzmqDealer(t *testing.T) {
	requirePyzmq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "ROUTER", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := runPython(t, ctx, pyDealer, "tcp://"+l.Addr().String())
	c := acceptOne(t, ctx, l)
	defer c.Close()
	if c.Peer().SocketType != "DEALER" || c.Peer().Identity != "py-dealer" {
		t.Fatalf("peer %q identity %q", c.Peer().SocketType, c.Peer().Identity)
	}
	var m Message
	if err := c.ReadMessage(&m); err != nil {
		t.Fatal(err)
	}
	for m.Command == cmdPing {
		c.Pong(&m)
		c.Flush()
		if err := c.ReadMessage(&m); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Frames) != 2 || string(m.Frames[0]) != "hello" || len(m.Frames[1]) != 1000 {
		t.Fatalf("got %q", m.Frames)
	}
	if err := c.WriteMessage([]byte("reply"), []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	pings := 0
	for {
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("reading until bye: %v", err)
		}
		if m.Command == cmdPing {
			pings++
			c.Pong(&m)
			c.Flush()
			continue
		}
		if m.Command != "" {
			t.Fatalf("unexpected command %q", m.Command)
		}
		if len(m.Frames) == 1 && string(m.Frames[0]) == "bye" {
			break
		}
		t.Fatalf("unexpected message %q", m.Frames)
	}
	// libzmq sends PING commands when ZMQ_HEARTBEAT_IVL is set: they must
	// arrive as commands (answered with PONG), never as data.
	if pings == 0 {
		t.Fatal("no PING command seen from a heartbeating libzmq peer")
	}
	t.Logf("%d PINGs answered", pings)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

const pyPush = `
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.PUSH)
s.setsockopt(zmq.LINGER, 5000)
s.connect(sys.argv[1])
for i in range(100):
    s.send_multipart([b"msg", str(i).encode(), b"y" * (i * 7)])
s.close()
ctx.term()
print("push ok")
`

func TestInteropPyzmqPush(t *testing.T) {
	requirePyzmq(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Listen(ctx, "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := runPython(t, ctx, pyPush, "tcp://"+l.Addr().String())
	c := acceptOne(t, ctx, l)
	defer c.Close()
	if c.Peer().SocketType != "PUSH" {
		t.Fatalf("peer %q", c.Peer().SocketType)
	}
	// libzmq 4.3.4 announces ZMTP 3.1: it is sent PINGs.
	if major, minor := c.Peer().Major, c.Peer().Minor; major != 3 || minor != 1 {
		t.Errorf("libzmq announced ZMTP %d.%d, want 3.1", major, minor)
	}
	var m Message
	for i := range 100 {
		if err := c.ReadMessage(&m); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m.Frames) != 3 || string(m.Frames[1]) != itoa(i) || len(m.Frames[2]) != i*7 {
			t.Fatalf("message %d: %d frames", i, len(m.Frames))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

const pySub = `
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.setsockopt(zmq.SUBSCRIBE, b"topic")
s.setsockopt(zmq.RCVTIMEO, 10000)
s.setsockopt(zmq.LINGER, 0)
s.connect(sys.argv[1])
msg = s.recv_multipart()
assert msg == [b"topic", b"data"], msg
s.close()
ctx.term()
print("sub ok")
`

func TestInteropPyzmqSub(t *testing.T) {
	requirePyzmq(t)
	for _, local := range []SocketType{"XPUB", "PUB"} {
		t.Run(string(local), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := Listen(ctx, "tcp", "127.0.0.1:0", local, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			done := runPython(t, ctx, pySub, "tcp://"+l.Addr().String())
			c := acceptOne(t, ctx, l)
			defer c.Close()
			if c.Peer().SocketType != "SUB" {
				t.Fatalf("peer %q", c.Peer().SocketType)
			}
			var m Message
			if err := c.ReadMessage(&m); err != nil {
				t.Fatal(err)
			}
			// The guard greets as ZMTP 3.0, so libzmq subscribes with the
			// 3.0 message "\x01topic"; a 3.1 SUBSCRIBE command would be
			// returned as Command == "SUBSCRIBE" with data "topic".
			switch {
			case m.Command == "" && len(m.Frames) == 1 && string(m.Frames[0]) == "\x01topic":
				t.Logf("subscription arrived as the ZMTP 3.0 message %q", m.Frames[0])
			case m.Command == cmdSubscribe && string(m.Frames[0]) == "topic":
				t.Logf("subscription arrived as a SUBSCRIBE command")
			default:
				t.Fatalf("subscription: command %q frames %q", m.Command, m.Frames)
			}
			if err := c.WriteMessage([]byte("other"), []byte("filtered")); err != nil {
				t.Fatal(err)
			}
			if err := c.WriteMessage([]byte("topic"), []byte("data")); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInteropPyzmqPushTransport: a libzmq PUSH into an unmodified zmq4 PULL
// bound on the guarded scheme.
func TestInteropPyzmqPushTransport(t *testing.T) {
	requirePyzmq(t)
	tr, scheme := registerTestTransport(t, "tcp", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	done := runPython(t, ctx, pyPush, "tcp://"+pull.Addr().String())
	for i := range 100 {
		m, err := pull.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m.Frames) != 3 || string(m.Frames[1]) != itoa(i) || len(m.Frames[2]) != i*7 {
			t.Fatalf("message %d: %d frames", i, len(m.Frames))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Handshakes != 1 || st.Refused.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}
