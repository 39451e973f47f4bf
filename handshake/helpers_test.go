package handshake

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/socket"
)

// testCtx returns a context bounded by d, cancelled at test end.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fastOpts are socket options with quick reconnects, for test clients.
func fastOpts() socket.Options {
	o := socket.DefaultOptions()
	o.ReconnectMin = 20 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	return o
}

var quiet = slog.New(slog.DiscardHandler)

const testHash = "c940fa5f8b20d4d98d462af8137fb052eb4827d811a4ad4dcde0138bddb6d468"

// rankMetadata is sample metadata naming its engine and rank.
func rankMetadata(engine string, r Rank) nixlwire.NixlAgentMetadata {
	m := sampleMetadata()
	m.EngineID = engine
	m.DeviceID = nixlwire.Int(r.TP)
	m.NumBlocks = nixlwire.Int(1000 + 100*r.PP + r.TP)
	return m
}

// encodedPayload returns the encoded payload for rank r of engine.
func encodedPayload(t testing.TB, engine, hash string, r Rank) []byte {
	t.Helper()
	m := rankMetadata(engine, r)
	p, err := nixlwire.NewPayload(hash, &m)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.MarshalMsg(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testPayloads serves (0,0), (0,1) and (1,0) of engine "prefill-7".
func testPayloads(t testing.TB) map[Rank][]byte {
	ps := map[Rank][]byte{}
	for _, r := range []Rank{{0, 0}, {0, 1}, {1, 0}} {
		ps[r] = encodedPayload(t, "prefill-7", testHash, r)
	}
	return ps
}

// startListener binds a listener on a free loopback port and serves it
// until the test ends; Serve's result is checked at cleanup.
func startListener(t testing.TB, cfg ListenerConfig) *Listener {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = "tcp://127.0.0.1:0"
	}
	if cfg.Payloads == nil && cfg.Lookup == nil {
		cfg.Payloads = testPayloads(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	l, err := NewListener(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v", err)
		}
		l.Close()
	})
	return l
}

func fetchOpts(timeout time.Duration) ClientOptions {
	return ClientOptions{Timeout: timeout, ExpectedHash: testHash, ExpectedEngineID: "prefill-7", Socket: fastOpts()}
}

// mustFetch fetches and checks that the metadata is the one of rank want.
func mustFetch(t testing.TB, ep string, req Request, want Rank) Reply {
	t.Helper()
	r, err := Fetch(testCtx(t, 20*time.Second), ep, req, fetchOpts(10*time.Second))
	if err != nil {
		t.Fatalf("Fetch %+v: %v", req, err)
	}
	wantMeta := rankMetadata("prefill-7", want)
	if !sameMetadata(t, toWire(&r.Metadata), wantMeta) {
		t.Fatalf("Fetch %+v: got metadata %+v, want rank %v's", req, r.Metadata, want)
	}
	return r
}

// rawExchange sends body from a fresh REQ socket and returns the reply
// frames (delimiter stripped), copied.
func rawExchange(t testing.TB, ep string, body []byte) [][]byte {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	s, err := socket.New("REQ", fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Dial(ep); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, body); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(m.Frames))
	for i, f := range m.Frames {
		out[i] = bytes.Clone(f)
	}
	return out
}
