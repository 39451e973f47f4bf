package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
