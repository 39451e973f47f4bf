package zmtpguard

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

func TestRegisterTransport(t *testing.T) {
	scheme := "zmqguardreg" + itoa(int(schemeSeq.Add(1)))
	if _, err := RegisterTransport(scheme, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := RegisterTransport(scheme, nil); err == nil {
		t.Fatal("duplicate scheme accepted")
	}
	if _, err := RegisterTransport("tcp", nil); err == nil {
		t.Fatal("tcp replaced")
	}
	if _, err := RegisterTransport("", nil); err == nil {
		t.Fatal("empty scheme accepted")
	}
	if _, err := RegisterTransport("x"+itoa(int(schemeSeq.Add(1))), &Config{MaxConns: -1}); err == nil {
		t.Fatal("invalid config accepted")
	}
	if !slices.Contains(zmq4.Transports(), scheme) {
		t.Fatalf("scheme %q not in %v", scheme, zmq4.Transports())
	}
	if _, err := newTransport("udp", nil); err == nil {
		t.Fatal("udp transport accepted")
	}
}

func TestTransportAddr(t *testing.T) {
	tr, err := newTransport("tcp", nil)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"127.0.0.1:5555": "127.0.0.1:5555",
		"*:5555":         "0.0.0.0:5555",
		"127.0.0.1:*":    "127.0.0.1:0",
		"[::1]:7":        "[::1]:7",
	} {
		got, err := tr.Addr(in)
		if err != nil || got != want {
			t.Errorf("Addr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := tr.Addr("no-port"); err == nil {
		t.Error("Addr without port accepted")
	}
	ux, _ := newTransport("unix", nil)
	if got, _ := ux.Addr("/tmp/x.sock"); got != "/tmp/x.sock" {
		t.Errorf("unix Addr = %q", got)
	}
}

// TestTransportDialSide: a zmq4 PUSH dialing on the guarded scheme talks to
// a plain zmq4 PULL.
func TestTransportDialSide(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	if err := push.Dial(scheme + "://" + pull.Addr().String()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := make([]byte, 300*i) // short and long frames
		if err := push.Send(zmq4.NewMsgFrom([]byte("m"), body)); err != nil {
			t.Fatal(err)
		}
		m, err := pull.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 2 || len(m.Frames[1]) != len(body) {
			t.Fatalf("got %d frames", len(m.Frames))
		}
	}
	if st := tr.Stats(); st.Handshakes != 1 || st.Refused.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// hostileServer accepts one connection, plays a ZMTP peer of type st, then
// sends extra.
func hostileServer(t *testing.T, st SocketType, extra []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hs []byte
		if st != "" {
			hs = handshakeAs(st)
		}
		c.Write(append(hs, extra...))
		waitClosed(c, 10*time.Second)
	}()
	return ln.Addr().String()
}

// TestTransportDialOversize: a server that sends a 2^40-byte frame header
// to a zmq4 PULL dialing on the guarded scheme costs one connection.
func TestTransportDialOversize(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", nil)
	addr := hostileServer(t, "PUSH", longHeader(0, 1<<40))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Dial(scheme + "://" + addr); err != nil {
		t.Fatal(err)
	}
	if _, err := pull.Recv(); err == nil {
		t.Fatal("Recv succeeded on an oversize frame")
	}
	poll.WaitFor(t, 5*time.Second, "the oversize violation", func() bool {
		return tr.Stats().Refused[decodeguard.ReasonOversize] == 1
	})
}

// TestTransportDialSilentServer: zmq4 alone waits forever for a server that
// accepts TCP and never speaks; on the guarded scheme Dial fails after the
// handshake deadline.
func TestTransportDialSilentServer(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", &Config{HandshakeTimeout: 200 * time.Millisecond})
	dialSilentServer(t, scheme)
	if st := tr.Stats(); st.Refused[decodeguard.ReasonHandshake] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTransportDialIncompatible: the compatibility check on the dialing
// side uses the local type read from zmq4's own READY.
func TestTransportDialIncompatible(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", nil)
	addr := hostileServer(t, "PUB", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	if err := push.Dial(scheme + "://" + addr); err == nil {
		t.Fatal("PUSH to a PUB accepted")
	}
	if st := tr.Stats(); st.Refused[decodeguard.ReasonHandshake] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTransportSubscribeCommand: ZMTP 3.1 SUBSCRIBE/CANCEL commands reach a
// zmq4 XPUB as the 3.0 subscription messages it understands.
func TestTransportSubscribeCommand(t *testing.T) {
	_, scheme := registerTestTransport(t, "tcp", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	xpub := zmq4.NewXPub(ctx, zmq4.WithLogger(quietLogger()))
	defer xpub.Close()
	if err := xpub.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	topics := xpub.(interface{ Topics() []string })
	c, err := net.Dial("tcp", xpub.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(cat(handshakeAs("SUB"), commandFrame(cmdSubscribe, []byte("weather")), commandFrame(cmdSubscribe, []byte("news"))))
	poll.WaitFor(t, 5*time.Second, "the subscriptions", func() bool {
		return slices.Equal(topics.Topics(), []string{"news", "weather"})
	})
	c.Write(commandFrame(cmdCancel, []byte("news")))
	poll.WaitFor(t, 5*time.Second, "the cancel", func() bool {
		return slices.Equal(topics.Topics(), []string{"weather"})
	})
}

func TestTransportAllowlist(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", &Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", pull.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, 5*time.Second, "the refusal", func() bool {
		return tr.Stats().Refused[decodeguard.ReasonPolicy] == 1
	})
}

func TestTransportUnix(t *testing.T) {
	_, scheme := registerTestTransport(t, "unix", nil)
	path := filepath.Join(t.TempDir(), "zmq.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://" + path); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 1)
	go func() {
		if m, err := pull.Recv(); err == nil {
			msgs <- string(m.Frames[0])
		}
	}()
	zmqPushRoundTrip(t, "ipc://"+path, "unix", func(want string) error {
		return expectMsg(msgs, want, 5*time.Second)
	})
}

func TestOutTracker(t *testing.T) {
	var stream []byte
	stream = append(stream, dataFrame(true, []byte("a"))...)
	stream = append(stream, dataFrame(false, make([]byte, 300))...)
	ends := []int{len(stream)}
	stream = append(stream, dataFrame(false, nil)...)
	ends = append(ends, len(stream))
	stream = append(stream, commandFrame(cmdPing, []byte{0, 1})...)
	ends = append(ends, len(stream))
	for chunk := 1; chunk <= len(stream); chunk++ {
		var o outTracker
		var boundaries []int
		for i := 0; i < len(stream); i += chunk {
			end := min(i+chunk, len(stream))
			for j := i; j < end; j++ {
				o.track(stream[j : j+1])
				if o.atBoundary() {
					boundaries = append(boundaries, j+1)
				}
			}
		}
		if !slices.Equal(boundaries, ends) {
			t.Fatalf("chunk %d: boundaries %v, want %v", chunk, boundaries, ends)
		}
	}
}

// TestTransportEvictAndGreeting: the transport's listener shares the
// Listener's accept loop: a full pending pool evicts, and a silent peer is
// closed at GreetingTimeout.
func TestTransportEvictAndGreeting(t *testing.T) {
	tr, scheme := registerTestTransport(t, "tcp", &Config{MaxPendingHandshakes: 2,
		GreetingTimeout: 2 * time.Second, HandshakeTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 3 {
		c, err := net.Dial("tcp", pull.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		poll.WaitFor(t, 5*time.Second, "the accept", func() bool { return tr.Stats().Accepted == uint64(i+1) })
	}
	// The third evicted the first.
	if err := waitClosed(conns[0], 5*time.Second); err != nil {
		t.Fatalf("oldest idle connection not evicted: %v", err)
	}
	if st := tr.Stats(); st.Evicted != 1 || st.Refused[decodeguard.ReasonPolicy] != 1 || st.Pending != 2 {
		t.Fatalf("stats %+v", st)
	}
	// The other two are closed at GreetingTimeout (2 s), long before the
	// 20 s HandshakeTimeout: the 10 s bound is correctness, not timing.
	for _, c := range conns[1:] {
		if err := waitClosed(c, 10*time.Second); err != nil {
			t.Fatalf("silent peer not closed at GreetingTimeout: %v", err)
		}
	}
	poll.WaitFor(t, 5*time.Second, "the greeting violations", func() bool {
		return tr.Stats().Refused[decodeguard.ReasonHandshake] == 2
	})
	if st := tr.Stats(); st.Refused.Total() != 3 || st.Pending != 0 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTransportDialGreetingTimeout: the dialing side does not apply
// GreetingTimeout (as Dial): a silent server fails at HandshakeTimeout.
func TestTransportDialGreetingTimeout(t *testing.T) {
	var log violationLog
	_, scheme := registerTestTransport(t, "tcp", &Config{GreetingTimeout: 100 * time.Millisecond,
		HandshakeTimeout: 300 * time.Millisecond, OnViolation: log.hook})
	dialSilentServer(t, scheme)
	vs := log.all()
	if len(vs) == 0 || vs[0].Reason != decodeguard.ReasonHandshake || strings.Contains(vs[0].Detail, "GreetingTimeout") ||
		!strings.Contains(vs[0].Detail, "handshake deadline") {
		t.Fatalf("violations %+v, want the handshake deadline", vs)
	}
}

// dialSilentServer dials, with a zmq4 PUSH on the guarded scheme, a server
// that accepts TCP and never speaks: the Dial must fail (not hang).
func dialSilentServer(t *testing.T, scheme string) {
	t.Helper()
	addr := hostileServer(t, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	errc := make(chan error, 1)
	go func() { errc <- push.Dial(scheme + "://" + addr) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Dial to a silent server succeeded")
		}
	case <-ctx.Done():
		t.Fatal("Dial to a silent server hangs")
	}
}
