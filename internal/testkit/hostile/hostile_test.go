package hostile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quietOptions() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// target binds a hardened socket of the given constructor on loopback and
// keeps receiving from it until the test ends.
func target(t *testing.T, typ zmtpguard.SocketType) (*socket.Socket, string) {
	t.Helper()
	s, err := socket.New(typ, quietOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		s.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if _, err := s.Recv(ctx); err != nil {
				return
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		s.Close()
		wg.Wait()
	})
	return s, s.Endpoint()
}

func TestSplitEndpoint(t *testing.T) {
	for _, c := range []struct{ in, network, addr string }{
		{"tcp://127.0.0.1:5600", "tcp", "127.0.0.1:5600"},
		{"127.0.0.1:5600", "tcp", "127.0.0.1:5600"},
		{"tcp://[::1]:1", "tcp", "[::1]:1"},
		{"ipc:///tmp/x.sock", "unix", "/tmp/x.sock"},
	} {
		n, a, err := SplitEndpoint(c.in)
		if err != nil || n != c.network || a != c.addr {
			t.Errorf("SplitEndpoint(%q) = %q, %q, %v", c.in, n, a, err)
		}
	}
	for _, bad := range []string{"", "tcp://", "tcp://*:1", "tcp://h:0", "tcp://h:x", "udp://h:1", "ipc://", "h"} {
		if _, _, err := SplitEndpoint(bad); err == nil {
			t.Errorf("SplitEndpoint(%q) accepted", bad)
		}
	}
}

func TestDiscoverAndAlive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		ctor zmtpguard.SocketType
		want zmq4.SocketType
	}{
		{"ROUTER", zmq4.Router},
		{"PULL", zmq4.Pull},
		{"XPUB", zmq4.XPub},
	} {
		s, ep := target(t, c.ctor)
		got, err := Discover(ctx, ep, time.Second)
		if err != nil || got != c.want {
			t.Fatalf("Discover(%s) = %q, %v; want %q", c.want, got, err, c.want)
		}
		if err := Alive(ctx, ep, got, time.Second); err != nil {
			t.Fatalf("Alive(%s): %v", c.want, err)
		}
		if v := s.Stats().Refused; v[0] != 0 {
			t.Fatalf("unexpected stats %v", v)
		}
	}
}

func TestAliveClosedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Alive(ctx, ep, zmq4.Router, 300*time.Millisecond); err == nil {
		t.Fatal("Alive succeeded on a closed port")
	}
	if _, err := Discover(ctx, ep, 300*time.Millisecond); err == nil {
		t.Fatal("Discover succeeded on a closed port")
	}
	rep, err := Scan(ctx, []string{ep}, ScanConfig{Options: Options{Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Unreachable[0] == "" || rep.Sent() != 0 {
		t.Fatalf("a closed port scanned OK: %+v", rep)
	}
}

func TestCorpusShape(t *testing.T) {
	ps := Corpus(Options{})
	names := map[string]bool{}
	classes := map[string]int{}
	for _, p := range ps {
		if names[p.Name] {
			t.Errorf("duplicate probe %q", p.Name)
		}
		names[p.Name] = true
		classes[p.Class]++
		if p.Run == nil {
			t.Errorf("probe %q has no Run", p.Name)
		}
	}
	for _, want := range []string{
		"idle-connection", "half-greeting", "http-get", "tls-client-hello", "random-64KiB",
		"zmtp1.0-greeting", "zmtp2.0-greeting", "mechanism-plain", "mechanism-curve",
		"frame-claims-2^40", "ready-truncated-property", "ready-no-socket-type",
		"ready-unknown-socket-type", "connect-close-burst-100",
		"envelope-no-delimiter", "envelope-3-frames", "envelope-70-frames",
		"payload-a3e08080", "payload-818001", "payload-nesting-20000", "payload-ddffffffff",
		"payload-45", "payload-empty-frame", "payload-1MiB+1",
	} {
		if !names[want] {
			t.Errorf("corpus lacks %q", want)
		}
	}
	if classes[ClassTransport] == 0 || classes[ClassEnvelope] != 3 || classes[ClassPayload] != 7 {
		t.Errorf("classes = %v", classes)
	}
	if h := clientHello(); h[0] != 0x16 || int(h[3])<<8|int(h[4]) != len(h)-5 {
		t.Errorf("ClientHello record length wrong: % x", h[:5])
	}
}

// TestScanHardenedSockets replays the whole corpus once at a ROUTER, a PULL
// and an XPUB: all must still answer, and each must have counted the attacks.
func TestScanHardenedSockets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	router, r := target(t, "ROUTER")
	pull, p := target(t, "PULL")
	xpub, x := target(t, "XPUB")
	var mu sync.Mutex
	events := 0
	rep, err := Scan(ctx, []string{r, p, x}, ScanConfig{
		// The liveness check's bound is generous: this test is about a
		// socket surviving the probes, not about its latency under -race
		// on a loaded 2-CPU machine.
		Options: Options{Hold: 150 * time.Millisecond, Timeout: 5 * time.Second},
		OnProbe: func(Event) { mu.Lock(); events++; mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !rep.OK() {
		for _, r := range rep.Results {
			if r.Dead > 0 {
				fmt.Fprintf(&b, "%s after %s: %s\n", r.Target, r.Probe, r.LastError)
			}
		}
		t.Fatalf("a hardened socket stopped answering:\n%s", b.String())
	}
	n := len(Corpus(Options{}))
	if events != 3*n || rep.Sent() != uint64(3*n) {
		t.Fatalf("events %d, sent %d, want %d each:\n%s", events, rep.Sent(), 3*n, b.String())
	}
	for i, s := range []*socket.Socket{router, pull, xpub} {
		st := s.Stats()
		var v uint64
		for _, c := range st.Refused {
			v += c
		}
		if v < 10 {
			t.Errorf("%s counted only %d violations: %+v", rep.Types[i], v, st)
		}
		if rep.Passes[i] != 1 {
			t.Errorf("passes = %v", rep.Passes)
		}
	}
	if !strings.Contains(b.String(), "payload-818001") || !strings.Contains(b.String(), "still answering") {
		t.Fatalf("table lacks rows:\n%s", b.String())
	}
}

// wedgeable is a listener that runs each handshake inline in its accept
// loop with no deadline, as zmq4's own listener does: one idle connection
// stops it from answering anyone else.
func wedgeable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			c, err := zmtpguard.Handshake(ctx, nc, "ROUTER", nil, &zmtpguard.Config{HandshakeTimeout: time.Hour, GreetingTimeout: time.Hour})
			if err == nil {
				c.Close()
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "tcp://" + ln.Addr().String()
}

func TestScanDetectsWedgedListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep := wedgeable(t)
	var idle Probe
	for _, p := range Corpus(Options{}) {
		if p.Name == "idle-connection" {
			idle = p
		}
	}
	opts := Options{Hold: 100 * time.Millisecond, Timeout: 500 * time.Millisecond}
	err := Corpus(opts)[0].Run(ctx, ep)
	if !errors.Is(err, ErrWedged) {
		t.Fatalf("idle connection against an inline-handshake listener: %v, want ErrWedged", err)
	}
	rep, err := Scan(ctx, []string{ep}, ScanConfig{Probes: []Probe{idle}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Results[0].Dead == 0 {
		t.Fatalf("scan did not report the wedge: %+v", rep.Results)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !strings.Contains(b.String(), "NO (") || !strings.Contains(b.String(), "STOPPED ANSWERING") {
		t.Fatalf("table does not show the wedge:\n%s", b.String())
	}
}

func TestScanStopsWithContext(t *testing.T) {
	_, ep := target(t, "PULL")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Scan(ctx, []string{ep}, ScanConfig{Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("Scan ran %s after its context ended", time.Since(start))
	}
	if !rep.OK() {
		t.Fatalf("cancelled scan reported a death: %+v", rep.Results)
	}
}

func TestScanBadEndpoint(t *testing.T) {
	if _, err := Scan(context.Background(), []string{"nope://x"}, ScanConfig{}); err == nil {
		t.Fatal("bad endpoint accepted")
	}
}

func TestLocalForIsCompatible(t *testing.T) {
	for _, typ := range []zmq4.SocketType{zmq4.Pair, zmq4.Pub, zmq4.Sub, zmq4.Req, zmq4.Rep, zmq4.Dealer,
		zmq4.Router, zmq4.Pull, zmq4.Push, zmq4.XPub, zmq4.XSub} {
		if l := LocalFor(typ); !zmtpwire.Compatible(l, typ) {
			t.Errorf("LocalFor(%s) = %q, not compatible", typ, l)
		}
		if l := envelopeLocal(typ); !zmtpwire.Compatible(l, typ) {
			t.Errorf("envelopeLocal(%s) = %q, not compatible", typ, l)
		}
	}
	if LocalFor("BOGUS") != "" {
		t.Error("LocalFor of an unknown type")
	}
}

// TestScanGivesUpOnDeadTarget: a target that stops answering for good
// (here: its socket closes after the first probe) is not attacked further
// after MaxDeadInARow probes in a row it did not answer after, instead of
// paying each remaining probe's timeouts.
func TestScanGivesUpOnDeadTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sock, ep := target(t, "PULL")
	var once sync.Once
	opts := Options{Hold: 100 * time.Millisecond, Timeout: 300 * time.Millisecond}
	rep, err := Scan(ctx, []string{ep}, ScanConfig{Options: opts, Duration: time.Hour,
		OnProbe: func(Event) { once.Do(func() { sock.Close() }) }})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, r := range rep.Results {
		if r.Sent+r.Failed > 0 {
			ran++
		}
	}
	if !rep.GaveUp[0] || rep.OK() || ran != 1+MaxDeadInARow {
		t.Fatalf("gave up %v, %d of %d probes ran: %+v", rep.GaveUp[0], ran, len(rep.Results), rep.Results)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if !strings.Contains(b.String(), "not attacked further") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// TestScanTableUnreachable: a target that does not answer at the start
// gets no per-probe "yes" rows, only its verdict.
func TestScanTableUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	ln.Close()
	rep, err := Scan(context.Background(), []string{ep}, ScanConfig{Options: Options{Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	if strings.Contains(b.String(), "yes") || !strings.Contains(b.String(), "not scanned") || rep.OK() {
		t.Fatalf("table:\n%s", b.String())
	}
}
