package handshake

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

func TestListenerServesAllVariants(t *testing.T) {
	payloads := testPayloads(t)
	l := startListener(t, ListenerConfig{Payloads: payloads, Clock: func() float64 { return 12345.678 }})
	ep := l.Endpoint()

	// V1 is answered for V1Rank (0, 0) with the bare agent metadata.
	r := mustFetch(t, ep, Request{Variant: V1}, Rank{0, 0})
	if r.CompatibilityHash != "" || r.RemoteTime != 0 {
		t.Errorf("V1 reply has payload fields: hash %q, remote time %v", r.CompatibilityHash, r.RemoteTime)
	}
	// V2 means pp 0.
	r = mustFetch(t, ep, Request{Variant: V2, TP: 1}, Rank{0, 1})
	if r.CompatibilityHash != testHash || r.RemoteTime != 0 {
		t.Errorf("V2 reply: hash %q, remote time %v", r.CompatibilityHash, r.RemoteTime)
	}
	r = mustFetch(t, ep, Request{Variant: V3, PP: 1, TP: 0}, Rank{1, 0})
	if r.RemoteTime != 12345.678 || r.CompatibilityHash != testHash {
		t.Errorf("V3 reply: remote time %v, hash %q", r.RemoteTime, r.CompatibilityHash)
	}

	// The frames on the wire, byte for byte.
	v1 := rawExchange(t, ep, []byte(nixlwire.GetMetaMsg))
	wantMeta, _ := payloadMetadata(payloads[Rank{0, 0}])
	if len(v1) != 1 || !bytes.Equal(v1[0], wantMeta) {
		t.Errorf("V1 reply frames %d, want the metadata bytes of (0,0)", len(v1))
	}
	v2 := rawExchange(t, ep, mustHex(t, vecV2)) // (GET_META_MSG, 1)
	if len(v2) != 1 || !bytes.Equal(v2[0], payloads[Rank{0, 1}]) {
		t.Errorf("V2 reply frames %d, want payload (0,1)", len(v2))
	}
	v3 := rawExchange(t, ep, mustHex(t, vecV3)) // (GET_META_MSG, 0, 1)
	if len(v3) != 2 || !bytes.Equal(v3[0], payloads[Rank{0, 1}]) || hex.EncodeToString(v3[1]) != vecTS {
		t.Errorf("V3 reply: %d frames, timestamp %x; want payload (0,1) and %s", len(v3), v3[len(v3)-1], vecTS)
	}

	st := l.Stats()
	if st.Served[V1] != 2 || st.Served[V2] != 2 || st.Served[V3] != 2 || totalServed(st) != 6 {
		t.Errorf("served %v", st.Served)
	}
	if st.Loop.Dropped.Total() != 0 || st.Loop.Delivered != 6 {
		t.Errorf("loop stats %+v", st.Loop)
	}
}

func TestListenerV1Rank(t *testing.T) {
	l := startListener(t, ListenerConfig{V1Rank: Rank{0, 1}})
	mustFetch(t, l.Endpoint(), Request{Variant: V1}, Rank{0, 1})
}

// TestListenerSurvivesBareDealer is the seed's first regression test: a
// stray DEALER that sends without the empty delimiter, then a real client.
func TestListenerSurvivesBareDealer(t *testing.T) {
	var mu sync.Mutex
	var drops []loop.Drop
	l := startListener(t, ListenerConfig{OnDrop: func(d loop.Drop) {
		mu.Lock()
		d.Prefix = nil
		drops = append(drops, d)
		mu.Unlock()
	}})
	ctx := testCtx(t, 20*time.Second)

	d, err := socket.New("DEALER", fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Dial(l.Endpoint()); err != nil {
		t.Fatal(err)
	}
	v3 := mustHex(t, vecV3)
	if err := d.Send(ctx, v3); err != nil { // [identity, body]
		t.Fatal(err)
	}
	if err := d.Send(ctx, []byte{}, v3, []byte("extra")); err != nil { // delimited, 2 body frames
		t.Fatal(err)
	}
	if err := d.Send(ctx, []byte{}); err != nil { // delimiter only, no body
		t.Fatal(err)
	}
	poll.WaitForCtx(t, ctx, "three envelope drops", func() bool {
		return l.Stats().Loop.Dropped[decodeguard.ReasonEnvelope] == 3
	})
	mustFetch(t, l.Endpoint(), Request{Variant: V3, PP: 0, TP: 1}, Rank{0, 1})

	mu.Lock()
	defer mu.Unlock()
	for _, dr := range drops {
		if dr.Reason != decodeguard.ReasonEnvelope || dr.Peer == nil {
			t.Errorf("drop %+v", dr)
		}
	}
	if st := l.Stats(); st.Served[V3] != 1 || st.Loop.Dropped.Total() != 3 {
		t.Errorf("stats %+v", st)
	}
}

// TestListenerSurvivesMalformedContent is the seed's second regression
// test: malformed requests from a REQ client, each followed by a real
// handshake.
func TestListenerSurvivesMalformedContent(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	ep := l.Endpoint()
	cases := []struct {
		name   string
		body   string // hex
		reason decodeguard.Reason
	}{
		{"not msgpack", "c1", decodeguard.ReasonDecode},
		{"truncated", "93c40c6765745f6d657461", decodeguard.ReasonDecode},
		{"scanner int", "45", decodeguard.ReasonDecode},
		{"map", "81a161a162", decodeguard.ReasonDecode},
		{"arity 1", "91c40c6765745f6d6574615f6d7367", decodeguard.ReasonDecode},
		{"arity 4", "94c40c6765745f6d6574615f6d736700010203", decodeguard.ReasonDecode},
		{"rank as str", "93c40c6765745f6d6574615f6d7367a130a131", decodeguard.ReasonDecode},
		{"rank as float", "92c40c6765745f6d6574615f6d7367cb3ff0000000000000", decodeguard.ReasonDecode},
		{"other message", "92c40367657401", decodeguard.ReasonValidate},
		{"negative rank", "93c40c6765745f6d6574615f6d736700ff", decodeguard.ReasonValidate},
		{"invalid utf-8 str", "92a2ff1b01", decodeguard.ReasonDecode},
		{"deep nesting", strings.Repeat("91", 100) + "00", decodeguard.ReasonOversize},
		{"array claims huge", "ddffffffffc40c6765745f6d6574615f6d7367", decodeguard.ReasonDecode},
		{"escape codes", "1b5b324a1b5d303b", decodeguard.ReasonDecode},
		{"empty body", "", decodeguard.ReasonDecode},
	}
	ctx := testCtx(t, 30*time.Second)
	var want [len(decodeguard.Counts{})]uint64
	for i, c := range cases {
		s, err := socket.New("REQ", fastOpts())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Dial(ep); err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, mustHex(t, c.body)); err != nil {
			t.Fatal(err)
		}
		want[c.reason]++
		poll.WaitForCtx(t, ctx, c.name+" dropped", func() bool { return l.Stats().Loop.Dropped.Total() == uint64(i+1) })
		s.Close()
		if got := l.Stats().Loop.Dropped; got != want {
			t.Fatalf("%s: dropped %v, want %v", c.name, got, want)
		}
		mustFetch(t, ep, Request{Variant: V3, TP: 1}, Rank{0, 1})
	}
	if st := l.Stats(); st.Served[V3] != uint64(len(cases)) || st.Loop.HandlerErrors != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestListenerUnknownRankDropped(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	ep := l.Endpoint()
	ctx := testCtx(t, 20*time.Second)
	_, err := Fetch(ctx, ep, Request{Variant: V3, PP: 2, TP: 3}, fetchOpts(300*time.Millisecond))
	var te *timeoutError
	if !errors.Is(err, ErrTimeout) || !errors.As(err, &te) {
		t.Fatalf("unknown rank without error replies: %v, want a timeout", err)
	}
	if !te.Connected || !te.Sent {
		t.Errorf("timeout detail %+v", te)
	}
	if got := l.Stats().Loop.Dropped[decodeguard.ReasonUnknownRank]; got != 1 {
		t.Errorf("unknown-rank drops %d", got)
	}
	// V1 for a V1Rank that is not served is an unknown rank too.
	l2 := startListener(t, ListenerConfig{V1Rank: Rank{5, 5}})
	if _, err := Fetch(ctx, l2.Endpoint(), Request{Variant: V1}, fetchOpts(300*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("V1 for an unserved V1Rank: %v", err)
	}
	if got := l2.Stats().Loop.Dropped[decodeguard.ReasonUnknownRank]; got != 1 {
		t.Errorf("unknown-rank drops %d", got)
	}
	mustFetch(t, ep, Request{Variant: V3}, Rank{0, 0})
}

func TestListenerUnknownRankErrorReplies(t *testing.T) {
	l := startListener(t, ListenerConfig{ErrorReplies: true, V1Rank: Rank{9, 9}, Clock: func() float64 { return 12345.678 }})
	ep := l.Endpoint()
	ctx := testCtx(t, 60*time.Second)
	for _, req := range []Request{{Variant: V3, PP: 0, TP: 7}, {Variant: V2, TP: 7}, {Variant: V1}} {
		// A timeout far beyond the test's: only an explicit reply passes.
		_, err := Fetch(ctx, ep, req, fetchOpts(time.Minute))
		var fe *fetchError
		if !errors.Is(err, ErrRejected) || !errors.As(err, &fe) {
			t.Fatalf("%v: got %v, want ErrRejected", req.Variant, err)
		}
		want := Rank{req.PP, req.TP}
		if req.Variant == V1 {
			want = Rank{9, 9}
		}
		if !strings.Contains(fe.Detail, "does not serve "+want.String()) {
			t.Errorf("%v: detail %q", req.Variant, fe.Detail)
		}
	}
	// The drop is counted when the handler returns, after the reply left.
	poll.WaitForCtx(t, ctx, "three unknown-rank drops", func() bool { return l.Stats().Loop.Dropped[decodeguard.ReasonUnknownRank] == 3 })
	st := l.Stats()
	if st.ErrorReplies != 3 || totalServed(st) != 0 {
		t.Errorf("stats %+v", st)
	}

	// The error reply's shape, as a vLLM client sees it.
	v3 := rawExchange(t, ep, appendRequest(nil, Request{Variant: V3, PP: 4, TP: 0}))
	if len(v3) != 2 || hex.EncodeToString(v3[1]) != vecTS {
		t.Fatalf("V3 error reply: %d frames", len(v3))
	}
	p, err := nixlwire.DecodePayload(v3[0])
	if err != nil || p.CompatibilityHash != nixlwire.ErrorReplyPrefix+"unknown rank: this listener does not serve pp_rank=4 tp_rank=0" ||
		len(p.AgentMetadataBytes) != 0 {
		t.Errorf("V3 error payload %+v, %v", p, err)
	}
	if _, err := nixlwire.DecodeAgentMetadata(p.AgentMetadataBytes); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("empty agent_metadata_bytes decodes: %v", err)
	}
	v1 := rawExchange(t, ep, []byte(nixlwire.GetMetaMsg))
	s, _, err := msgp.ReadStringBytes(v1[0])
	if len(v1) != 1 || err != nil || !strings.HasPrefix(s, nixlwire.ErrorReplyPrefix) {
		t.Errorf("V1 error reply %q, %v", s, err)
	}
	// Served ranks still work.
	mustFetch(t, ep, Request{Variant: V3, TP: 1}, Rank{0, 1})
}

func TestListenerLookup(t *testing.T) {
	payloads := testPayloads(t)
	var calls sync.Map
	l := startListener(t, ListenerConfig{Lookup: func(pp, tp int) ([]byte, bool) {
		calls.Store(Rank{pp, tp}, true)
		p, ok := payloads[Rank{pp, tp}]
		return p, ok
	}})
	ep := l.Endpoint()
	mustFetch(t, ep, Request{Variant: V1}, Rank{0, 0})
	mustFetch(t, ep, Request{Variant: V3, PP: 1}, Rank{1, 0})
	if _, err := Fetch(testCtx(t, 10*time.Second), ep, Request{Variant: V2, TP: 9}, fetchOpts(200*time.Millisecond)); !errors.Is(err, ErrTimeout) {
		t.Errorf("unserved rank: %v", err)
	}
	for _, r := range []Rank{{0, 0}, {1, 0}, {0, 9}} {
		if _, ok := calls.Load(r); !ok {
			t.Errorf("Lookup not called for %v", r)
		}
	}
}

// A Lookup that returns something other than a payload is a bug of the
// caller: a V1 request, which needs the metadata inside, ends Serve.
func TestListenerLookupBadPayloadEndsServe(t *testing.T) {
	l, err := NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Logger: quiet,
		Lookup: func(pp, tp int) ([]byte, bool) { return []byte{0x45}, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := testCtx(t, 20*time.Second)
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	fetched := make(chan error, 1)
	go func() {
		_, err := Fetch(ctx, l.Endpoint(), Request{Variant: V1}, ClientOptions{Timeout: 500 * time.Millisecond, Socket: fastOpts()})
		fetched <- err
	}()
	defer func() {
		if err := <-fetched; err == nil {
			t.Error("Fetch succeeded against a bad Lookup")
		}
	}()
	select {
	case err := <-done:
		var le *loop.Error
		if !errors.As(err, &le) || !strings.Contains(err.Error(), "Lookup(0, 0) returned a bad payload") {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not end")
	}
}

func TestListenerAcceptBareDealer(t *testing.T) {
	payloads := testPayloads(t)
	l := startListener(t, ListenerConfig{Payloads: payloads, AcceptBareDealer: true})
	ctx := testCtx(t, 20*time.Second)
	d, err := socket.New("DEALER", fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Dial(l.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(ctx, mustHex(t, vecV2)); err != nil {
		t.Fatal(err)
	}
	m, err := d.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 1 || !bytes.Equal(m.Frames[0], payloads[Rank{0, 1}]) {
		t.Errorf("bare DEALER reply: %d frames", len(m.Frames))
	}
	mustFetch(t, l.Endpoint(), Request{Variant: V2}, Rank{0, 0})
}

// Many clients and a junk flood at once: every real handshake succeeds.
func TestListenerConcurrentClientsUnderJunk(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	ep := l.Endpoint()
	ctx := testCtx(t, 30*time.Second)
	jctx, stopJunk := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d, err := socket.New("DEALER", fastOpts())
		if err != nil {
			t.Error(err)
			return
		}
		defer d.Close()
		d.Dial(ep)
		for i := 0; jctx.Err() == nil; i++ {
			if d.Send(jctx, []byte{byte(i)}, []byte{0xc1}) != nil {
				return
			}
		}
	}()
	errs := make(chan error, 8*5)
	var clients sync.WaitGroup
	for c := range 8 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for i := range 5 {
				req := Request{Variant: Variant(1 + (c+i)%3), TP: (c + i) % 2}
				if _, err := Fetch(ctx, ep, req, fetchOpts(10*time.Second)); err != nil {
					errs <- err
				}
			}
		}()
	}
	clients.Wait()
	stopJunk()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := l.Stats()
	if totalServed(st) != 40 {
		t.Errorf("served %d of 40", totalServed(st))
	}
	t.Logf("served %d, dropped %v", totalServed(st), st.Loop.Dropped)
}

func TestListenerStopAndClose(t *testing.T) {
	l, err := NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: testPayloads(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr() == nil || !strings.HasPrefix(l.Endpoint(), "tcp://127.0.0.1:") {
		t.Fatalf("addr %v endpoint %q", l.Addr(), l.Endpoint())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	mustFetch(t, l.Endpoint(), Request{Variant: V3}, Rank{0, 0})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	// Serve again, then Close.
	go func() { done <- l.Serve(context.Background()) }()
	mustFetch(t, l.Endpoint(), Request{Variant: V2}, Rank{0, 0})
	l.Close()
	if err := <-done; !errors.Is(err, ErrListenerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	if err := l.Serve(context.Background()); !errors.Is(err, ErrListenerClosed) {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
	l.Close()
}

func TestNewListenerErrors(t *testing.T) {
	good := testPayloads(t)
	bad := map[Rank][]byte{{0, 0}: {0x45}}
	for _, c := range []struct {
		name string
		cfg  ListenerConfig
		want string
	}{
		{"no endpoint", ListenerConfig{Payloads: good}, "Endpoint is empty"},
		{"no payloads", ListenerConfig{Endpoint: "tcp://127.0.0.1:0"}, "exactly one of"},
		{"both", ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: good, Lookup: func(int, int) ([]byte, bool) { return nil, false }}, "exactly one of"},
		{"bad payload", ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: bad}, "not a NixlHandshakePayload"},
		{"negative rank", ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: map[Rank][]byte{{-1, 0}: good[Rank{0, 0}]}}, "out of range"},
		{"negative V1 rank", ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: good, V1Rank: Rank{0, -1}}, "V1Rank"},
		{"bad endpoint", ListenerConfig{Endpoint: "udp://x", Payloads: good}, "bind"},
	} {
		l, err := NewListener(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if l != nil {
			t.Errorf("%s: non-nil listener", c.name)
		}
	}
}

// The listener copies Payloads: later changes to the caller's map or bytes
// do not reach the wire.
func TestListenerCopiesPayloads(t *testing.T) {
	payloads := testPayloads(t)
	orig := bytes.Clone(payloads[Rank{0, 0}])
	l := startListener(t, ListenerConfig{Payloads: payloads})
	for i := range payloads[Rank{0, 0}] {
		payloads[Rank{0, 0}][i] = 0
	}
	delete(payloads, Rank{0, 1})
	got := rawExchange(t, l.Endpoint(), mustHex(t, "92c40c6765745f6d6574615f6d736700"))
	if !bytes.Equal(got[0], orig) {
		t.Error("payload changed with the caller's slice")
	}
	mustFetch(t, l.Endpoint(), Request{Variant: V2, TP: 1}, Rank{0, 1})
}

func TestPayloadMetadata(t *testing.T) {
	p := encodedPayload(t, "e", testHash, Rank{})
	meta, err := payloadMetadata(p)
	want, _ := nixlwire.DecodePayload(p)
	if err != nil || !bytes.Equal(meta, want.AgentMetadataBytes) {
		t.Fatalf("payloadMetadata: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() { payloadMetadata(p) }); n != 0 {
		t.Errorf("payloadMetadata allocates %v", n)
	}
	// Unknown keys first, bin keys, and keys that are not strings are skipped.
	b := msgp.AppendMapHeader(nil, 4)
	b = msgp.AppendInt(b, 7)
	b = msgp.AppendString(b, "x")
	b = msgp.AppendString(b, "extra")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendNil(b)
	b = msgp.AppendBytes(b, []byte("compatibility_hash"))
	b = msgp.AppendString(b, "h")
	b = msgp.AppendBytes(b, []byte("agent_metadata_bytes"))
	b = msgp.AppendBytes(b, []byte{1, 2})
	if meta, err := payloadMetadata(b); err != nil || !bytes.Equal(meta, []byte{1, 2}) {
		t.Errorf("tolerant keys: %x, %v", meta, err)
	}
	for _, bad := range []string{"", "45", "c1", "81a161a162", "81b46167656e745f6d657461646174615f6279746573a162", "90"} {
		if _, err := payloadMetadata(mustHex(t, bad)); !decodeguard.IsBadInput(err) {
			t.Errorf("payloadMetadata(%s): %v", bad, err)
		}
	}
}

// nopSender stands in for the ROUTER in hot-path measurements.
type nopSender struct{ n int }

func (s *nopSender) Send(_ context.Context, frames ...[]byte) error {
	s.n += len(frames)
	return nil
}

// newDetachedListener builds a listener whose loop reads r and whose
// replies go to s, without a socket.
func newDetachedListener(t testing.TB, r loop.Receiver, s sender, cfg ListenerConfig) *Listener {
	t.Helper()
	cfg.Endpoint = "inproc"
	if cfg.Payloads == nil {
		cfg.Payloads = testPayloads(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	l, err := newListener(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.attach(r, s, cfg); err != nil {
		t.Fatal(err)
	}
	return l
}

// chanReceiver feeds a loop from a channel.
type chanReceiver chan socket.Msg

func (c chanReceiver) Recv(ctx context.Context) (socket.Msg, error) {
	select {
	case m, ok := <-c:
		if !ok {
			return socket.Msg{}, net.ErrClosed
		}
		return m, nil
	case <-ctx.Done():
		return socket.Msg{}, ctx.Err()
	}
}

func TestListenerHandleZeroAlloc(t *testing.T) {
	var s nopSender
	l := newDetachedListener(t, chanReceiver(nil), &s, ListenerConfig{})
	ctx := context.Background()
	id := []byte{0, 0, 0, 0, 1}
	envOpts := &envelope.Options{MinBody: 1, MaxBody: 1}
	for _, body := range []string{vecV3, vecV2, hex.EncodeToString([]byte(nixlwire.GetMetaMsg))} {
		frames := [][]byte{id, {}, mustHex(t, body)}
		var env envelope.Envelope
		var req Request
		d := loop.Delivery[Request]{Msg: socket.Msg{Frames: frames}, Envelope: &env, Value: &req}
		n := testing.AllocsPerRun(200, func() {
			var err error
			if env, err = envelope.Parse(frames, envOpts); err != nil {
				t.Fatal(err)
			}
			if err := decodeRequest(env.Body, &req); err != nil {
				t.Fatal(err)
			}
			if err := l.handle(ctx, d); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("request %s: %v allocs per handled request", body, n)
		}
	}
	if s.n == 0 {
		t.Fatal("nothing sent")
	}
}

// deliveryFor parses frames as the listener's loop does and returns the
// delivery its handler would get.
func deliveryFor(t testing.TB, frames [][]byte, req *Request) (loop.Delivery[Request], error) {
	t.Helper()
	env, err := envelope.Parse(frames, &envelope.Options{MinBody: 1, MaxBody: 1})
	if err != nil {
		return loop.Delivery[Request]{}, err
	}
	if err := decodeRequest(env.Body, req); err != nil {
		return loop.Delivery[Request]{}, err
	}
	return loop.Delivery[Request]{Msg: socket.Msg{Frames: frames}, Envelope: &env, Value: req}, nil
}
