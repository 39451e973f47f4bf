// Command kvrouter shows a KV-cache-aware router end to end on real
// sockets: engines publish their KV events, a kvevents.Subscriber follows
// them, a kvindex.Index is built from its updates, and Score tells which
// engine caches the longest prefix of a prompt.
//
// It plays three vLLM engines in-process with kvevents.Publisher (vLLM's
// bytes, on loopback, ports chosen by the kernel). Before the router
// starts, each has cached part of one prompt: engine-0 its first 2 blocks,
// engine-1 its first 5 (in two batches), engine-2 all 6 but has since
// evicted the first, so it holds no prefix of it. The router joins late,
// with FromStart, so the batches it missed come back through each engine's
// replay socket; it waits (bounded) until every batch the engines published
// reached the index, then scores the prompt:
//
//	go run ./examples/kvrouter
//
// Routing a request is then one Score per prompt: send it to the best
// engine, or to the least loaded one when no engine caches a prefix.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter:", err)
		os.Exit(1)
	}
}

// model is what every engine serves; the index keys blocks per model.
const model = "meta-llama/Llama-3.1-8B-Instruct"

// blockSize is the engines' KV block size in tokens (vLLM's default on
// GPUs).
const blockSize = 16

// prompt is the token ids of the request to route: a chat prompt's 103
// tokens, 6 full blocks of 16 and a partial one (never cached: vLLM caches
// full blocks only).
var prompt = []int64{
	128000, 128006, 9125, 128007, 271, 38766, 1303, 33025, 2696, 25, 6790, 220, 2366, 18, 198, 15724,
	2696, 25, 220, 1627, 10263, 220, 2366, 19, 271, 2675, 527, 264, 11190, 18328, 430, 11503,
	4860, 922, 279, 2883, 596, 9624, 13, 22559, 1193, 505, 279, 9477, 3770, 13, 1442, 279,
	4320, 374, 539, 304, 1124, 11, 2019, 779, 13, 128009, 128006, 882, 128007, 271, 60704, 25,
	330, 1687, 11, 1120, 6442, 11, 279, 1887, 5727, 264, 4382, 6374, 315, 1202, 2819, 315,
	279, 1567, 12399, 11, 449, 264, 8250, 1584, 16239, 279, 4868, 3044, 5718, 1210, 128009, 128006,
	78191, 128007, 271, 791, 2883, 596, 9624,
}

// engine is one simulated vLLM engine: its publisher and the number of
// batches it published.
type engine struct {
	name string
	pub  *kvevents.Publisher
	sent int
	next uint64 // its next block hash (vLLM's own hashes differ per engine)
}

// store publishes one batch: a BlockStored of prompt blocks [from, to),
// chained to block from-1, as vLLM publishes a request's newly cached
// blocks. It returns the blocks' hashes.
func (e *engine) store(tokens []int64, from, to int, parent *kvevents.Hash) []kvevents.Hash {
	ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: blockSize, Medium: kvevents.Some("GPU"),
		TokenIDs: tokens[from*blockSize : to*blockSize]}
	if parent != nil {
		ev.ParentBlockHash = kvevents.Some(*parent)
	}
	for range to - from {
		e.next++
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(e.next))
	}
	e.publish(ev)
	return ev.BlockHashes
}

func (e *engine) publish(events ...kvevents.Event) {
	if e.pub.Publish(events...) == nil {
		e.sent++
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvrouter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wait := fs.Duration("wait", 30*time.Second, "the longest to wait for the engines' batches to reach the index")
	verbose := fs.Bool("v", false, "log the publishers' and the subscriber's lines on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}

	// The engines, each with a live and a replay socket on loopback.
	var engines []*engine
	defer func() {
		for _, e := range engines {
			e.pub.Close()
		}
	}()
	for i := range 3 {
		name := fmt.Sprintf("engine-%d", i)
		pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{
			Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
			Topic: "kv@" + name + "@" + model, Logger: logger.With("engine", name)})
		if err != nil {
			return err
		}
		engines = append(engines, &engine{name: name, pub: pub, next: uint64(i+1) << 32})
	}
	// What they cached before the router started.
	e0, e1, e2 := engines[0], engines[1], engines[2]
	e0.store(prompt, 0, 2, nil)
	h := e1.store(prompt, 0, 3, nil)
	e1.store(prompt, 3, 5, &h[2])
	h = e2.store(prompt, 0, 6, nil)
	e2.publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: h[:1], Medium: kvevents.Some("GPU")})

	// The router: an index fed by a subscriber that joins late and
	// replays from sequence 0.
	x, err := kvindex.New(kvindex.Config{Model: model, BlockSize: blockSize, Logger: logger})
	if err != nil {
		return err
	}
	defer x.Close()
	var mu sync.Mutex
	applied := map[string]int{} // batches applied to the index, per engine
	var lost []string
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Topic: "kv@", FromStart: true, Logger: logger,
		Handler: func(_ context.Context, u kvevents.Update) error {
			if err := x.Apply(u); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			switch u.Kind {
			case kvevents.UpdateBatch:
				applied[u.Source]++
			case kvevents.UpdateLost:
				lost = append(lost, fmt.Sprintf("%s [%d, %d)", u.Source, u.From, u.To))
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	defer sub.Close()
	for _, e := range engines {
		if err := sub.Add(kvevents.Source{Name: e.name, Live: e.pub.Endpoint(), Replay: e.pub.ReplayEndpoint()}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- sub.Run(ctx) }()
	defer func() { cancel(); sub.Close(); <-runErr }()

	// The engines go on serving other requests. Their live batches (here: a
	// block of some other prompt) show the subscriber the batches it
	// missed, which it replays. Wait until every batch each engine
	// published was applied.
	other := make([]int64, blockSize)
	for i := range other {
		other[i] = int64(5000 + i)
	}
	deadline := time.NewTimer(*wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var behind []string
		var silent []*engine // nothing of theirs applied yet
		mu.Lock()
		for _, e := range engines {
			if applied[e.name] < e.sent {
				behind = append(behind, fmt.Sprintf("%s %d of %d", e.name, applied[e.name], e.sent))
			}
			if applied[e.name] == 0 {
				silent = append(silent, e)
			}
		}
		gone := append([]string(nil), lost...)
		mu.Unlock()
		if len(gone) > 0 {
			return fmt.Errorf("batches lost, the index cannot be trusted for them: %v", gone)
		}
		if len(behind) == 0 {
			break
		}
		select {
		case err := <-runErr:
			runErr <- err // for the deferred receive
			return fmt.Errorf("subscriber stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("the index did not get every batch within %s: applied %v", *wait, behind)
		case <-tick.C:
		}
		for _, e := range silent {
			e.store(other, 0, 1, nil)
		}
	}

	r, err := x.Score(kvindex.ScoreRequest{Model: model, Tokens: prompt})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "prompt: %d tokens, %d full blocks of %d\n", len(prompt), r.PromptBlocks, blockSize)
	for _, e := range engines { // r.Engines lists only engines holding a prefix
		var s kvindex.EngineScore
		for _, es := range r.Engines {
			if es.Engine == e.name {
				s = es
			}
		}
		fmt.Fprintf(stdout, "%s: %d cached tokens (%d blocks)\n", e.name, s.Tokens, s.Blocks)
	}
	best, ok := r.Best()
	if !ok {
		return errors.New("no engine caches a prefix of the prompt")
	}
	fmt.Fprintf(stdout, "route to %s: %d of %d prompt tokens cached\n", best.Engine, best.Tokens, len(prompt))
	return nil
}
