package outputs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
)

var quiet = slog.New(slog.DiscardHandler)

// collected is what a test handler saw, copied out of the frames.
type collected struct {
	mu   sync.Mutex
	msgs []got
}

type got struct {
	engine int64
	ids    []string
	tokens [][]int64
}

func (c *collected) handler(n int, done context.CancelFunc) func(context.Context, *enginecore.Message, *socket.Peer) error {
	return func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
		g := got{engine: m.EngineIndex}
		for i := range m.Outputs {
			g.ids = append(g.ids, string(m.Outputs[i].RequestID))
			g.tokens = append(g.tokens, append([]int64(nil), m.Outputs[i].NewTokenIDs...))
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, g)
		if len(c.msgs) == n && done != nil {
			done()
		}
		c.mu.Unlock()
		return nil
	}
}

// start binds a receiver on loopback and runs it; the returned func waits
// for Run's result.
func start(t *testing.T, ctx context.Context, cfg Config) (*Receiver, func() error) {
	t.Helper()
	cfg.Logger = quiet
	cfg.Socket = socket.Options{}
	cfg.Socket.Logger = quiet
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	return r, func() error {
		select {
		case err := <-errc:
			r.Close()
			return err
		case <-time.After(20 * time.Second):
			r.Close()
			t.Fatal("Run did not return within 20 s")
			return nil
		}
	}
}

func pusher(t testing.TB, endpoint string) *socket.Socket {
	t.Helper()
	o := socket.DefaultOptions()
	o.Logger = quiet
	p, err := socket.New("PUSH", o)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Dial(endpoint); err != nil {
		t.Fatal(err)
	}
	return p
}

func send(t *testing.T, ctx context.Context, p *socket.Socket, frames ...[]byte) {
	t.Helper()
	if err := p.Send(ctx, frames...); err != nil {
		t.Fatal(err)
	}
}

func encode(m *enginecore.Message) [][]byte {
	var e enginecore.Encoder
	f := e.Encode(m)
	return append([][]byte(nil), f...)
}

func simple(engine int64, id string, tok ...int64) *enginecore.Message {
	return &enginecore.Message{Header: enginecore.Header{EngineIndex: engine, Timestamp: 1.5},
		Outputs: []enginecore.Output{{RequestID: []byte(id), NewTokenIDs: tok}}}
}

// The seed: a scanner's bare int frame, then a valid EngineCoreOutputs.
// vLLM's client died on the first; the valid one must be delivered.
func TestSeedRegression(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(1, done)})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, []byte{0x45})
	send(t, ctx, p, encode(simple(0, "req-1", 11, 12))...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the valid message was not delivered in time")
	}
	if len(c.msgs) != 1 || c.msgs[0].ids[0] != "req-1" || c.msgs[0].tokens[0][1] != 12 {
		t.Fatalf("delivered %+v", c.msgs)
	}
	st := r.Stats()
	if st.Dropped[decodeguard.ReasonDecode] != 1 || st.Unattributed[decodeguard.ReasonDecode] != 1 || st.Messages != 1 || st.Outputs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEngineDeadCallbackAndPerEngineDrops(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	deadc := make(chan EngineDeadError, 4)
	r, wait := start(t, rctx, Config{Handler: c.handler(2, nil), OnEngineDead: func(e EngineDeadError) { deadc <- e }})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, encode(simple(2, "a", 1))...)
	send(t, ctx, p, []byte("not msgpack \xc1"))
	send(t, ctx, p, []byte(engineCoreDead))
	send(t, ctx, p, encode(simple(2, "b", 2))...)
	var ev EngineDeadError
	select {
	case ev = <-deadc:
	case <-ctx.Done():
		t.Fatal("no ENGINE_CORE_DEAD event")
	}
	if ev.Engine != 2 || !errors.Is(&ev, ErrEngineDead) {
		t.Fatalf("event %+v", ev)
	}
	for ctx.Err() == nil && r.Stats().Messages < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	done()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if len(st.Engines) != 1 || st.Engines[0].Engine != 2 || !st.Engines[0].Dead || st.Engines[0].Messages != 2 ||
		st.Engines[0].Dropped[decodeguard.ReasonDecode] != 1 || st.EngineDead != 1 || st.Unattributed.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEngineDeadNeverEndsRun (issue 29 row 4): a raw peer that never sent
// a valid message sends ENGINE_CORE_DEAD. Run goes on (it used to return
// an *EngineDeadError), no OnEngineDead runs, the sentinel is counted and
// dropped, and the next valid message is delivered.
func TestEngineDeadNeverEndsRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	var calls atomic.Int64
	r, wait := start(t, rctx, Config{Handler: c.handler(1, done),
		OnEngineDead: func(EngineDeadError) { calls.Add(1) }})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, []byte(engineCoreDead))
	send(t, ctx, p, encode(simple(0, "after", 1))...)
	if err := wait(); err != nil {
		t.Fatalf("Run returned %v, want nil after the valid message", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the valid message after the sentinel was not delivered in time")
	}
	st := r.Stats()
	if calls.Load() != 0 || st.EngineDead != 0 || st.UnattributedDead != 1 || st.Messages != 1 ||
		st.Dropped[decodeguard.ReasonPolicy] != 1 || st.Unattributed[decodeguard.ReasonPolicy] != 1 {
		t.Fatalf("OnEngineDead calls %d, stats %+v", calls.Load(), st)
	}
	if len(st.Engines) != 1 || st.Engines[0].Dead {
		t.Fatalf("engines %+v", st.Engines)
	}
}

// TestEngineDeadWithoutCallbackGoesOn: with OnEngineDead nil, the sentinel
// of an engine that holds its index marks it dead and Run goes on.
func TestEngineDeadWithoutCallbackGoesOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(2, done)})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, encode(simple(3, "a", 1))...)
	send(t, ctx, p, []byte(engineCoreDead))
	send(t, ctx, p, encode(simple(3, "b", 2))...)
	if err := wait(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("messages not delivered in time")
	}
	st := r.Stats()
	if st.EngineDead != 1 || len(st.Engines) != 1 || !st.Engines[0].Dead || st.Messages != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEngineIndexBoundToFirstConnection (issue 29 row 4): engine 0 is
// held by the first connection that claims it. A second connection's
// valid messages claiming engine 0 are dropped (ReasonPolicy,
// ClaimsRefused), its sentinel does not mark engine 0 dead and reaches no
// callback. Once the first connection has disconnected, the second claims
// the index (a restarted engine).
func TestEngineIndexBoundToFirstConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	deadc := make(chan EngineDeadError, 4)
	r, wait := start(t, rctx, Config{Handler: c.handler(3, done), OnEngineDead: func(e EngineDeadError) { deadc <- e }})
	honest := pusher(t, r.Endpoint())
	defer honest.Close()
	send(t, ctx, honest, encode(simple(0, "honest-1", 1))...)
	poll.WaitForCtx(t, ctx, "the honest engine's first message", func() bool { return r.Stats().Messages == 1 })
	evil := pusher(t, r.Endpoint())
	defer evil.Close()
	send(t, ctx, evil, encode(simple(0, "forged", 666))...)
	send(t, ctx, evil, []byte(engineCoreDead))
	poll.WaitForCtx(t, ctx, "the forged claim and sentinel counted", func() bool {
		st := r.Stats()
		return st.ClaimsRefused == 1 && st.UnattributedDead == 1
	})
	send(t, ctx, honest, encode(simple(0, "honest-2", 2))...)
	poll.WaitForCtx(t, ctx, "the honest engine's second message", func() bool { return r.Stats().Messages == 2 })
	st := r.Stats()
	if st.EngineDead != 0 || len(st.Engines) != 1 || st.Engines[0].Dead || st.Engines[0].Messages != 2 ||
		st.Dropped[decodeguard.ReasonPolicy] != 2 || st.Unattributed[decodeguard.ReasonPolicy] != 2 {
		t.Fatalf("after the forged claim: stats %+v", st)
	}
	select {
	case ev := <-deadc:
		t.Fatalf("OnEngineDead for a forged sentinel: %+v", ev)
	default:
	}
	// The honest engine goes away; the index is free for its successor.
	honest.Close()
	poll.WaitForCtx(t, ctx, "the honest connection's departure", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.gone) == 1
	})
	send(t, ctx, evil, encode(simple(0, "restarted", 3))...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the restarted engine's message was not delivered in time")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, g := range c.msgs {
		ids = append(ids, g.ids...)
	}
	if fmt.Sprint(ids) != "[honest-1 honest-2 restarted]" {
		t.Fatalf("delivered %v", ids)
	}
}

func TestUnknownEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Engines: 2, Handler: c.handler(1, done)})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	send(t, ctx, p, encode(simple(2, "x", 1))...)
	send(t, ctx, p, encode(simple(1, "y", 1))...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Dropped[decodeguard.ReasonUnknownRank] != 1 || len(c.msgs) != 1 || c.msgs[0].engine != 1 {
		t.Fatalf("stats %+v, msgs %+v", st, c.msgs)
	}
}

// Two engines interleave; each engine's outputs arrive in the order it sent
// them.
func TestPerEngineOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const per = 300
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(2*per, done)})
	var wg sync.WaitGroup
	for e := int64(0); e < 2; e++ {
		p := pusher(t, r.Endpoint())
		defer p.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				if err := p.Send(ctx, encode(simple(e, fmt.Sprint(i), int64(i)))...); err != nil {
					return
				}
				if i%50 == 0 {
					_ = p.Send(ctx, []byte{0x45}) // junk in between
				}
			}
		}()
	}
	wg.Wait()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	next := map[int64]int64{}
	for _, m := range c.msgs {
		if m.tokens[0][0] != next[m.engine] {
			t.Fatalf("engine %d: got %d, want %d", m.engine, m.tokens[0][0], next[m.engine])
		}
		next[m.engine]++
	}
	if next[0] != per || next[1] != per {
		t.Fatalf("delivered %v", next)
	}
	st := r.Stats()
	if st.Dropped[decodeguard.ReasonDecode] != 12 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("no handler accepted")
	}
	if _, err := New(Config{Handler: func(context.Context, *enginecore.Message, *socket.Peer) error { return nil }, Engines: -1}); err == nil {
		t.Fatal("negative Engines accepted")
	}
}

// With the connection map full, departed connections are forgotten so a
// new engine's drops are still attributed to it.
func TestPeerMapEviction(t *testing.T) {
	old := maxTrackedPeers
	maxTrackedPeers = 1
	defer func() { maxTrackedPeers = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(0, nil)})
	a := pusher(t, r.Endpoint())
	send(t, ctx, a, encode(simple(0, "a", 1))...)
	for ctx.Err() == nil && r.Stats().Messages < 1 {
		time.Sleep(10 * time.Millisecond)
	}
	a.Close()
	for ctx.Err() == nil {
		r.mu.Lock()
		n := len(r.gone)
		r.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := pusher(t, r.Endpoint())
	defer b.Close()
	send(t, ctx, b, encode(simple(1, "b", 1))...)
	send(t, ctx, b, []byte{0x45})
	for ctx.Err() == nil && r.Stats().Received < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	done()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if len(st.Engines) != 2 || st.Engines[1].Engine != 1 || st.Engines[1].Dropped[decodeguard.ReasonDecode] != 1 || st.Unattributed.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A busy step: 256 outputs with logprobs in 156 aux frames, far over
// socket.DefaultOptions' 64-frame limit, is delivered whole.
func TestManyAuxFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(1, done)})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	frames := benchMessage()
	if len(frames) != 157 {
		t.Fatalf("%d frames", len(frames))
	}
	send(t, ctx, p, frames...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	if len(c.msgs) != 1 || len(c.msgs[0].ids) != 256 || st.Dropped.Total() != 0 {
		t.Fatalf("delivered %d messages, stats %+v", len(c.msgs), st)
	}
}

// TestClaimsPerConnectionBounded: one connection cannot hold more than
// maxClaimsPerConnection engine indices; a later connection still claims a
// free one.
func TestClaimsPerConnectionBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collected
	rctx, done := context.WithCancel(ctx)
	defer done()
	r, wait := start(t, rctx, Config{Handler: c.handler(maxClaimsPerConnection+1, done)})
	greedy := pusher(t, r.Endpoint())
	defer greedy.Close()
	for e := 0; e < maxClaimsPerConnection+10; e++ {
		send(t, ctx, greedy, encode(simple(int64(e), "g", 1))...)
	}
	poll.WaitForCtx(t, ctx, "the greedy claims taken off the socket", func() bool {
		return r.Stats().Received == maxClaimsPerConnection+10
	})
	other := pusher(t, r.Endpoint())
	defer other.Close()
	send(t, ctx, other, encode(simple(1000, "other", 1))...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the other connection's claim was not delivered in time")
	}
	if st := r.Stats(); st.ClaimsRefused != 10 || st.Messages != maxClaimsPerConnection+1 {
		t.Fatalf("stats: refused %d, messages %d", st.ClaimsRefused, st.Messages)
	}
}
