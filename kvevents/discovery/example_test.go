package discovery_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery"
	"github.com/zmqguard/zmqguard/kvindex"
)

// An index follows the engines a sources file lists: an engine listed is
// followed (and what it holds indexed), an engine taken out of the file is
// retired from the index. DNS{Host: ..., Port: 5557} is used the same way.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	slog.SetDefault(slog.New(slog.DiscardHandler)) // the joins and leaves go to the Subscriber's logger, here the default

	// An engine (vLLM's bytes, on a port the kernel picks) that cached one block.
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	prompt := []int64{1, 2, 3, 4}
	_ = pub.Publish(kvevents.Event{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: prompt,
		BlockHashes: []kvevents.Hash{kvevents.IntHash(7)}})

	x, err := kvindex.New(kvindex.Config{BlockSize: 4})
	if err != nil {
		panic(err)
	}
	defer x.Close()
	sub, err := kvevents.NewSubscriber(kvevents.Config{FromStart: true,
		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) }})
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	go sub.Run(ctx)

	// The sources file: LIVE [REPLAY] per line.
	file := filepath.Join(os.TempDir(), fmt.Sprintf("engines-%d.txt", os.Getpid()))
	defer os.Remove(file)
	if err := os.WriteFile(file, []byte(pub.Endpoint()+" "+pub.ReplayEndpoint()+"\n"), 0o644); err != nil {
		panic(err)
	}
	go discovery.Follow(ctx, sub, discovery.File{Path: file, Interval: 50 * time.Millisecond})

	until := func(cond func(kvindex.ScoreResult) bool) {
		for ctx.Err() == nil {
			r, _ := x.Score(kvindex.ScoreRequest{Tokens: prompt})
			if cond(r) {
				return
			}
			_ = pub.Publish() // a live batch shows the subscriber what it missed
			time.Sleep(20 * time.Millisecond)
		}
		panic("timed out")
	}
	until(func(r kvindex.ScoreResult) bool { return len(r.Engines) == 1 })
	fmt.Println("engines holding the prompt:", 1)

	// The engine is taken out of the file: it is retired from the index.
	if err := os.WriteFile(file, []byte("# none\n"), 0o644); err != nil {
		panic(err)
	}
	until(func(r kvindex.ScoreResult) bool { return len(r.Engines) == 0 })
	fmt.Println("engines holding the prompt:", 0, "departed:", x.Stats().Departed)
	// Output:
	// engines holding the prompt: 1
	// engines holding the prompt: 0 departed: 1
}
