package loop

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func newSocket(t testing.TB, typ zmtpguard.SocketType) *socket.Socket {
	t.Helper()
	o := socket.DefaultOptions()
	o.ReconnectMin = 20 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	s, err := socket.New(typ, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSocketPull runs a loop over zmqguard's PULL on 127.0.0.1, fed by a
// PUSH: every seed is dropped with its reason and the peer's address, the
// valid message after them is delivered.
func TestSocketPull(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull := newSocket(t, "PULL")
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	push := newSocket(t, "PUSH")
	if err := push.Dial(pull.Endpoint()); err != nil {
		t.Fatal(err)
	}
	want := map[decodeguard.Reason]uint64{}
	for _, sd := range typedSeeds {
		if err := push.Send(ctx, sd.frame); err != nil {
			t.Fatal(err)
		}
		want[sd.reason]++
	}
	if err := push.Send(ctx, statsFrame); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var peers []string
	l := newStatsLoop(t, pull, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		checkStats(t, d.Value)
		if !strings.HasPrefix(d.Msg.Peer.String(), "127.0.0.1:") {
			t.Errorf("peer %q", d.Msg.Peer.String())
		}
		cancel()
		return nil
	}, func(c *Config[vllmwire.Message]) {
		c.OnDrop = func(d Drop) {
			mu.Lock()
			peers = append(peers, d.Peer.String())
			mu.Unlock()
		}
	})
	if err := l.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	st := l.Stats()
	for r, n := range want {
		if st.Dropped[r] != n {
			t.Errorf("%v: %d drops, want %d", r, st.Dropped[r], n)
		}
	}
	if st.Delivered != 1 || st.Received != uint64(len(typedSeeds)+1) {
		t.Fatalf("stats %+v", st)
	}
	for _, p := range peers {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Fatalf("drop peer %q", p)
		}
	}
	// Closing the socket ends a running loop with socket.ErrClosed.
	done := make(chan error, 1)
	go func() { done <- l.Run(testCtx(t)) }()
	pull.Close()
	if err := <-done; !errors.Is(err, socket.ErrClosed) {
		t.Fatalf("Run after socket Close = %v", err)
	}
}

// TestSocketRouter: a ROUTER loop with the strict envelope drops a bare
// DEALER's message, delivers the REQ-shaped one, and replies through the
// envelope.
func TestSocketRouter(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	router := newSocket(t, "ROUTER")
	if err := router.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	dealer := newSocket(t, "DEALER")
	if err := dealer.Dial(router.Endpoint()); err != nil {
		t.Fatal(err)
	}
	req := []byte("\x93\xc4\x0cget_meta_msg\x00\x01")
	if err := dealer.Send(ctx, req); err != nil { // bare DEALER: no delimiter
		t.Fatal(err)
	}
	if err := dealer.Send(ctx, []byte{}, req); err != nil {
		t.Fatal(err)
	}
	l, err := New(router, Config[any]{
		Name:     "nixl",
		Logger:   discard(),
		Envelope: &envelope.Options{},
		Decode:   UntypedDecoder(decodeguard.Limits{}),
		Handler: func(ctx context.Context, d Delivery[any]) error {
			return router.Send(ctx, d.Envelope.Reply(nil, []byte("metadata"))...)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	reply, err := dealer.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply.Frames) != 2 || len(reply.Frames[0]) != 0 || string(reply.Frames[1]) != "metadata" {
		t.Fatalf("reply %q", reply.Frames)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if st := l.Stats(); st.Dropped[decodeguard.ReasonEnvelope] != 1 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSocketRefusedInStats: connections the socket refuses (here HTTP
// probes) appear in the loop's Stats.Refused, and its JSON names reasons.
func TestSocketRefusedInStats(t *testing.T) {
	ctx := testCtx(t)
	pull := newSocket(t, "PULL")
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	l := newStatsLoop(t, pull, func(context.Context, Delivery[vllmwire.Message]) error { return nil }, nil)
	for range 5 {
		c, err := net.Dial("tcp", strings.TrimPrefix(pull.Endpoint(), "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Close()
	}
	refused := func() uint64 { st := l.Stats(); return st.Refused.Total() }
	for refused() < 5 {
		select {
		case <-ctx.Done():
			t.Fatalf("refusals not in loop stats: %+v", l.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	b, err := json.Marshal(l.Stats())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"refused":{`) || !strings.Contains(string(b), `"transport":`) || !strings.Contains(string(b), `"handler_errors":0`) {
		t.Fatalf("JSON %s", b)
	}
}

// instrumented is a user's wrapper around a socket (say, counting
// messages): it embeds the *socket.Socket, so it keeps the socket's
// Options and Stats methods, the Receiver's optional interfaces.
type instrumented struct {
	*socket.Socket
	n int
}

func (r *instrumented) Recv(ctx context.Context) (socket.Msg, error) {
	r.n++
	return r.Socket.Recv(ctx)
}

// TestOptionalInterfacesThroughWrapper: a Loop reads the receiver's size
// limit and refusal counts through the optional interfaces, not the
// concrete *socket.Socket type: a wrapper that embeds the socket gets the
// socket's MaxMessageSize as the default (and a larger one refused), and
// the socket's refusals in Stats.Refused.
func TestOptionalInterfacesThroughWrapper(t *testing.T) {
	ctx := testCtx(t)
	pull := newSocket(t, "PULL")
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	r := &instrumented{Socket: pull}
	sockMax := pull.Options().Guard.MaxMessageSize
	if _, err := New(r, Config[any]{Logger: discard(), Decode: UntypedDecoder(decodeguard.Limits{}), MaxMessageSize: sockMax + 1}); err == nil ||
		!strings.Contains(err.Error(), "over the socket's MaxMessageSize") {
		t.Fatalf("New with MaxMessageSize over the wrapped socket's = %v", err)
	}
	l, err := New(r, Config[any]{Logger: discard(), Decode: UntypedDecoder(decodeguard.Limits{})})
	if err != nil {
		t.Fatal(err)
	}
	if l.cfg.MaxMessageSize != sockMax || l.maxBytes != 0 {
		t.Fatalf("MaxMessageSize %d (own check %d), want the socket's %d and no own check", l.cfg.MaxMessageSize, l.maxBytes, sockMax)
	}
	c, err := net.Dial("tcp", strings.TrimPrefix(pull.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.Close()
	for l.Stats().Refused.Total() == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the wrapped socket's refusal is not in the loop's stats: %+v", l.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
