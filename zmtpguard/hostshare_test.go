package zmtpguard

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// dialHost connects to addr from the loopback address src (127.0.0.x: a
// distinct source host to the listener) and sends a PUSH handshake.
func dialHost(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(handshakeAs("PUSH")); err != nil {
		t.Fatal(err)
	}
	return nc
}

// delivered writes one data message and reports whether the sink received it.
func delivered(nc net.Conn, s *sink, body string) bool {
	if _, err := nc.Write(dataFrame(false, []byte(body))); err != nil {
		return false
	}
	return expectMsg(s.msgs, body, 10*time.Second) == nil
}

// TestMaxConnsFairShare (issue 29 row 1): one host fills MaxConns with
// established connections; a connection from a second host is still
// served (one of the first host's connections is closed for it), and the
// first host's further connections are refused while it holds more than
// its share. Before, the cap was first-come: the second host was refused.
func TestMaxConnsFairShare(t *testing.T) {
	const maxConns = 8
	viols := make(chan Violation, 64)
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: maxConns,
		OnViolation: func(v Violation) {
			select {
			case viols <- v:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	addr := l.Addr().String()
	var hog []net.Conn
	for i := range maxConns {
		nc := dialHost(t, "127.0.0.1", addr)
		if !delivered(nc, s, "hog") {
			t.Fatalf("hog connection %d not served", i)
		}
		hog = append(hog, nc)
	}
	// The listener is full of one host's connections.
	for i := range 3 {
		nc := dialHost(t, "127.0.0.2", addr)
		if !delivered(nc, s, "honest") {
			t.Fatalf("honest connection %d from a second host not served while one host holds MaxConns=%d", i, maxConns)
		}
	}
	// The hog is over its share (8/2): its next connection is refused.
	extra := dialHost(t, "127.0.0.1", addr)
	if err := waitClosed(extra, 10*time.Second); err != nil {
		t.Fatalf("hog connection over its share: %v", err)
	}
	closed := 0
	for _, nc := range hog {
		// The server's greeting and READY are unread: drain them, then
		// see whether the connection ended.
		nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var b [512]byte
		for {
			_, err := nc.Read(b[:])
			if err != nil {
				if !isTimeout(err) {
					closed++
				}
				break
			}
		}
	}
	if closed != 3 {
		t.Errorf("%d of the hog's connections closed, want 3 (one per honest connection)", closed)
	}
	var evictions, refusals int
	for len(viols) > 0 {
		v := <-viols
		if v.Reason != decodeguard.ReasonPolicy {
			continue
		}
		switch {
		case strings.HasPrefix(v.Detail, "evicted: connection cap MaxConns=8"):
			evictions++
		case strings.Contains(v.Detail, "MaxConns=8 reached"):
			refusals++
		}
	}
	if evictions != 3 || refusals != 1 {
		t.Errorf("%d evictions and %d refusals reported, want 3 and 1", evictions, refusals)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestMaxConnsPerHost: a fixed per-host bound refuses a host's connection
// beyond it even while the listener has room, naming the value; another
// host is served.
func TestMaxConnsPerHost(t *testing.T) {
	viols := make(chan Violation, 64)
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: 100, MaxConnsPerHost: 2,
		OnViolation: func(v Violation) {
			select {
			case viols <- v:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	addr := l.Addr().String()
	for range 2 {
		if !delivered(dialHost(t, "127.0.0.1", addr), s, "a") {
			t.Fatal("connection within MaxConnsPerHost not served")
		}
	}
	if err := waitClosed(dialHost(t, "127.0.0.1", addr), 10*time.Second); err != nil {
		t.Fatalf("third connection of one host over MaxConnsPerHost=2: %v", err)
	}
	if !delivered(dialHost(t, "127.0.0.2", addr), s, "b") {
		t.Fatal("another host not served")
	}
	select {
	case v := <-viols:
		if !strings.Contains(v.Detail, "MaxConnsPerHost=2") {
			t.Errorf("violation %v does not name MaxConnsPerHost=2", &v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no violation reported")
	}
	if st := l.Stats(); st.Open != 3 {
		t.Errorf("Open = %d, want 3", st.Open)
	}
}
