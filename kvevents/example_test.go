package kvevents_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// Follow one engine: the Handler sees its batches in order, exactly once,
// and is told when the engine restarted or what could not be recovered.
func ExampleSubscriber() {
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Handler: func(ctx context.Context, u kvevents.Update) error {
			switch u.Kind {
			case kvevents.UpdateBatch: // u.Batch.Events, in order, exactly once
			case kvevents.UpdateReset: // the engine restarted: forget what u.Source said
			case kvevents.UpdateLost: // batches [u.From, u.To) cannot be recovered
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	sub.Add(kvevents.Source{Name: "engine-0", Live: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"})
	log.Fatal(sub.Run(context.Background()))
}

// A Go publisher with vLLM's bytes and a Subscriber that joins late: the
// batches it missed come back through the replay endpoint, in order, before
// the live ones.
func Example() {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{
		Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@pod@model", Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	for i := range 3 {
		pub.Publish(kvevents.Event{Type: kvevents.BlockStored, BlockSize: 2, TokenIDs: []int64{1, 2},
			BlockHashes: []kvevents.Hash{kvevents.IntHash(uint64(100 + i))}, Medium: kvevents.Some("GPU")})
	}
	// Publish only queues: wait (bounded) until the three batches went out,
	// so they are in the replay buffer and no subscriber can have seen them
	// live. Without the wait a subscriber that connects first gets them live.
	for deadline := time.Now().Add(30 * time.Second); pub.Stats().Seq < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			panic("the publisher did not send its first batches within 30 s")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan string, 16)
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Topic: "kv@", FromStart: true, Logger: quiet,
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch && u.Seq < 3 {
				e := u.Batch.Events[0]
				got <- fmt.Sprintf("seq %d replayed=%v %s %s", u.Seq, u.Batch.Replayed, e.Type, e.BlockHashes[0])
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	sub.Add(kvevents.Source{Name: "engine-0", Live: pub.Endpoint(), Replay: pub.ReplayEndpoint()})
	go sub.Run(ctx)
	// Live traffic reveals the gap [0, n) to the late joiner.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := 0; n < 3; {
		select {
		case line := <-got:
			fmt.Println(line)
			n++
		case <-tick.C:
			pub.Publish(kvevents.Event{Type: kvevents.AllBlocksCleared})
		}
	}
	cancel()
	sub.Close()
	// Output:
	// seq 0 replayed=true BlockStored 100
	// seq 1 replayed=true BlockStored 101
	// seq 2 replayed=true BlockStored 102
}

// How an index reads the two BlockStored shapes that need care: an
// offloading placeholder (where a block now lives, no tokens) and a hybrid
// model's store whose tokens cover a block vLLM left out of block_hashes.
func ExampleEvent_SkippedBlocks() {
	events := []kvevents.Event{
		{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(7)},
			Medium: kvevents.Some("CPU")}, // block_size 0, no token_ids
		{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(9)}, BlockSize: 2,
			TokenIDs: []int64{1, 2, 3, 4}, Medium: kvevents.Some("GPU")},
	}
	p := kvevents.AppendBatch(nil, 1, events, kvevents.Some[int64](0), true)
	var b kvevents.Batch
	if err := kvevents.DecodeBatch(p, &b); err != nil {
		panic(err)
	}
	for _, e := range b.Events {
		switch {
		case e.Type == kvevents.BlockStored && len(e.TokenIDs) == 0: // a placeholder
			fmt.Println("location only:", e.BlockHashes[0], "now on", e.Medium.V)
		case e.SkippedBlocks() > 0:
			fmt.Println("tokens of", e.SkippedBlocks(), "block(s) without a hash: do not pair hashes with tokens by position")
		}
	}
	// Output:
	// location only: 7 now on CPU
	// tokens of 1 block(s) without a hash: do not pair hashes with tokens by position
}
