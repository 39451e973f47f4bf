package kvmodel_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// The reference Model answers what an Index must answer for the same
// events; kvindextest.Run compares the two.
func ExampleModel() {
	m := kvmodel.NewModel(0, nil)
	toks := kvmodel.Tokens(1, 32)
	m.ApplyEvents("e0", []kvevents.Event{kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0)})
	m.ApplyEvents("e0", []kvevents.Event{kvmodel.Placeholder([]uint64{1}, "CPU", 0)})
	r := m.Score(kvindex.ScoreRequest{Tokens: toks}, kvmodel.BlockSize)
	for _, e := range r.Engines {
		for _, t := range e.Tiers {
			fmt.Printf("%s %s: %d blocks\n", e.Engine, t.Medium, t.Blocks)
		}
	}
	// Output:
	// e0 CPU: 1 blocks
	// e0 GPU: 2 blocks
}
