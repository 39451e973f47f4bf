package outputs

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestBindProtected (issue 37, "first is not owner"): Bind refuses a TCP
// address other than loopback unless an allowlist, CURVE or AnyPeer says
// who may connect; loopback and ipc are served as before.
func TestBindProtected(t *testing.T) {
	for _, c := range []struct {
		name     string
		endpoint string
		mod      func(*Config)
		refused  bool
	}{
		{"wildcard", "tcp://*:0", nil, true},
		{"any IPv4", "tcp://0.0.0.0:0", nil, true},
		{"loopback", "tcp://127.0.0.1:0", nil, false},
		{"localhost", "tcp://localhost:0", nil, false},
		{"ipc", "ipc://" + t.TempDir() + "/o.sock", nil, false},
		{"allowlist", "tcp://0.0.0.0:0", func(c *Config) { c.Socket.Guard.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} }, false},
		{"AnyPeer", "tcp://0.0.0.0:0", func(c *Config) { c.AnyPeer = true }, false},
	} {
		cfg := Config{Handler: nopHandler, Logger: quiet}
		cfg.Socket.Logger = quiet
		if c.mod != nil {
			c.mod(&cfg)
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Bind(c.endpoint)
		r.Close()
		if c.refused && (err == nil || !strings.Contains(err.Error(), "AnyPeer")) {
			t.Errorf("%s: Bind(%s) = %v, want a refusal naming AnyPeer", c.name, c.endpoint, err)
		}
		if !c.refused && err != nil {
			t.Errorf("%s: Bind(%s) = %v", c.name, c.endpoint, err)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTakeoverFromAnotherHostWarns: an engine index whose connection left
// and that a connection from another host claims next is logged at WARN
// naming both peers and counted in Stats.Takeovers; Stats name the holder.
// Before, it was an INFO line like a restart on the same host.
func TestTakeoverFromAnotherHostWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	cfg := Config{Handler: nopHandler, Logger: logger}
	cfg.Socket.Logger = quiet
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	defer func() { r.Close(); <-errc }()
	addr := strings.TrimPrefix(r.Endpoint(), "tcp://")
	from := func(src string) *zmtpguard.Conn {
		c, err := zmtpguard.Dial(ctx, "tcp", addr, "PUSH", nil,
			&zmtpguard.Config{Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	push := func(c *zmtpguard.Conn, id string) {
		if err := c.WriteMessage(encode(simple(0, id, 1))...); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	first := from("127.0.0.1")
	push(first, "a")
	poll.WaitForCtx(t, ctx, "the first claim", func() bool { return r.Stats().Messages == 1 })
	first.Close()
	poll.WaitForCtx(t, ctx, "the first connection's departure", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.gone) == 1
	})
	second := from("127.0.0.2")
	defer second.Close()
	push(second, "b")
	poll.WaitForCtx(t, ctx, "the takeover", func() bool { return r.Stats().Messages == 2 })
	st := r.Stats()
	if st.Takeovers != 1 || len(st.Engines) != 1 || !strings.HasPrefix(st.Engines[0].Peer, "127.0.0.2:") {
		t.Errorf("stats after a takeover: Takeovers %d, engines %+v", st.Takeovers, st.Engines)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "taken over") ||
		!strings.Contains(out, "peer=127.0.0.2:") || !strings.Contains(out, "previous=127.0.0.1:") {
		t.Errorf("takeover log:\n%s", out)
	}
}
