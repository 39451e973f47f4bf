package kvindex_test

import (
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// TestApplyDeparted: an engine's UpdateDeparted (issue 36: removed, or
// gone for kvevents.Config.EngineTTL) drops its entries; the others stay.
func TestApplyDeparted(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Capacity: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	toks := kvmodel.Tokens(1, 32)
	for _, e := range []string{"a", "b"} {
		b := &kvevents.Batch{Events: []kvevents.Event{kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0)}}
		if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: b, Seq: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: "a"}); err != nil {
		t.Fatal(err)
	}
	r, err := x.Score(kvindex.ScoreRequest{Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Engines) != 1 || r.Engines[0].Engine != "b" || r.Engines[0].Blocks != 2 {
		t.Fatalf("after a's departure: %+v, want b alone with 2 blocks", r.Engines)
	}
}
