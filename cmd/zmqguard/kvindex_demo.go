package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/socket"
)

// demoKVIndex is the demo's kv-index stage: two engines hold different
// prefixes and the index must route each prompt to its engine; then engine
// A's publisher restarts (seq back to 0) holding another prefix, and engine
// B's publisher, which has no replay endpoint, skips sequence numbers (a
// lost range, during which B may have dropped anything). The index must
// keep routing correctly and never report a block that may be gone as a
// certain hit.
type demoKVIndex struct {
	logger *slog.Logger
	done   chan struct{}
	steps  []string // what each step found, for the table's line
	err    error    // the first step that went wrong
	stats  kvindex.Stats
}

const demoKVIndexBS = 16

// demoRawPub is engine B: a bare XPUB writing vLLM's live frames with
// sequence numbers of its choosing (a kvevents.Publisher never skips one).
type demoRawPub struct {
	s    *socket.Socket
	seq  uint64
	wg   sync.WaitGroup
	stop context.CancelFunc
}

func newDemoRawPub(opts socket.Options) (*demoRawPub, error) {
	s, err := socket.New("XPUB", opts)
	if err != nil {
		return nil, err
	}
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		s.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &demoRawPub{s: s, stop: cancel}
	p.wg.Go(func() { // subscriptions are read and dropped
		for {
			if _, err := s.Recv(ctx); err != nil {
				return
			}
		}
	})
	return p, nil
}

func (p *demoRawPub) publish(ctx context.Context, evs ...kvevents.Event) error {
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], p.seq)
	p.seq++
	return p.s.Send(ctx, []byte("kv@engine-b"), seq[:], kvevents.AppendBatch(nil, float64(p.seq), evs, kvevents.Some[int64](0), true))
}

func (p *demoRawPub) close() {
	p.stop()
	p.s.Close()
	p.wg.Wait()
}

// demoDoc is a prompt of n blocks whose token ids depend on doc.
func demoDoc(doc, blocks int) []int64 {
	t := make([]int64, blocks*demoKVIndexBS)
	for i := range t {
		t[i] = int64(doc*100003+i*7919) % 150000
	}
	return t
}

// demoStore is engine-hash-numbered BlockStored of a prompt's first blocks.
func demoStore(hashBase uint64, tokens []int64) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: tokens, BlockSize: demoKVIndexBS, Medium: kvevents.Some("GPU")}
	for i := range len(tokens) / demoKVIndexBS {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(hashBase+uint64(i)))
	}
	return ev
}

// startDemoKVIndex runs the stage in the background; wait collects it.
func startDemoKVIndex(logger *slog.Logger, sockOpts socket.Options) *demoKVIndex {
	k := &demoKVIndex{logger: logger, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		k.err = guarded(func() error { return k.run(sockOpts) })
	}()
	return k
}

func (k *demoKVIndex) run(sockOpts socket.Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	x, err := kvindex.New(kvindex.Config{Logger: k.logger})
	if err != nil {
		return err
	}
	defer func() { k.stats = x.Stats(); x.Close() }()
	newA := func(live, replay string) (*kvevents.Publisher, error) {
		return kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: live, Bind: true, ReplayEndpoint: replay,
			Topic: "kv@engine-a", Socket: sockOpts, Logger: k.logger})
	}
	a, err := newA("tcp://127.0.0.1:0", "tcp://127.0.0.1:0")
	if err != nil {
		return err
	}
	defer func() { a.Close() }()
	b, err := newDemoRawPub(sockOpts)
	if err != nil {
		return err
	}
	defer b.close()
	sub, err := kvevents.NewSubscriber(kvevents.Config{Topic: "kv@", FromStart: true, Socket: sockOpts, Logger: k.logger,
		Handler: func(_ context.Context, u kvevents.Update) error { x.Apply(u); return nil }})
	if err != nil {
		return err
	}
	defer sub.Close()
	aLive, aReplay := a.Endpoint(), a.ReplayEndpoint()
	for _, s := range []kvevents.Source{{Name: "engine-a", Live: aLive, Replay: aReplay}, {Name: "engine-b", Live: b.s.Endpoint()}} {
		if err := sub.Add(s); err != nil {
			return err
		}
	}
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	// best returns the best engine (zero when none certainly holds a
	// block) and the first engine listed (certain or not).
	best := func(tokens []int64) (kvindex.EngineScore, kvindex.EngineScore) {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: tokens})
		if err != nil {
			return kvindex.EngineScore{}, kvindex.EngineScore{}
		}
		m, _ := r.Best()
		var top kvindex.EngineScore
		if len(r.Engines) > 0 {
			top = r.Engines[0]
		}
		return m, top
	}
	// until repeats step (publishing) until cond holds, bounded.
	until := func(what string, step func(), cond func() bool) error {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			step()
			if cond() {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: not within the bound", what)
			case <-t.C:
			}
		}
	}
	doc1, doc2, doc3 := demoDoc(1, 8), demoDoc(2, 8), demoDoc(3, 8)

	// 1. A holds doc1, B holds doc2: each prompt goes to its engine.
	if err := until("routing", func() {
		a.Publish(demoStore(100, doc1))
		b.publish(ctx, demoStore(200, doc2))
	}, func() bool {
		m1, _ := best(doc1)
		m2, _ := best(doc2)
		return m1.Engine == "engine-a" && m1.Blocks == 8 && m2.Engine == "engine-b" && m2.Blocks == 8
	}); err != nil {
		return err
	}
	k.steps = append(k.steps, "doc1 -> engine-a 8/8 blocks, doc2 -> engine-b 8/8")

	// 2. A restarts (seq back to 0) and holds doc3 only. The subscriber is
	// first taken past seq 500 (empty batches), where the new publisher
	// cannot get while the subscriber reconnects, so the restart shows as
	// a reset (not as a lost range, which would be safe as well).
	aBatches := func() uint64 {
		for _, s := range sub.Stats().Sources {
			if s.Name == "engine-a" {
				return s.Batches
			}
		}
		return 0
	}
	if err := until("seq", func() {
		for range 50 {
			a.Publish()
		}
	}, func() bool { return aBatches() >= 500 }); err != nil {
		return err
	}
	resets := x.Stats().Resets
	a.Close()
	if a, err = newA(aLive, aReplay); err != nil {
		return fmt.Errorf("restarting engine-a's publisher: %v", err)
	}
	if err := until("reset", func() { a.Publish(demoStore(300, doc3)) }, func() bool {
		m3, _ := best(doc3)
		return x.Stats().Resets > resets && m3.Engine == "engine-a" && m3.Blocks == 8
	}); err != nil {
		return err
	}
	if m1, top := best(doc1); m1.Blocks != 0 || top.MaybeBlocks != 0 {
		return fmt.Errorf("after engine-a's restart doc1 still scores %+v", top)
	}
	k.steps = append(k.steps, "engine-a restarted: doc1 -> no engine, doc3 -> engine-a 8/8")

	// 3. B skips 5 sequence numbers (no replay endpoint: a lost range).
	// B's doc2 blocks become uncertain: a maybe, never a certain hit;
	// once B stores doc2's first 4 blocks again they are certain again.
	losses := x.Stats().Losses
	b.seq += 5
	if err := until("lost range", func() { b.publish(ctx) }, func() bool { return x.Stats().Losses > losses }); err != nil {
		return err
	}
	if m2, top := best(doc2); m2.Blocks != 0 || top.Engine != "engine-b" || top.MaybeBlocks != 8 {
		return fmt.Errorf("after engine-b's lost range doc2 scores %+v (want no certain block, 8 maybe)", top)
	}
	if err := until("re-store", func() { b.publish(ctx, demoStore(200, doc2[:4*demoKVIndexBS])) }, func() bool {
		m2, _ := best(doc2)
		return m2.Engine == "engine-b" && m2.Blocks == 4
	}); err != nil {
		return err
	}
	k.steps = append(k.steps, "engine-b lost a range: doc2 -> engine-b 0 certain/8 maybe, 4 certain once re-stored")
	return nil
}

// wait waits (bounded) for the stage and reports whether it passed.
func (k *demoKVIndex) wait() bool {
	select {
	case <-k.done:
	case <-time.After(90 * time.Second):
		k.err = errors.New("the kv-index stage did not finish")
		return false
	}
	if k.err != nil {
		k.logger.Error("kv-index stage failed", "err", k.err)
	}
	return k.err == nil
}

// writeLine prints the stage's line under the demo's table.
func (k *demoKVIndex) writeLine(w io.Writer, ok bool) {
	fmt.Fprintf(w, "kv-index:              ")
	for i, s := range k.steps {
		if i > 0 {
			fmt.Fprint(w, "; ")
		}
		fmt.Fprint(w, s)
	}
	if k.err != nil {
		fmt.Fprintf(w, "; FAILED: %v", k.err)
	}
	fmt.Fprintf(w, " (%d resets, %d lost ranges, %d entries); routed correctly throughout: %s\n",
		k.stats.Resets, k.stats.Losses, k.stats.Backend.Entries, yesNo(ok))
}
