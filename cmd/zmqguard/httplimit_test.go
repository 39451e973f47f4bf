package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// TestHTTPEndpointLimits (issue 29 row 9): the debug endpoint refuses a
// request header over its limit (431) and a profile longer than
// maxProfileSeconds (400 naming the value), and every server it starts
// has read, write and idle deadlines. Before, a 100 KiB header was read
// (Go's 1 MiB default) and ?seconds=3600 started an hour-long profile.
func TestHTTPEndpointLimits(t *testing.T) {
	ds, err := startDebug(&debugOptions{addr: "127.0.0.1:0"}, "test-cmd", func() any { return nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	addr := ds.Addr()

	// A 100 KiB header: refused with 431 once the limit is read.
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	go fmt.Fprintf(nc, "GET /debug/zmqguard HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 100<<10))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("reading the answer to a 100 KiB header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 100 KiB request header: status %d, want 431", resp.StatusCode)
	}

	// Profiles beyond maxProfileSeconds are refused before they start.
	for _, path := range []string{"/debug/pprof/profile?seconds=3600", "/debug/pprof/trace?seconds=31", "/debug/pprof/heap?seconds=999", "/debug/pprof/profile?seconds=x"} {
		tr := &http.Transport{DisableKeepAlives: true}
		c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		resp, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "0..30 s") {
			t.Errorf("GET %s: status %d %q, want 400 naming the 30 s limit", path, resp.StatusCode, b)
		}
	}
	// Within the bound a delta profile is served.
	if code, _ := httpGet(t, "http://"+addr+"/debug/pprof/allocs?seconds=1"); code != http.StatusOK {
		t.Errorf("allocs?seconds=1: status %d", code)
	}

	srv := ds.srv
	if srv.MaxHeaderBytes < 16<<10 || srv.MaxHeaderBytes > 64<<10 || srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 ||
		srv.IdleTimeout <= 0 || srv.WriteTimeout <= maxProfileSeconds*time.Second {
		t.Errorf("debug server limits: MaxHeaderBytes %d ReadHeaderTimeout %v ReadTimeout %v WriteTimeout %v IdleTimeout %v",
			srv.MaxHeaderBytes, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
}

// TestLimitListener: connections beyond the cap are closed at accept and
// counted; closing one admits the next.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(raw, 2, "test", slog.New(slog.DiscardHandler))
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", raw.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	next := func() net.Conn {
		select {
		case c := <-accepted:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("no connection accepted")
		}
		return nil
	}
	dial()
	first := next()
	dial()
	next()
	extra := dial()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Fatalf("connection over the cap: read %v, want it closed", err)
	}
	if n := l.Refused(); n != 1 {
		t.Fatalf("Refused() = %d, want 1", n)
	}
	first.Close()
	dial()
	next()
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// httpFrom is an HTTP client whose connections come from the loopback
// address src (a distinct source host to the server).
func httpFrom(src string, keepAlive bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: !keepAlive}}
}

// idleKeepAlive opens a connection from src, makes one GET on it and
// leaves it open, idle; it fails the test if that GET is not answered.
func idleKeepAlive(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(nc, "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("idle keep-alive connection from %s: %v", src, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	nc.SetDeadline(time.Time{})
	return nc
}

// TestHTTPIdleKeepAliveFirst (issue 37 row 1, scaled down: 16 connections
// instead of 1,024): one host fills the connection cap with idle
// keep-alive connections (one GET each); an honest client from another
// host is still answered, every time, on new connections (each closes the
// longest-idle one), while the first host's further connections only
// replace its own. Before, the cap was global and first-come: the honest
// client's connections were reset.
func TestHTTPIdleKeepAliveFirst(t *testing.T) {
	const maxConns = 16
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })}
	ep := serveEndpointCapped(raw, srv, maxConns, "test", "test_addr", "--x", 5*time.Second, slog.New(slog.DiscardHandler))
	defer ep.Close()
	addr := ep.Addr()
	for range maxConns {
		idleKeepAlive(t, "127.0.0.5", addr)
	}
	honest := httpFrom("127.0.0.2", false)
	for i := range 20 {
		resp, err := honest.Get("http://" + addr + "/score")
		if err != nil {
			t.Fatalf("honest request %d while one host holds %d idle keep-alive connections: %v", i, maxConns, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("honest request %d: status %d", i, resp.StatusCode)
		}
	}
	honest.CloseIdleConnections()
	// The flooding host's next connection is refused: it holds nothing
	// but idle connections, so it may not close any (not even another
	// host's); a keep-alive client from a third host still gets in.
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
	extra, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF && !isReset(err) {
		t.Fatalf("the flooding host's connection over the cap: read %v, want it closed", err)
	}
	third := httpFrom("127.0.0.3", true)
	defer third.CloseIdleConnections()
	if code, _ := httpGetWith(t, third, "http://"+addr+"/stats"); code != http.StatusOK {
		t.Errorf("third host: status %d", code)
	}
}

func httpGetWith(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHTTPInFlightBudget: requests in flight are bounded by what they may
// cost; one past the bound is answered 503 with Retry-After while its
// client is still sending the body, and a small request is served beside
// the big ones. (bigMax is raised so that the memory bound decides; the
// CPU bound is TestHTTPBigRequestsPerCPU's.)
func TestHTTPInFlightBudget(t *testing.T) {
	const body = 2 << 20
	cost := int64(httpRequestBase + httpBodyFactor*body)
	// Big requests may fill three quarters: room for three, not four.
	f := &inFlight{budget: 4 * cost, bodyCap: 8 << 20, bigMax: 8}
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/big" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok\n")
	})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.wrap(h), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(raw) }()
	defer func() { close(release); srv.Close(); <-done }()
	url := "http://" + raw.Addr().String()
	type result struct {
		code  int
		retry string
		err   error
	}
	post := func(c *http.Client) result {
		resp, err := c.Post(url+"/big", "application/json", strings.NewReader(strings.Repeat("1", body)))
		if err != nil {
			return result{err: err}
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return result{code: resp.StatusCode, retry: resp.Header.Get("Retry-After")}
	}
	results := make(chan result, 3)
	for i := range 3 {
		c := httpFrom(fmt.Sprintf("127.0.0.%d", 10+i), false)
		go func() { results <- post(c) }()
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatalf("big request %d not served", i)
		}
	}
	r := post(httpFrom("127.0.0.20", false))
	if r.err != nil || r.code != http.StatusServiceUnavailable || r.retry == "" {
		t.Fatalf("fourth big request: %+v, want 503 with Retry-After", r)
	}
	// A client that sends its whole body before it reads gets the status
	// too (the refused body is discarded after the answer, not reset).
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.22")}}
	nc, err := d.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(nc, "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", body)
	if _, err := nc.Write([]byte(strings.Repeat("1", body))); err != nil {
		t.Fatalf("sending the whole body of a refused request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a refused request sent whole before reading: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _ := httpGetWith(t, httpFrom("127.0.0.21", false), url+"/small"); code != http.StatusOK {
		t.Errorf("small request beside three big ones: status %d", code)
	}
	if f.refused.Load() != 2 {
		t.Errorf("refused %d, want 2", f.refused.Load())
	}
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	for range 3 {
		if r := <-results; r.err != nil || r.code != http.StatusOK {
			t.Errorf("big request: %+v", r)
		}
	}
}

// TestHTTPBigRequestsPerCPU: at most bigMax big requests are served at
// once, whatever the memory budget allows; the next is refused.
func TestHTTPBigRequestsPerCPU(t *testing.T) {
	f := &inFlight{budget: 1 << 40, bodyCap: 8 << 20, bigMax: 1}
	big := int64(httpSmallRequest + 1)
	if !f.take(big) {
		t.Fatal("first big request refused")
	}
	if f.take(big) {
		t.Fatal("second big request admitted with bigMax 1")
	}
	if !f.take(httpRequestBase) {
		t.Fatal("small request refused beside one big one")
	}
	f.give(big)
	if !f.take(big) {
		t.Fatal("big request refused after the first left")
	}
}

// countingListener counts the bytes read from its connections.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.read.Add(int64(n))
	return n, err
}

func (c *countingConn) CloseWrite() error {
	return c.Conn.(*net.TCPConn).CloseWrite()
}

// TestHTTPRefusedBodiesNotRead (issue 37, 200 clients posting 8 MiB
// bodies): once the full discards are taken, a refused request's body is
// not read: its connection is parked unread and closed httpParkTime later,
// and a client that reads while it sends (Go's) still receives its 503
// with Retry-After. Before, each such refusal read 1 MiB of the body, which
// under a flood was the server's CPU, and then reset the connection, so
// most clients received an error instead of the status.
func TestHTTPRefusedBodiesNotRead(t *testing.T) {
	const body, clients = 4 << 20, 12
	f := &inFlight{budget: 1 << 20, bodyCap: 8 << 20, bigMax: 1}
	f.draining.Store(httpFullDrains) // the full discards are taken
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("a big request was admitted") })
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: raw}
	srv := &http.Server{Handler: f.wrap(h), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	defer func() { srv.Close(); <-done }()
	url := "http://" + raw.Addr().String() + "/big"
	errs := make(chan error, clients)
	for i := range clients {
		c := httpFrom(fmt.Sprintf("127.0.0.%d", 30+i), false)
		go func() {
			resp, err := c.Post(url, "application/json", strings.NewReader(strings.Repeat("1", body)))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				err = fmt.Errorf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			errs <- err
		}()
	}
	for i := range clients {
		if err := <-errs; err != nil {
			t.Errorf("refused request %d: %v", i, err)
		}
	}
	if n := f.parks.Load(); n != clients {
		t.Errorf("parked %d refused connections, want %d", n, clients)
	}
	// Each refusal reads its header and at most the server's buffer
	// (4 KiB) of the body; a read of the refused bodies would be MiBs.
	if n := ln.read.Load(); n > clients*64<<10 {
		t.Errorf("the server read %d bytes of %d refused %d-byte bodies; want at most 64 KiB each", n, clients, body)
	}
	poll.WaitFor(t, 10*time.Second, "the parked connections closed", func() bool { return f.parked.Load() == 0 })
	f.draining.Store(0)
}
