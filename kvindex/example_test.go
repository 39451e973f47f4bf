package kvindex_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// Two engines cache parts of one prompt; the index says which holds the
// longest prefix, on which medium, and stops calling a block certain once
// the engine's events were lost.
func Example() {
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		panic(err)
	}
	defer x.Close()

	prompt := make([]int64, 64) // 4 blocks of 16 tokens
	for i := range prompt {
		prompt[i] = int64(1000 + i)
	}
	stored := func(tokens []int64, hashes ...uint64) kvevents.Event {
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, TokenIDs: tokens, Medium: kvevents.Some("GPU")}
		for _, h := range hashes {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
		}
		return ev
	}
	// In a router this is the kvevents.Subscriber's Handler:
	//   func(_ context.Context, u kvevents.Update) error { return x.Apply(u) }
	x.ApplyEvents("engine-a", []kvevents.Event{stored(prompt, 11, 12, 13, 14)})
	x.ApplyEvents("engine-b", []kvevents.Event{stored(prompt[:32], 901, 902)})

	show := func() {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: prompt})
		if err != nil {
			panic(err)
		}
		for _, e := range r.Engines {
			fmt.Printf("%s: %d tokens certain, %d maybe\n", e.Engine, e.Tokens, e.MaybeTokens)
		}
	}
	show()
	// engine-a's subscriber reports a lost range: its blocks may be gone.
	x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: "engine-a", From: 7, To: 9})
	fmt.Println("after a lost range:")
	show()
	// Output:
	// engine-a: 64 tokens certain, 64 maybe
	// engine-b: 32 tokens certain, 32 maybe
	// after a lost range:
	// engine-b: 32 tokens certain, 32 maybe
	// engine-a: 0 tokens certain, 64 maybe
}
