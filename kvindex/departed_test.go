package kvindex

import (
	"log/slog"
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
)

// departPrompt is 4 blocks of 4 tokens.
func departPrompt() []int64 {
	p := make([]int64, 16)
	for i := range p {
		p[i] = int64(500 + i)
	}
	return p
}

// storeBatch is one batch storing prompt's blocks with hashes base+1...
func storeBatch(prompt []int64, base uint64, seq uint64) kvevents.Update {
	hs := make([]kvevents.Hash, len(prompt)/4)
	for i := range hs {
		hs[i] = kvevents.IntHash(base + uint64(i) + 1)
	}
	return kvevents.Update{Kind: kvevents.UpdateBatch, Seq: seq, Batch: &kvevents.Batch{Seq: seq, Digest: seq + 7,
		Events: []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: prompt, BlockHashes: hs}}}}
}

// TestDeparted: an UpdateDeparted drops every entry, mapping and the
// position of that engine and nothing of the others, counts it, and an
// engine coming back under the name starts from nothing.
func TestDeparted(t *testing.T) {
	x, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	checkDeparted(t, x)
}

// checkDeparted runs TestDeparted's steps on x (an empty index, any
// backend).
func checkDeparted(t *testing.T, x *Index) {
	t.Helper()
	prompt := departPrompt()
	for i, e := range []string{"a", "b"} {
		u := storeBatch(prompt, uint64(100*(i+1)), 3)
		u.Source = e
		if err := x.Apply(u); err != nil {
			t.Fatal(err)
		}
	}
	score := func() map[string]int {
		r, err := x.Score(ScoreRequest{Tokens: prompt})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, e := range r.Engines {
			out[e.Engine] = e.Blocks
		}
		return out
	}
	if got := score(); got["a"] != 4 || got["b"] != 4 || len(got) != 2 {
		t.Fatalf("before: %v", got)
	}
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := score(); got["b"] != 4 || len(got) != 1 {
		t.Fatalf("after a departed: %v, want b only", got)
	}
	st := x.Stats()
	if st.Departed != 1 || st.Cleared != 4 || st.Backend.Entries != 4 || st.Backend.Mappings != 4 {
		t.Fatalf("stats after a departed: departed %d cleared %d entries %d mappings %d", st.Departed, st.Cleared,
			st.Backend.Entries, st.Backend.Mappings)
	}
	if _, ok := x.Positions()["a"]; ok {
		t.Fatalf("a's position kept: %v", x.Positions())
	}
	if _, ok := x.Positions()["b"]; !ok {
		t.Fatalf("b's position lost: %v", x.Positions())
	}
	// a comes back (a new run): a store whose parent a held before is an
	// unknown parent, so nothing of the old mappings survived.
	u := storeBatch(prompt[4:8], 100, 0)
	u.Source = "a"
	u.Batch.Events[0].ParentBlockHash = kvevents.Some(kvevents.IntHash(101))
	if err := x.Apply(u); err != nil {
		t.Fatal(err)
	}
	if got := score(); got["b"] != 4 || len(got) != 1 {
		t.Fatalf("a back with a child of its old block: %v, want b only", got)
	}
	if st := x.Stats(); st.UnknownParents != 1 {
		t.Fatalf("unknown parents %d, want 1", st.UnknownParents)
	}
	// Both depart: the index is empty.
	for _, e := range []string{"a", "b"} {
		if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: e}); err != nil {
			t.Fatal(err)
		}
	}
	if got := score(); len(got) != 0 {
		t.Fatalf("after both departed: %v", got)
	}
	if st := x.Stats(); st.Departed != 3 || st.Backend.Entries != 0 || st.Backend.Mappings != 0 {
		t.Fatalf("after both departed: departed %d entries %d mappings %d", st.Departed, st.Backend.Entries, st.Backend.Mappings)
	}
	if len(x.Positions()) != 0 {
		t.Fatalf("positions kept: %v", x.Positions())
	}
	if n := EnginesTracked(x); n != 0 {
		t.Fatalf("the index keeps state for %d departed engines", n)
	}
}
