package socket

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

const python = "/usr/bin/python3"

// pyScript holds every pyzmq peer used by the interop tests, selected by
// its first argument.
const pyScript = `
import sys, zmq


def bind_port0(s, ep):
    """Binds s to ep on port 0: the kernel chooses the port (never a port
    picked by the library and retried); LAST_ENDPOINT says which."""
    s.bind(ep + ":0")
    return int(s.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
mode = sys.argv[1]
ctx = zmq.Context()
def out(*a):
    print(*a, flush=True)

if mode == "req":  # REQ -> our ROUTER
    s = ctx.socket(zmq.REQ); s.connect(sys.argv[2]); n = int(sys.argv[3])
    for i in range(n):
        s.send(b"q%d" % i)
        r = s.recv()
        assert r == b"re:q%d" % i, r
    out("OK", n)
elif mode == "dealer":  # DEALER -> our ROUTER
    s = ctx.socket(zmq.DEALER); s.setsockopt(zmq.IDENTITY, b"py-dealer"); s.connect(sys.argv[2]); n = int(sys.argv[3])
    for i in range(n):
        s.send_multipart([b"a", b"m%d" % i])
    for i in range(n):
        r = s.recv_multipart()
        assert r == [b"r%d" % i], r
    out("OK", n)
elif mode == "push":  # PUSH -> our PULL
    s = ctx.socket(zmq.PUSH); s.connect(sys.argv[2]); n = int(sys.argv[3])
    for i in range(n):
        s.send_multipart([b"p", b"%d" % i])
    out("SENT", n)
elif mode == "push_hb":  # PUSH -> our PULL, heartbeating every argv[4] ms
    s = ctx.socket(zmq.PUSH)
    s.setsockopt(zmq.HEARTBEAT_IVL, int(sys.argv[4]))
    s.setsockopt(zmq.HEARTBEAT_TIMEOUT, 30000)
    s.setsockopt(zmq.SNDHWM, 0)
    s.connect(sys.argv[2]); n = int(sys.argv[3]); k = int(sys.argv[5]); size = int(sys.argv[6])
    pad = b"x" * size
    for i in range(n):
        s.send_multipart([b"%d" % i] + [pad] * (k - 1))
    out("SENT", n)
    # Stay until the Go side has read everything (stdin closes): exiting
    # with our PONGs unread would reset the connection and lose what the
    # kernel still holds for the reader.
    sys.stdin.read()
    s.close(linger=0)
elif mode == "pull":  # our PUSH -> PULL (binds; argv[2] = port or 0)
    s = ctx.socket(zmq.PULL)
    port = int(sys.argv[2])
    if port == 0:
        port = bind_port0(s, "tcp://127.0.0.1")
    else:
        s.bind("tcp://127.0.0.1:%d" % port)
    out("PORT", port)
    n = int(sys.argv[3]); got = 0
    while got < n:
        f = s.recv_multipart()
        assert f[0] == b"m", f
        got += 1
    out("OK", got)
    s.close(linger=0)
elif mode == "sink":  # PULL for the benchmark: count messages, no checks
    import time
    s = ctx.socket(zmq.PULL); s.setsockopt(zmq.RCVHWM, 100000)
    port = bind_port0(s, "tcp://127.0.0.1")
    out("PORT", port)
    n = int(sys.argv[2])
    s.recv()
    t0 = time.perf_counter()
    for i in range(n - 1):
        s.recv()
    out("OK", n, "%.0f" % ((n - 1) / (time.perf_counter() - t0)))
    s.close(linger=0)
elif mode == "xsub":  # XSUB -> our XPUB
    s = ctx.socket(zmq.XSUB); s.connect(sys.argv[2])
    s.send(b"\x01top")
    out("SUBSCRIBED")
    r = s.recv_multipart()
    assert r == [b"top-1", b"body"], r
    s.send(b"from-xsub")
    s.send(b"\x00top")
    out("OK")
    s.close(linger=2000)
elif mode == "xpub":  # our SUB -> XPUB (binds; argv[2] = port or 0)
    s = ctx.socket(zmq.XPUB); s.setsockopt(zmq.XPUB_VERBOSE, 1)
    port = int(sys.argv[2])
    if port == 0:
        port = bind_port0(s, "tcp://127.0.0.1")
    else:
        s.bind("tcp://127.0.0.1:%d" % port)
    out("PORT", port)
    sub = s.recv()
    out("SUB", sub.hex())
    s.send(b"x-not-subscribed")
    s.send_multipart([b"t-data", sys.argv[3].encode()])
    # Wait for the Go side to say it is done (stdin closes).
    sys.stdin.read()
    s.close(linger=0)
else:
    raise SystemExit("unknown mode " + mode)
`

// pyPeer is a running Python peer.
type pyPeer struct {
	cmd   *exec.Cmd
	lines chan string
	stdin interface{ Close() error }
	wait  chan error
}

func requirePyzmq(t testing.TB) {
	t.Helper()
	pypeer.Require(t, "zmq")
}

func startPy(t testing.TB, ctx context.Context, args ...string) *pyPeer {
	t.Helper()
	cmd := exec.CommandContext(ctx, python, append([]string{"-c", pyScript}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyPeer{cmd: cmd, lines: make(chan string, 100), stdin: stdin, wait: make(chan error, 1)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		wg.Wait()
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, stderr.String())
		}
		p.wait <- err
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-p.wait
	})
	return p
}

// expect returns the next line, which must start with prefix.
func (p *pyPeer) expect(t testing.TB, ctx context.Context, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("python exited before %q: %v", prefix, <-p.wait)
		}
		if !strings.HasPrefix(l, prefix) {
			t.Fatalf("python said %q, want %q", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-ctx.Done():
		t.Fatalf("timed out waiting for python %q", prefix)
	}
	return ""
}

func (p *pyPeer) done(t testing.TB, ctx context.Context) {
	t.Helper()
	p.stdin.Close()
	select {
	case err := <-p.wait:
		p.wait <- err // for Cleanup
		if err != nil {
			t.Fatalf("python failed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("timed out waiting for python to exit")
	}
}

func TestInteropReqToRouter(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	const n = 200
	py := startPy(t, ctx, "req", ep, strconv.Itoa(n))
	for i := 0; i < n; i++ {
		m, err := router.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[1]) != 0 || string(m.Frames[2]) != fmt.Sprintf("q%d", i) {
			t.Fatalf("router got %q", m.Frames)
		}
		if err := router.Send(ctx, m.Frames[0], nil, append([]byte("re:"), m.Frames[2]...)); err != nil {
			t.Fatal(err)
		}
	}
	py.expect(t, ctx, "OK")
	py.done(t, ctx)
}

func TestInteropDealerToRouter(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	const n = 200
	py := startPy(t, ctx, "dealer", ep, strconv.Itoa(n))
	for i := 0; i < n; i++ {
		m, err := router.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || string(m.Frames[0]) != "py-dealer" || string(m.Frames[2]) != fmt.Sprintf("m%d", i) {
			t.Fatalf("router got %q", m.Frames)
		}
		if err := router.Send(ctx, m.Frames[0], []byte(fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	py.expect(t, ctx, "OK")
	py.done(t, ctx)
}

func TestInteropPushToPull(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	const n = 20000
	py := startPy(t, ctx, "push", ep, strconv.Itoa(n))
	for i := 0; i < n; i++ {
		got := recvString(t, ctx, pull)
		if !eq(got, "p", strconv.Itoa(i)) {
			t.Fatalf("message %d: %q", i, got)
		}
	}
	py.expect(t, ctx, "SENT")
	py.done(t, ctx)
}

// TestInteropHeartbeatInsideMultipart: libzmq sends its PING (and the
// PONG answering ours) between the frames of a multipart message when its
// heartbeat timer fires (zmtpguard/beats.go cites its source): with a 1 ms
// heartbeat on the pyzmq PUSH and on our PULL, and many long multipart
// messages, some land inside one. Every message arrives whole and in order
// (before zmtpguard accepted a heartbeat there, the connection was refused
// and Recv failed).
func TestInteropHeartbeatInsideMultipart(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 20*time.Second)
	var events []string
	var emu sync.Mutex
	pull := mustSocket(t, NewPull, func(o *Options) {
		o.HeartbeatInterval = time.Millisecond
		o.HeartbeatTimeout = 30 * time.Second
		o.OnEvent = func(e Event) {
			emu.Lock()
			events = append(events, fmt.Sprintf("%+v", e))
			emu.Unlock()
		}
	})
	defer func() {
		if t.Failed() {
			emu.Lock()
			t.Logf("events: %q; stats %+v", events, pull.Stats())
			emu.Unlock()
		}
	}()
	ep := mustBind(t, pull)
	const n, frames, size = 3000, 16, 512
	py := startPy(t, ctx, "push_hb", ep, strconv.Itoa(n), "1", strconv.Itoa(frames), strconv.Itoa(size))
	pad := strings.Repeat("x", size)
	for i := 0; i < n; i++ {
		m, err := pull.Recv(ctx)
		if err != nil {
			t.Fatalf("message %d: Recv: %v", i, err)
		}
		if len(m.Frames) != frames || string(m.Frames[0]) != strconv.Itoa(i) || string(m.Frames[frames-1]) != pad {
			t.Fatalf("message %d: %d frames, first %q", i, len(m.Frames), m.Frames[0])
		}
	}
	py.expect(t, ctx, "SENT")
	py.done(t, ctx)
}

func TestInteropOurPushToTheirPull(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	const n = 20000
	py := startPy(t, ctx, "pull", "0", strconv.Itoa(n))
	port := py.expect(t, ctx, "PORT")
	push := mustSocket(t, NewPush)
	mustDial(t, push, "tcp://127.0.0.1:"+port)
	for i := 0; i < n; i++ {
		if err := push.Send(ctx, []byte("m"), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	py.expect(t, ctx, "OK")
	py.done(t, ctx)
}

func TestInteropXSubToOurXPub(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	xpub := mustSocket(t, NewXPub)
	ep := mustBind(t, xpub)
	py := startPy(t, ctx, "xsub", ep)
	py.expect(t, ctx, "SUBSCRIBED")
	if got := recvString(t, ctx, xpub); !eq(got, "\x01top") {
		t.Fatalf("xpub got %q", got)
	}
	xpub.Send(ctx, []byte("other"), []byte("body"))
	xpub.Send(ctx, []byte("top-1"), []byte("body"))
	if got := recvString(t, ctx, xpub); !eq(got, "from-xsub") {
		t.Fatalf("xpub got %q", got)
	}
	if got := recvString(t, ctx, xpub); !eq(got, "\x00top") {
		t.Fatalf("xpub got %q", got)
	}
	py.expect(t, ctx, "OK")
	py.done(t, ctx)
}

func TestInteropOurSubToTheirXPub(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 30*time.Second)
	py := startPy(t, ctx, "xpub", "0", "one")
	port := py.expect(t, ctx, "PORT")
	sub := mustSocket(t, NewSub)
	sub.Subscribe([]byte("t"))
	mustDial(t, sub, "tcp://127.0.0.1:"+port)
	if got := py.expect(t, ctx, "SUB"); got != "0174" {
		t.Fatalf("python XPUB saw subscription %s", got)
	}
	if got := recvString(t, ctx, sub); !eq(got, "t-data", "one") {
		t.Fatalf("sub got %q", got)
	}
	py.done(t, ctx)
}

// TestInteropRestart: the Python side restarts on the same port mid-stream;
// our PUSH and SUB recover (the SUB re-sends its subscription).
func TestInteropRestart(t *testing.T) {
	requirePyzmq(t)
	ctx := testCtx(t, 60*time.Second)

	t.Run("PUSH", func(t *testing.T) {
		py1 := startPy(t, ctx, "pull", "0", "100")
		port := py1.expect(t, ctx, "PORT")
		push := mustSocket(t, NewPush)
		mustDial(t, push, "tcp://127.0.0.1:"+port)
		sendCtx, stop := context.WithCancel(ctx)
		sent := make(chan int, 1)
		go func() {
			i := 0
			for ; sendCtx.Err() == nil; i++ {
				if push.Send(sendCtx, []byte("m"), []byte(strconv.Itoa(i))) != nil {
					break
				}
				if i%50 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			sent <- i
		}()
		py1.expect(t, ctx, "OK")
		py1.done(t, ctx)
		py2 := startPy(t, ctx, "pull", port, "100")
		py2.expect(t, ctx, "PORT")
		py2.expect(t, ctx, "OK")
		stop()
		t.Logf("sent %d messages across the restart", <-sent)
		py2.done(t, ctx)
	})

	t.Run("SUB", func(t *testing.T) {
		py1 := startPy(t, ctx, "xpub", "0", "first")
		port := py1.expect(t, ctx, "PORT")
		sub := mustSocket(t, NewSub)
		sub.Subscribe([]byte("t"))
		mustDial(t, sub, "tcp://127.0.0.1:"+port)
		py1.expect(t, ctx, "SUB")
		if got := recvString(t, ctx, sub); !eq(got, "t-data", "first") {
			t.Fatalf("sub got %q", got)
		}
		py1.done(t, ctx)
		py2 := startPy(t, ctx, "xpub", port, "second")
		py2.expect(t, ctx, "PORT")
		if got := py2.expect(t, ctx, "SUB"); got != "0174" {
			t.Fatalf("restarted XPUB saw %s", got)
		}
		if got := recvString(t, ctx, sub); !eq(got, "t-data", "second") {
			t.Fatalf("sub got %q", got)
		}
		py2.done(t, ctx)
	})
}

// BenchmarkPushToPyzmqPull100: our PUSH sending 100-byte messages to a
// pyzmq (libzmq) PULL; the timer stops when Python has received them all.
// Python's own receive rate is reported as py-msgs/s.
func BenchmarkPushToPyzmqPull100(b *testing.B) {
	requirePyzmq(b)
	b.ReportAllocs()
	ctx := testCtx(b, 5*time.Minute)
	n := b.N + 1
	py := startPy(b, ctx, "sink", strconv.Itoa(n))
	port := py.expect(b, ctx, "PORT")
	push := mustSocket(b, NewPush)
	mustDial(b, push, "tcp://127.0.0.1:"+port)
	body := make([]byte, 100)
	if err := push.Send(ctx, body); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := push.Send(ctx, body); err != nil {
			b.Fatal(err)
		}
	}
	res := strings.Fields(py.expect(b, ctx, "OK"))
	b.StopTimer()
	if len(res) == 2 {
		if r, err := strconv.ParseFloat(res[1], 64); err == nil {
			b.ReportMetric(r, "py-msgs/s")
		}
	}
	py.done(b, ctx)
}
