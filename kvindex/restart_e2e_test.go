package kvindex_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/socket"
)

// cutProxy forwards TCP connections to a target the test can change; with
// no target it closes every connection at once (a network cut, or an
// engine that is down while its subscriber retries).
type cutProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "tcp://")}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.set(""); p.wg.Wait() })
	return p
}

func (p *cutProxy) endpoint() string { return "tcp://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		if target == "" {
			p.mu.Unlock()
			c.Close()
			continue
		}
		d, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, d)
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(c, d)
		go pipe(d, c)
	}
}

// set changes the target ("" = down) and closes every open connection.
func (p *cutProxy) set(target string) {
	p.mu.Lock()
	p.target = strings.TrimPrefix(target, "tcp://")
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

// TestEngineRestartDuringBackoff is the first row of issue 35 through a
// real Publisher, Subscriber and Index: the engine restarts while its
// subscriber cannot reach it, and the new process has published past the
// old one's last seq when the subscriber reconnects. Before, the first seq
// seen was read as a gap and the new process's buffer replayed as the old
// run's continuation: a prompt only the dead process held scored certain.
// Now the continuity proof finds another run (a reset): that prompt is not
// certain.
func TestEngineRestartDuringBackoff(t *testing.T) {
	newPub := func() *kvevents.Publisher {
		p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
			ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	prompt := func(base int64) []int64 {
		p := make([]int64, 64)
		for i := range p {
			p[i] = base + int64(i)
		}
		return p
	}
	stored := func(tokens []int64, h uint64) kvevents.Event {
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, TokenIDs: tokens, Medium: kvevents.Some("GPU")}
		for i := range uint64(len(tokens) / 16) {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h+i))
		}
		return ev
	}
	dead := prompt(1000)

	a := newPub()
	live, replay := newCutProxy(t, a.Endpoint()), newCutProxy(t, a.ReplayEndpoint())
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var bNext atomic.Uint64 // 1 + the seq of the last batch of run B applied
	var bTS atomic.Value
	bTS.Store(0.0)
	opts := socket.DefaultOptions()
	opts.ReconnectMin, opts.ReconnectMax = 20*time.Millisecond, 100*time.Millisecond
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quiet, Socket: opts, FromStart: true,
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch && u.Batch.TS >= bTS.Load().(float64) && bTS.Load().(float64) > 0 {
				bNext.Store(u.Seq + 1)
			}
			return x.Apply(u)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(kvevents.Source{Name: "e", Live: live.endpoint(), Replay: replay.endpoint()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	certain := func(tokens []int64) int {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Engines {
			if e.Engine == "e" {
				return e.Tokens
			}
		}
		return 0
	}
	// Run A: the dead process's prompt, then filler until it is applied.
	if err := a.Publish(stored(dead, 1<<20)); err != nil {
		t.Fatal(err)
	}
	waitRestart(t, "run A applied", func() bool {
		a.Publish(stored(prompt(5000), 1<<30))
		time.Sleep(5 * time.Millisecond)
		st := sub.Stats()
		return certain(dead) == len(dead) && st.Batches >= 5
	})
	// The subscriber loses the engine; the engine restarts (new process,
	// new ports) and publishes past the old one's last seq.
	live.set("")
	replay.set("")
	waitRestart(t, "the subscriber disconnected", func() bool { return !sub.Stats().Connected })
	aLast := a.Stats().Seq
	a.Close()
	b := newPub()
	defer b.Close()
	bTS.Store(float64(time.Now().UnixNano()) / 1e9)
	for range aLast + 5 {
		b.Publish(stored(prompt(9000), 1<<40))
	}
	waitRestart(t, "run B buffered past run A", func() bool { return b.Stats().Seq >= aLast+5 })
	live.set(b.Endpoint())
	replay.set(b.ReplayEndpoint())
	waitRestart(t, "run B applied", func() bool {
		b.Publish(stored(prompt(9000), 1<<40))
		time.Sleep(5 * time.Millisecond)
		return bNext.Load() > aLast+5
	})
	if n := certain(dead); n != 0 {
		st := sub.Stats()
		t.Fatalf("the dead process's prompt scores %d tokens certain after the restart (resets %d, lost %d, proven %d)",
			n, st.Resets, st.Lost, st.ContinuityProven)
	}
	if st := sub.Stats(); st.ResetsBy.Digest != 1 {
		t.Fatalf("resets by digest %d (resets %d, unproven %d)", st.ResetsBy.Digest, st.Resets, st.Unproven)
	}
}

// waitRestart polls cond until it holds or 30 s pass.
func waitRestart(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEmptyLostRangeIsLoss: the subscriber reports a new connection whose
// continuity it could not prove as an UpdateLost with From == To (no batch
// known missing); the index must treat it as any loss: the engine's
// entries stop being certain.
func TestEmptyLostRangeIsLoss(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	tokens := make([]int64, 32)
	for i := range tokens {
		tokens[i] = int64(7 + i)
	}
	ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, TokenIDs: tokens, Medium: kvevents.Some("GPU"),
		BlockHashes: []kvevents.Hash{kvevents.IntHash(1), kvevents.IntHash(2)}}
	if err := x.ApplyEvents("e", []kvevents.Event{ev}); err != nil {
		t.Fatal(err)
	}
	score := func() kvindex.Prefix {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: tokens})
		if err != nil || len(r.Engines) != 1 {
			t.Fatalf("score %+v, %v", r, err)
		}
		return r.Engines[0].Prefix
	}
	if p := score(); p.Tokens != 32 {
		t.Fatalf("before: %+v", p)
	}
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: "e", From: 5, To: 5}); err != nil {
		t.Fatal(err)
	}
	if p := score(); p.Tokens != 0 || p.MaybeTokens != 32 {
		t.Fatalf("after an empty lost range: %+v (want 0 certain, 32 maybe)", p)
	}
}
