package zmtpguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// dialFrom opens a raw TCP connection to addr from the loopback source
// address src (127.0.0.1 and 127.0.0.2 are both local on Linux, so the
// listener sees two different hosts).
func dialFrom(ctx context.Context, src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.DialContext(ctx, "tcp", addr)
}

// TestSlowloris: one host keeps the pending-handshake pool full with idle
// connections while a real peer on another host dials again and again; every
// real handshake must get through, and the idle connections are evicted
// (counted as policy violations).
//
// Before eviction existed, the pool refused every new connection while full
// and this test failed at the first real Dial.
func TestSlowloris(t *testing.T) {
	const poolSize, realDials = 8, 20
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	l, s := listenPull(t, &Config{MaxPendingHandshakes: poolSize})
	addr := l.Addr().String()

	// The attacker: idle connections from 127.0.0.2, as fast as the
	// listener takes them (paced only to spare the CPU: far faster than the
	// 2 s GreetingTimeout expires them), holding up to 256 open at a time,
	// until the real peer is done and at least minAttack were opened.
	const minAttack = 200
	stop := make(chan struct{})
	var attackWG sync.WaitGroup
	var attackErr error
	var opened int
	attackWG.Add(1)
	go func() {
		defer attackWG.Done()
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			select {
			case <-stop:
				if opened >= minAttack {
					return
				}
			case <-ctx.Done():
				return
			default:
			}
			c, err := dialFrom(ctx, "127.0.0.2", addr)
			if err != nil {
				if ctx.Err() == nil {
					attackErr = err
				}
				return
			}
			opened++
			held = append(held, c)
			if len(held) > 256 {
				held[0].Close()
				held = held[1:]
			}
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() {
		close(stop)
		attackWG.Wait()
	}()

	var lastEvicted uint64
	for i := range realDials {
		// Each real dial starts while the pool is full of idle connections
		// and the attacker is evicting its own (it did since the last dial).
		poll.WaitFor(t, 10*time.Second, "the attacker to fill the pool", func() bool {
			st := l.Stats()
			return st.Pending >= poolSize && st.Evicted > lastEvicted
		})
		lastEvicted = l.Stats().Evicted
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := Dial(dctx, "tcp", addr, "PUSH", nil, nil)
		dcancel()
		if err != nil {
			st := l.Stats()
			t.Fatalf("real dial %d of %d failed while the pool was full: %v (stats: accepted %d handshakes %d pending %d violations %s)",
				i+1, realDials, err, st.Accepted, st.Handshakes, st.Pending, formatDelta(st.Refused))
		}
		body := fmt.Sprintf("real %d", i)
		if err = c.WriteMessage([]byte(body)); err == nil {
			err = c.Flush()
		}
		if err != nil {
			c.Close()
			t.Fatalf("real peer %d: write: %v", i, err)
		}
		if err := expectMsg(s.msgs, body, 10*time.Second); err != nil {
			c.Close()
			t.Fatalf("real peer %d: %v", i, err)
		}
		c.Close()
	}
	close(stop)
	attackWG.Wait()
	stop = make(chan struct{}) // for the deferred close
	if attackErr != nil {
		t.Fatalf("attacker: %v", attackErr)
	}
	if opened < minAttack {
		t.Fatalf("attacker opened only %d connections (bounded by the test's context)", opened)
	}
	st := l.Stats()
	t.Logf("attacker opened %d idle connections; stats: accepted %d handshakes %d evicted %d violations %s",
		opened, st.Accepted, st.Handshakes, st.Evicted, formatDelta(st.Refused))
	if st.Handshakes != realDials {
		t.Errorf("%d handshakes completed, want exactly the %d real ones", st.Handshakes, realDials)
	}
	if st.Evicted == 0 {
		t.Error("no eviction counted")
	}
	// No allowlist and MaxConns not reached: every policy violation is an
	// eviction, counted once.
	if st.Refused[decodeguard.ReasonPolicy] != st.Evicted {
		t.Errorf("policy violations %d, want exactly the %d evictions", st.Refused[decodeguard.ReasonPolicy], st.Evicted)
	}
}

// TestEvictPerHost: when the pool is full, the host with the most pending
// handshakes loses its oldest one, counting the new connection; on a tie the
// oldest pending handshake overall goes.
func TestEvictPerHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log violationLog
	// Long deadlines: nothing may expire during the test.
	l, _ := listenPull(t, &Config{MaxPendingHandshakes: 4, HandshakeTimeout: 20 * time.Second,
		GreetingTimeout: 20 * time.Second, OnViolation: log.hook})
	addr := l.Addr().String()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// open dials from src and waits until the listener has accepted it, so
	// that arrival order is the order of the calls.
	open := func(src string) net.Conn {
		t.Helper()
		c, err := dialFrom(ctx, src, addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		n := uint64(len(conns))
		poll.WaitFor(t, 10*time.Second, "the accept", func() bool { return l.Stats().Accepted == n })
		return c
	}
	evicted := func(n int) []string {
		t.Helper()
		poll.WaitFor(t, 10*time.Second, "eviction "+itoa(n), func() bool { return len(log.all()) >= n })
		var remotes []string
		for _, v := range log.all() {
			if v.Reason != decodeguard.ReasonPolicy || !strings.HasPrefix(v.Detail, "evicted: MaxPendingHandshakes=4 reached") {
				t.Fatalf("unexpected violation %+v", v)
			}
			remotes = append(remotes, v.Remote)
		}
		return remotes
	}

	b1 := open("127.0.0.2")
	a1 := open("127.0.0.1")
	open("127.0.0.1")
	open("127.0.0.1")
	// Full: A has 3, B has 1. A new B connection makes B 2: A still has
	// the most, and loses its oldest.
	open("127.0.0.2")
	if got := evicted(1); got[0] != a1.LocalAddr().String() {
		t.Fatalf("first eviction hit %s, want A's oldest %s", got[0], a1.LocalAddr())
	}
	if err := waitClosed(a1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A 2, B 2; a third B connection makes B 3: B loses its oldest, b1.
	open("127.0.0.2")
	if got := evicted(2); got[1] != b1.LocalAddr().String() {
		t.Fatalf("second eviction hit %s, want B's oldest %s", got[1], b1.LocalAddr())
	}
	if err := waitClosed(b1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// A 2, B 2 again; a new host C (127.0.0.3) makes a tie of A and B at 2:
	// the oldest pending overall (A's second connection) goes.
	a2 := conns[2]
	open("127.0.0.3")
	if got := evicted(3); got[2] != a2.LocalAddr().String() {
		t.Fatalf("third eviction hit %s, want the oldest overall %s", got[2], a2.LocalAddr())
	}
	st := l.Stats()
	if st.Evicted != 3 || st.Refused[decodeguard.ReasonPolicy] != 3 || st.Refused.Total() != 3 || st.Pending != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGreetingTimeout: a peer that sends nothing is closed at
// GreetingTimeout, long before HandshakeTimeout.
func TestGreetingTimeout(t *testing.T) {
	var log violationLog
	l, s := listenPull(t, &Config{GreetingTimeout: 100 * time.Millisecond, HandshakeTimeout: 20 * time.Second, OnViolation: log.hook})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The bound is correctness, not timing: HandshakeTimeout is 20 s, so a
	// close within 10 s can only be the greeting deadline.
	if err := waitClosed(c, 10*time.Second); err != nil {
		t.Fatalf("silent peer not closed before HandshakeTimeout: %v", err)
	}
	poll.WaitFor(t, 5*time.Second, "the violation", func() bool { return len(log.all()) == 1 })
	v := log.all()[0]
	if v.Reason != decodeguard.ReasonHandshake || !strings.Contains(v.Detail, "GreetingTimeout") {
		t.Fatalf("violation %+v, want a greeting deadline", v)
	}
	roundTrip(t, l, s, "after the greeting deadline")
}

// TestGreetingTimeoutHalves: a greeting sent in two writes, and a READY sent
// after GreetingTimeout has passed (but the greeting did not), both pass:
// the greeting deadline covers the greeting only.
func TestGreetingTimeoutHalves(t *testing.T) {
	const greetTimeout = 100 * time.Millisecond
	l, s := listenPull(t, &Config{GreetingTimeout: greetTimeout, HandshakeTimeout: 20 * time.Second})
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	g := greetingWith(3, 0, "NULL")
	if _, err := c.Write(g[:20]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(g[20:]); err != nil {
		t.Fatal(err)
	}
	// Read the listener's greeting and READY: once its READY arrives, the
	// listener has read our whole greeting.
	if _, err := readUntilCommand(c, cmdReady, 15*time.Second); err != nil {
		t.Fatalf("listener READY: %v", err)
	}
	// Stalling past GreetingTimeout after the greeting is within the rules:
	// this wait is the condition under test, not synchronisation.
	time.Sleep(3 * greetTimeout)
	msg := cat(readyFrame(prop("Socket-Type", "PUSH")), dataFrame(false, []byte("halves")))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := expectMsg(s.msgs, "halves", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Handshakes != 1 || st.Refused.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGreetingTimeoutDialSide: Handshake applies GreetingTimeout on any
// connection; Dial does not (a server's greeting comes after its accept
// latency), so a silent server fails Dial at HandshakeTimeout.
func TestGreetingTimeoutDialSide(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := net.Dial("tcp", hostileServer(t, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	// The 10 s context is correctness: HandshakeTimeout is 20 s.
	_, err = Handshake(ctx, nc, "PUSH", nil, &Config{GreetingTimeout: 100 * time.Millisecond, HandshakeTimeout: 20 * time.Second})
	var v *Violation
	if !errors.As(err, &v) || v.Reason != decodeguard.ReasonHandshake || !strings.Contains(v.Detail, "GreetingTimeout") {
		t.Fatalf("Handshake with a silent server: %v", err)
	}
	_, err = Dial(ctx, "tcp", hostileServer(t, "", nil), "PUSH", nil,
		&Config{GreetingTimeout: 100 * time.Millisecond, HandshakeTimeout: 300 * time.Millisecond})
	if !errors.As(err, &v) || v.Reason != decodeguard.ReasonHandshake || strings.Contains(v.Detail, "GreetingTimeout") ||
		!strings.Contains(v.Detail, "handshake deadline") {
		t.Fatalf("Dial to a silent server: %v, want the handshake deadline", err)
	}
}

// TestEvictRaces drives the accept loop with a stand-in handshake that ends
// only when told, to check the two races of an eviction: a handshake that
// completes, or fails with a violation of its own, after it was evicted is
// neither handed out nor counted again; each connection ends in exactly one
// violation.
func TestEvictRaces(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ctr counters
	var log violationLog
	cfg := countingConfig(&Config{MaxPendingHandshakes: 1, OnViolation: log.hook}, &ctr)
	type outcome struct {
		ok bool // complete (else fail with a handshake violation)
	}
	proceed := map[net.Conn]chan outcome{}
	var mu sync.Mutex
	hs := func(hctx context.Context, nc net.Conn, release func(), _ *atomic.Uint32) (net.Conn, error) {
		mu.Lock()
		ch := proceed[nc]
		mu.Unlock()
		select {
		case o := <-ch:
			if o.ok {
				return &releaseConn{Conn: nc, release: release}, nil
			}
			nc.Close()
			return nil, violation(decodeguard.ReasonHandshake, "stand-in failure", -1, nil)
		case <-hctx.Done():
			nc.Close()
			return nil, hctx.Err()
		}
	}
	discarded := make(chan net.Conn, 3)
	loop := newAcceptLoop(ln, &cfg, &ctr, hs, func(c net.Conn) { c.Close(); discarded <- c.(*releaseConn).Conn })
	defer loop.close()
	conn := func() net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		mu.Lock()
		proceed[a] = make(chan outcome, 1)
		mu.Unlock()
		return a
	}
	c1, c2, c3 := conn(), conn(), conn()
	loop.admit(c1)
	loop.admit(c2) // evicts c1 (pipes are all one host)
	if v := log.all(); len(v) != 1 || v[0].Reason != decodeguard.ReasonPolicy || !strings.HasPrefix(v[0].Detail, "evicted:") {
		t.Fatalf("violations after the first eviction: %+v", v)
	}
	// c1's handshake completes anyway: it must be discarded, not handed out.
	proceed[c1] <- outcome{ok: true}
	select {
	case c := <-discarded:
		if c != c1 {
			t.Fatal("discarded the wrong connection")
		}
	case <-loop.ready:
		t.Fatal("an evicted handshake was handed out")
	case <-ctx.Done():
		t.Fatal("the evicted handshake was not discarded")
	}
	loop.admit(c3) // evicts c2
	// c2's handshake fails with its own violation: not reported again.
	proceed[c2] <- outcome{ok: false}
	// c3 completes normally and is handed out.
	proceed[c3] <- outcome{ok: true}
	select {
	case c := <-loop.ready:
		if c.(*releaseConn).Conn != c3 {
			t.Fatal("handed out the wrong connection")
		}
		c.Close()
	case <-ctx.Done():
		t.Fatal("c3 not handed out")
	}
	poll.WaitFor(t, 10*time.Second, "every handshake to end", func() bool {
		st := ctr.snapshot()
		return st.Pending == 0 && st.Open == 0
	})
	st := ctr.snapshot()
	if st.Evicted != 2 || st.Handshakes != 1 || st.Refused.Total() != 2 || st.Refused[decodeguard.ReasonPolicy] != 2 {
		t.Fatalf("stats %+v, violations %+v", st, log.all())
	}
	if loop.pending.len() != 0 || loop.pending.hostCount() != 0 {
		t.Fatalf("pool not empty: %d entries, %d hosts", loop.pending.len(), loop.pending.hostCount())
	}
}

// releaseConn is a stand-in handshake result that releases its slot on Close.
type releaseConn struct {
	net.Conn
	release func()
}

func (r *releaseConn) Close() error {
	err := r.Conn.Close()
	r.release()
	return err
}

// TestGreetingTimeoutConfig: the default, the clamp to HandshakeTimeout, and
// Verify's refusal of a negative value.
func TestGreetingTimeoutConfig(t *testing.T) {
	if d := DefaultConfig(); d.GreetingTimeout != defaultGreetingTimeout || d.GreetingTimeout > d.HandshakeTimeout {
		t.Fatalf("default GreetingTimeout %v (HandshakeTimeout %v)", d.GreetingTimeout, d.HandshakeTimeout)
	}
	for _, c := range []struct {
		in   Config
		want time.Duration
	}{
		{Config{HandshakeTimeout: 300 * time.Millisecond}, 300 * time.Millisecond},
		{Config{GreetingTimeout: 10 * time.Second}, defaultHandshakeTimeout},
		{Config{GreetingTimeout: 50 * time.Millisecond}, 50 * time.Millisecond},
		{Config{GreetingTimeout: 2 * time.Second, HandshakeTimeout: 3 * time.Second}, 2 * time.Second},
	} {
		if err := c.in.Verify(); err != nil {
			t.Errorf("Verify(%+v): %v", c.in, err)
		}
		if got := c.in.withDefaults().GreetingTimeout; got != c.want {
			t.Errorf("GreetingTimeout of %+v = %v, want %v", c.in, got, c.want)
		}
	}
	bad := Config{GreetingTimeout: -time.Second}
	if err := bad.Verify(); err == nil || !strings.Contains(err.Error(), "GreetingTimeout") {
		t.Fatalf("Verify of a negative GreetingTimeout: %v", err)
	}
}

// stalledConn is a connection whose owner "does not run" for a while before
// its first read: the first Read waits stall first, as a process descheduled
// on a loaded machine would.
type stalledConn struct {
	net.Conn
	stall time.Duration
	once  sync.Once
}

func (c *stalledConn) Read(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.stall) })
	return c.Conn.Read(p)
}

// TestGreetingTimeoutServerStalled: a greeting that arrived in time is
// taken even when the accepting side itself did not read until after
// GreetingTimeout (the deadline is about the peer, not about this process's
// scheduling). Without the grace read, the expired deadline fails the read
// although the bytes sit in the kernel.
func TestGreetingTimeoutServerStalled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const greetTimeout = 50 * time.Millisecond
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, "tcp", ln.Addr().String(), "PUSH", nil, nil)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc := &stalledConn{Conn: nc, stall: 4 * greetTimeout}
	c, err := Handshake(ctx, sc, "PULL", nil, &Config{GreetingTimeout: greetTimeout, HandshakeTimeout: 8 * time.Second})
	if err != nil {
		t.Fatalf("handshake after a stall of 4× GreetingTimeout, with the greeting already received: %v", err)
	}
	c.Close()
	if err := <-dialed; err != nil {
		t.Fatalf("dial: %v", err)
	}
}
