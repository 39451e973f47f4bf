package zmtpguard

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

func listenPull(t *testing.T, cfg *Config) (*Listener, *sink) {
	t.Helper()
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	t.Cleanup(s.close)
	return l, s
}

func roundTrip(t *testing.T, l *Listener, s *sink, body string) {
	t.Helper()
	zmqPushRoundTrip(t, "tcp://"+l.Addr().String(), body, func(want string) error {
		return expectMsg(s.msgs, want, 10*time.Second)
	})
}

// violationLog collects what OnViolation receives.
type violationLog struct {
	mu sync.Mutex
	vs []Violation
}

func (v *violationLog) hook(x Violation) {
	v.mu.Lock()
	v.vs = append(v.vs, x)
	v.mu.Unlock()
}

func (v *violationLog) all() []Violation {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]Violation(nil), v.vs...)
}

func TestHandshakeDeadline(t *testing.T) {
	var log violationLog
	l, s := listenPull(t, &Config{HandshakeTimeout: 200 * time.Millisecond, OnViolation: log.hook})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Nothing is sent: the guard must close the connection by itself.
	if err := waitClosed(c, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, 5*time.Second, "the deadline violation", func() bool { return len(log.all()) == 1 })
	v := log.all()[0]
	if v.Reason != decodeguard.ReasonHandshake || !strings.Contains(v.Detail, "deadline") {
		t.Fatalf("violation %+v, want a handshake deadline", v)
	}
	if v.Remote != c.LocalAddr().String() {
		t.Fatalf("violation remote %q, want %q", v.Remote, c.LocalAddr())
	}
	roundTrip(t, l, s, "after deadline")
}

// TestPendingHandshakeCap: connections beyond MaxPendingHandshakes are
// admitted and evict the oldest pending handshake of their (single) host, so
// a real peer gets through while the pool is full of idle connections.
func TestPendingHandshakeCap(t *testing.T) {
	var log violationLog
	// Long deadlines: every violation in this test is an eviction or a
	// close by the test, never the clock.
	l, s := listenPull(t, &Config{MaxPendingHandshakes: 4, HandshakeTimeout: 20 * time.Second,
		GreetingTimeout: 20 * time.Second, OnViolation: log.hook})
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 10 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// One at a time, so that arrival order is dial order.
		poll.WaitFor(t, 5*time.Second, "the accept", func() bool { return l.Stats().Accepted == uint64(i+1) })
	}
	poll.WaitFor(t, 5*time.Second, "6 evictions", func() bool {
		return l.Stats().Refused[decodeguard.ReasonPolicy] == 6
	})
	// The 6 oldest were evicted, in arrival order, and closed.
	for i, v := range log.all() {
		if v.Reason != decodeguard.ReasonPolicy || !strings.HasPrefix(v.Detail, "evicted: MaxPendingHandshakes=4 reached") ||
			v.Remote != conns[i].LocalAddr().String() {
			t.Fatalf("violation %d: %+v, want the eviction of %s", i, v, conns[i].LocalAddr())
		}
		if err := waitClosed(conns[i], 5*time.Second); err != nil {
			t.Fatalf("evicted connection %d: %v", i, err)
		}
	}
	if st := l.Stats(); st.Pending != 4 || st.Evicted != 6 {
		t.Fatalf("stats %+v", st)
	}
	// A real peer (same host) gets through while the pool is full: it
	// evicts the oldest idle one, a seventh policy violation.
	roundTrip(t, l, s, "while the pool is full")
	for _, c := range conns {
		c.Close()
	}
	// The 3 idle connections left end as handshake violations (peer closed).
	poll.WaitFor(t, 10*time.Second, "the idle handshakes to end", func() bool {
		st := l.Stats()
		return st.Pending == 0 && st.Refused[decodeguard.ReasonHandshake] == 3
	})
	if st := l.Stats(); st.Refused[decodeguard.ReasonPolicy] != 7 || st.Evicted != 7 || st.Accepted != 11 ||
		st.Handshakes != 1 || st.Refused.Total() != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaxConnsCap(t *testing.T) {
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var accepted []*Conn
	defer func() {
		for _, c := range accepted {
			c.Close()
		}
	}()
	for range 2 {
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(handshakeAs("PUSH"))
		c, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, c)
	}
	third, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := waitClosed(third, 5*time.Second); err != nil {
		t.Fatalf("third connection over MaxConns: %v", err)
	}
	poll.WaitFor(t, 5*time.Second, "the policy refusal", func() bool {
		return l.Stats().Refused[decodeguard.ReasonPolicy] == 1
	})
	// Closing one accepted Conn frees its slot.
	accepted[0].Close()
	if got := l.Stats().Open; got != 1 {
		t.Fatalf("open = %d after one Close, want 1", got)
	}
	fourth, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	fourth.Write(handshakeAs("PUSH"))
	c, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	accepted = append(accepted, c)
}

func TestAllowlist(t *testing.T) {
	var log violationLog
	deny, _ := listenPull(t, &Config{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, OnViolation: log.hook})
	c, err := net.Dial("tcp", deny.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, 5*time.Second, "the refusal", func() bool { return len(log.all()) == 1 })
	v := log.all()[0]
	if v.Reason != decodeguard.ReasonPolicy || v.Remote != c.LocalAddr().String() {
		t.Fatalf("violation %+v", v)
	}
	if st := deny.Stats(); st.Refused[decodeguard.ReasonPolicy] != 1 || st.Handshakes != 0 {
		t.Fatalf("stats %+v", st)
	}

	allow, s := listenPull(t, &Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	roundTrip(t, allow, s, "allowed")
}

// fakeListener returns scripted accept results.
type fakeListener struct {
	mu      sync.Mutex
	script  []error // nil entries mean: return a connection
	forever error   // when set, returned by every call after the script
	calls   int
	closed  chan struct{}
	once    sync.Once
	peers   []net.Conn
}

type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

func newFakeListener(script []error) *fakeListener {
	return &fakeListener{script: script, closed: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	f.calls++
	if len(f.script) == 0 && f.forever != nil {
		f.mu.Unlock()
		return nil, f.forever
	}
	if len(f.script) == 0 {
		f.mu.Unlock()
		<-f.closed
		return nil, net.ErrClosed
	}
	next := f.script[0]
	f.script = f.script[1:]
	if next != nil {
		f.mu.Unlock()
		return nil, next
	}
	a, b := net.Pipe()
	f.peers = append(f.peers, b)
	f.mu.Unlock()
	return a, nil
}

func (f *fakeListener) Close() error {
	f.once.Do(func() {
		close(f.closed)
		f.mu.Lock()
		for _, p := range f.peers {
			p.Close()
		}
		f.mu.Unlock()
	})
	return nil
}

func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (f *fakeListener) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func TestAcceptBackoffSequence(t *testing.T) {
	var script []error
	for range 12 {
		script = append(script, tempErr{})
	}
	script = append(script, nil) // a success resets the back-off
	for range 3 {
		script = append(script, syscall.EMFILE)
	}
	fl := newFakeListener(script)
	l, err := newListener(fl, "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var waits []time.Duration
	l.loop.wait = func(d time.Duration, _ <-chan struct{}) {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
	}
	l.loop.start()
	poll.WaitFor(t, 5*time.Second, "the script to run", func() bool { return fl.callCount() == len(script)+1 })
	l.Close()
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms,
		time.Second, time.Second, time.Second, time.Second, 5 * ms, 10 * ms, 20 * ms}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	if st := l.Stats(); st.AcceptErrors != 15 || st.Accepted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestAcceptBackoffNoSpin runs the real back-off against a listener that
// fails forever: eight accepts need at least 5+10+...+640 ms of waiting, so
// a loop that spun would show thousands of calls instead.
func TestAcceptBackoffNoSpin(t *testing.T) {
	fl := newFakeListener(nil)
	fl.forever = tempErr{}
	l, err := NewListener(fl, "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	poll.WaitFor(t, 10*time.Second, "8 accept calls", func() bool { return fl.callCount() >= 8 })
	if el := time.Since(start); el < (5+10+20+40+80+160+320)*time.Millisecond {
		t.Fatalf("8 failing accepts took only %v: the loop does not back off", el)
	}
	if n := fl.callCount(); n > 12 {
		t.Fatalf("%d accept calls: the loop spins", n)
	}
}

func TestViolationHookFields(t *testing.T) {
	var log violationLog
	l, s := listenPull(t, &Config{OnViolation: log.hook})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := longHeader(0, 1<<40)
	c.Write(cat(handshakeAs("PUSH"), hdr))
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}

	h, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	esc := "\x1b[2J" + strings.Repeat("A", 100) // terminal escape and more than MaxPrefix bytes
	h.Write([]byte(esc))
	if err := waitClosed(h, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, 5*time.Second, "two violations", func() bool { return len(log.all()) == 2 })
	var over, junk *Violation
	for _, v := range log.all() {
		v := v
		switch v.Reason {
		case decodeguard.ReasonOversize:
			over = &v
		case decodeguard.ReasonTransport:
			junk = &v
		}
	}
	if over == nil || junk == nil {
		t.Fatalf("violations %+v", log.all())
	}
	if over.Remote != c.LocalAddr().String() || over.Length != 1<<40 || !bytes.Equal(over.Prefix, hdr) {
		t.Fatalf("oversize violation %+v", *over)
	}
	if junk.Remote != h.LocalAddr().String() || len(junk.Prefix) == 0 || len(junk.Prefix) > maxPrefix || junk.Prefix[0] != 0x1b {
		t.Fatalf("junk violation %+v", *junk)
	}
	if msg := junk.Error(); strings.ContainsRune(msg, 0x1b) || !strings.Contains(msg, "hex=1b") {
		t.Fatalf("violation text carries raw bytes or no hex: %q", msg)
	}
	if got := decodeguard.ReasonOf(junk); got != decodeguard.ReasonTransport {
		t.Fatalf("ReasonOf = %v", got)
	}
	st := l.Stats()
	if st.Refused[decodeguard.ReasonOversize] != 1 || st.Refused[decodeguard.ReasonTransport] != 1 || st.Refused.Total() != 2 {
		t.Fatalf("each violation must be counted once: %+v", st)
	}
	roundTrip(t, l, s, "after hook")
}

func TestListenerClose(t *testing.T) {
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Pending handshakes are aborted by Close.
	var conns []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// A finished handshake nobody accepted is closed by Close too.
	done, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer done.Close()
	done.Write(handshakeAs("PUSH"))
	poll.WaitFor(t, 5*time.Second, "the handshakes to start", func() bool {
		st := l.Stats()
		return st.Accepted == 6 && st.Handshakes == 1
	})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(conns, done) {
		if err := waitClosed(c, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Accept(context.Background()); !errors.Is(err, errListenerClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if st := l.Stats(); st.Open != 0 || st.Pending != 0 {
		t.Fatalf("stats after Close %+v", st)
	}
}

func TestAcceptContext(t *testing.T) {
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Accept with a cancelled context: %v", err)
	}
}

func TestListenBadArgs(t *testing.T) {
	if _, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "BOGUS", nil); err == nil {
		t.Fatal("unknown local type accepted")
	}
	if _, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxFrames: -1}); err == nil {
		t.Fatal("negative limit accepted")
	}
}

func TestDialGuarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	defer pull.Close()
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, "tcp", pull.Addr().String(), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Peer().SocketType != "PULL" {
		t.Fatalf("peer type %q", c.Peer().SocketType)
	}
	if err := c.WriteMessage([]byte("dialed"), []byte("two")); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	m, err := pull.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 2 || string(m.Frames[0]) != "dialed" {
		t.Fatalf("got %v", m)
	}
}

// TestDialSilentServer: a server that accepts TCP and never speaks is
// bounded by the handshake deadline.
func TestDialSilentServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	_, err = Dial(context.Background(), "tcp", ln.Addr().String(), "PUSH", nil, &Config{HandshakeTimeout: 200 * time.Millisecond})
	if decodeguard.ReasonOf(err) != decodeguard.ReasonHandshake {
		t.Fatalf("Dial to a silent server: %v", err)
	}
	if c := <-accepted; c != nil {
		c.Close()
	}
}

func TestUnixListener(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.sock")
	l, err := Listen(context.Background(), "unix", path, "PULL", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	zmqPushRoundTrip(t, "ipc://"+path, "over unix", func(want string) error {
		return expectMsg(s.msgs, want, 10*time.Second)
	})
}

// TestUnixAllowlistRefuses: a unix peer has no IP address, so a non-empty
// allowlist refuses it.
func TestUnixAllowlistRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.sock")
	l, err := Listen(context.Background(), "unix", path, "PULL", &Config{Allow: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := waitClosed(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, 5*time.Second, "the refusal", func() bool {
		return l.Stats().Refused[decodeguard.ReasonPolicy] == 1
	})
}
