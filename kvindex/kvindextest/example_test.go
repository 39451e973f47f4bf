package kvindextest_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

// The reference Model answers what an Index must answer for the same
// events; a backend's tests compare the two (kvindextest.Run does).
func ExampleModel() {
	m := kvindextest.NewModel(0, nil)
	toks := kvindextest.Tokens(1, 32)
	m.ApplyEvents("e0", []kvevents.Event{kvindextest.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0)})
	m.ApplyEvents("e0", []kvevents.Event{kvindextest.Placeholder([]uint64{1}, "CPU", 0)})
	r := m.Score(kvindex.ScoreRequest{Tokens: toks}, kvindex.DefaultBlockSize)
	for _, e := range r.Engines {
		for _, t := range e.Tiers {
			fmt.Printf("%s %s: %d blocks\n", e.Engine, t.Medium, t.Blocks)
		}
	}
	// Output:
	// e0 CPU: 1 blocks
	// e0 GPU: 2 blocks
}
