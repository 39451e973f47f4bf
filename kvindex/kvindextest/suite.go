// Package kvindextest is the conformance suite every [kvindex.Backend]
// passes; call [Run] from a backend's tests:
//
//	func TestConformance(t *testing.T) {
//		kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
//			be, err := mystore.New(capacity)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { be.Close() })
//			return be
//		}, kvindextest.Options{})
//	}
//
// Run checks the backend against the index's rules, through a
// kvindex.Index, with hand-written cases and a bounded model-based property
// test against a reference model (the rules written plainly).
package kvindextest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// Factory makes a fresh, empty Backend for one test, holding at most
// capacity entries (0: the backend's default, which must hold at least
// 100,000), and arranges its clean-up with t.Cleanup.
type Factory func(t *testing.T, capacity int) kvindex.Backend

// Options tunes Run.
type Options struct {
	// PropertySteps bounds the batches of each random stream of the
	// property test. Zero means 60. How many streams run is rapid's
	// -rapid.checks flag (default 100).
	PropertySteps int
	// SkipExactEviction skips the check that eviction removes the oldest
	// entries first (by first store); a backend that documents another
	// policy sets it. Capacity bounds and counts are checked regardless.
	SkipExactEviction bool
	// CapacityBackend, when set, makes the backends of the Capacity case
	// (which counts capacity and evicts oldest-first over the whole
	// index) instead of the Factory given to Run: a backend whose
	// capacity bound is per shard gives one with a single shard there.
	CapacityBackend Factory
}

// Run runs the conformance suite against the backends newBackend makes.
func Run(t *testing.T, newBackend Factory, o Options) {
	cases := []struct {
		name string
		f    func(t *testing.T, newBackend Factory, o Options)
	}{
		{"StoreAndScore", testStoreAndScore},
		{"ChainAcrossEvents", testChainAcrossEvents},
		{"UnknownParent", testUnknownParent},
		{"Placeholder", testPlaceholder},
		{"Removal", testRemoval},
		{"ClearAndReset", testClearAndReset},
		{"LostRange", testLostRange},
		{"Idempotent", testIdempotent},
		{"GroupsAndMedia", testGroupsAndMedia},
		{"LoraAndExtraKeys", testLoraAndExtraKeys},
		{"Models", testModels},
		{"Remap", testRemap},
		{"BatchResolution", testBatchResolution},
		{"Capacity", testCapacity},
		{"Concurrent", testConcurrent},
		{"Property", testProperty},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, newBackend, o) })
	}
}

// newIndex makes an index over a fresh backend.
func newIndex(t *testing.T, newBackend Factory, capacity int, cfg kvindex.Config) *kvindex.Index {
	t.Helper()
	cfg.Backend = newBackend(t, capacity)
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

func seqHashes(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

func apply(t *testing.T, x *kvindex.Index, engine string, evs ...kvevents.Event) {
	t.Helper()
	if err := x.ApplyEvents(engine, evs); err != nil {
		t.Fatal(err)
	}
}

func score(t *testing.T, x *kvindex.Index, req kvindex.ScoreRequest) kvindex.ScoreResult {
	t.Helper()
	r, err := x.Score(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// find returns engine's prefix on medium ("": any medium), zero when
// none.
func find(r kvindex.ScoreResult, engine, med string) kvindex.Prefix {
	for _, e := range r.Engines {
		if e.Engine != engine {
			continue
		}
		if med == "" {
			return e.Prefix
		}
		for _, t := range e.Tiers {
			if t.Medium == med {
				return t.Prefix
			}
		}
	}
	return kvindex.Prefix{}
}

func expect(t *testing.T, r kvindex.ScoreResult, engine, med string, blocks, maybe int) {
	t.Helper()
	p := find(r, engine, med)
	if p.Blocks != blocks || p.MaybeBlocks != maybe {
		t.Fatalf("%s/%s: %d certain, %d maybe blocks; want %d, %d (all: %+v)", engine, med, p.Blocks, p.MaybeBlocks, blocks, maybe, r.Engines)
	}
	if p.Tokens%max(p.Blocks, 1) != 0 || p.MaybeTokens < p.Tokens {
		t.Fatalf("%s/%s: tokens %+v", engine, med, p)
	}
}

func testStoreAndScore(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(1, 64)
	apply(t, x, "e0", kvmodel.Store(seqHashes(100, 4), -1, toks, 16, "GPU", 0))
	apply(t, x, "e1", kvmodel.Store(seqHashes(900, 2), -1, toks[:32], 16, "GPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: append(append([]int64{}, toks...), 5, 6, 7)})
	if r.PromptBlocks != 4 {
		t.Fatalf("PromptBlocks %d, want 4", r.PromptBlocks)
	}
	expect(t, r, "e0", "GPU", 4, 4)
	expect(t, r, "e1", "GPU", 2, 2)
	if best, ok := r.Best(); !ok || best.Engine != "e0" || best.Tokens != 64 {
		t.Fatalf("Best %+v %v", best, ok)
	}
	// A prompt diverging in its second block matches one block.
	other := append(append([]int64{}, toks[:16]...), kvmodel.Tokens(2, 48)...)
	r = score(t, x, kvindex.ScoreRequest{Tokens: other})
	expect(t, r, "e0", "GPU", 1, 1)
	expect(t, r, "e1", "GPU", 1, 1)
	// A prompt whose first block differs matches nothing, even if later
	// blocks are equal.
	diff := append([]int64{}, toks...)
	diff[3]++
	if r := score(t, x, kvindex.ScoreRequest{Tokens: diff}); len(r.Engines) != 0 {
		t.Fatalf("changed first block: %+v", r.Engines)
	}
	// Another block size is another key space.
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks, BlockSize: 32}); len(r.Engines) != 0 {
		t.Fatalf("block size 32: %+v", r.Engines)
	}
	// Fewer tokens than a block: nothing to match.
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks[:15]}); len(r.Engines) != 0 || r.PromptBlocks != 0 {
		t.Fatalf("partial block: %+v", r)
	}
	st := x.Stats()
	if st.Added != 6 || st.Backend.Entries != 6 || st.Stores != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func testChainAcrossEvents(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(3, 64)
	// Two events, the second chained to the first by its parent hash, in
	// separate batches.
	apply(t, x, "e0", kvmodel.Store([]uint64{11, 12}, -1, toks[:32], 16, "GPU", 0))
	apply(t, x, "e0", kvmodel.Store([]uint64{13, 14}, 12, toks[32:], 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 4, 4)
	// The chain keys equal one event's keys: the same blocks stored by
	// another engine in one event, under other hashes.
	apply(t, x, "e1", kvmodel.Store([]uint64{71, 72, 73, 74}, -1, toks, 16, "GPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e1", "GPU", 4, 4)
	expect(t, r, "e0", "GPU", 4, 4)
}

func testUnknownParent(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(4, 64)
	// Joined late: the parent 12 was never seen. The store is not indexed
	// (it would chain to a wrong prefix) and its children neither.
	apply(t, x, "e0", kvmodel.Store([]uint64{13, 14}, 12, toks[32:], 16, "GPU", 0))
	apply(t, x, "e0", kvmodel.Store([]uint64{15}, 14, kvmodel.Tokens(5, 16), 16, "GPU", 0))
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks[32:]}); len(r.Engines) != 0 {
		t.Fatalf("unknown parent indexed as a first block: %+v", r.Engines)
	}
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks}); len(r.Engines) != 0 {
		t.Fatalf("unknown parent matched: %+v", r.Engines)
	}
	if st := x.Stats(); st.UnknownParents != 2 || st.Backend.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Once the engine stores the whole prompt, it matches.
	apply(t, x, "e0", kvmodel.Store([]uint64{11, 12, 13, 14}, -1, toks, 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 4, 4)
	// A parent removed from every medium is unknown again.
	apply(t, x, "e0", kvmodel.Remove([]uint64{14}, "GPU", 0))
	apply(t, x, "e0", kvmodel.Store([]uint64{16}, 14, kvmodel.Tokens(6, 16), 16, "GPU", 0))
	if st := x.Stats(); st.UnknownParents != 3 {
		t.Fatalf("UnknownParents %d, want 3", st.UnknownParents)
	}
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 3, 3)
}

func testPlaceholder(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(7, 48)
	apply(t, x, "e0", kvmodel.Store([]uint64{21, 22, 23}, -1, toks, 16, "GPU", 0))
	// The offloading connector copies the first two blocks to CPU.
	apply(t, x, "e0", kvmodel.Placeholder([]uint64{21}, "CPU", 0), kvmodel.Placeholder([]uint64{22}, "CPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 3, 3)
	expect(t, r, "e0", "CPU", 2, 2)
	// A prefix may span media: GPU holds blocks 0-1, CPU block 2 only.
	apply(t, x, "e1", kvmodel.Store([]uint64{121, 122, 123}, -1, toks, 16, "GPU", 0))
	apply(t, x, "e1", kvmodel.Placeholder([]uint64{123}, "CPU", 0), kvmodel.Remove([]uint64{123}, "GPU", 0))
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e1", "", 3, 3)
	expect(t, r, "e1", "GPU", 2, 2)
	expect(t, r, "e1", "CPU", 0, 0)
	// GPU evicts them; CPU keeps them.
	apply(t, x, "e0", kvmodel.Remove([]uint64{21, 22, 23}, "GPU", 0))
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 0, 0)
	expect(t, r, "e0", "CPU", 2, 2)
	// A placeholder for a hash the engine never stored with tokens has no
	// key: counted, not indexed.
	apply(t, x, "e0", kvmodel.Placeholder([]uint64{999}, "CPU", 0))
	if st := x.Stats(); st.UnknownPlaceholders != 1 || st.Placeholders != 4 {
		t.Fatalf("stats %+v", st)
	}
	// CPU removal.
	apply(t, x, "e0", kvmodel.Remove([]uint64{21}, "CPU", 0))
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks}); len(r.Engines) != 1 {
		t.Fatalf("after CPU removal: %+v", r.Engines)
	}
	if st := x.Stats(); st.Backend.Entries != 4 {
		t.Fatalf("entries %d, want 4", st.Backend.Entries)
	}
}

func testRemoval(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(8, 64)
	apply(t, x, "e0", kvmodel.Store([]uint64{31, 32, 33, 34}, -1, toks, 16, "GPU", 0))
	apply(t, x, "e0", kvmodel.Remove([]uint64{33}, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 2)
	// Removing what is not held is a counted no-op: another medium, an
	// unknown hash, twice the same.
	apply(t, x, "e0", kvmodel.Remove([]uint64{31}, "CPU", 0), kvmodel.Remove([]uint64{77}, "GPU", 0), kvmodel.Remove([]uint64{33}, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 2)
	if st := x.Stats(); st.UnknownRemovals != 3 || st.Removed != 1 || st.Backend.Entries != 3 {
		t.Fatalf("stats %+v", st)
	}
	// Removal is per engine.
	apply(t, x, "e1", kvmodel.Store([]uint64{31}, -1, toks[:16], 16, "GPU", 0))
	apply(t, x, "e1", kvmodel.Remove([]uint64{32}, "GPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e1", "GPU", 1, 1)
	expect(t, r, "e0", "GPU", 2, 2)
}

func testClearAndReset(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(9, 32)
	apply(t, x, "e0", kvmodel.Store([]uint64{41, 42}, -1, toks, 16, "GPU", 0), kvmodel.Placeholder([]uint64{41}, "CPU", 0))
	apply(t, x, "e1", kvmodel.Store([]uint64{51, 52}, -1, toks, 16, "GPU", 0))
	apply(t, x, "e0", kvmodel.Cleared())
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 0, 0)
	expect(t, r, "e0", "CPU", 0, 0)
	expect(t, r, "e1", "GPU", 2, 2)
	// The engine's hashes are forgotten: a child of 42 is an unknown
	// parent now.
	apply(t, x, "e0", kvmodel.Store([]uint64{43}, 42, kvmodel.Tokens(10, 16), 16, "GPU", 0))
	if st := x.Stats(); st.UnknownParents != 1 || st.Cleared != 3 || st.Backend.Entries != 2 || st.Backend.Mappings != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A publisher reset (restart) clears the same way.
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: "e1"}); err != nil {
		t.Fatal(err)
	}
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks}); len(r.Engines) != 0 {
		t.Fatalf("after reset: %+v", r.Engines)
	}
	if st := x.Stats(); st.Resets != 1 || st.Backend.Entries != 0 || st.Backend.Mappings != 0 || st.Backend.Blocks != 0 {
		t.Fatalf("stats %+v", st)
	}
	// After the clear the engine indexes again, trusted.
	apply(t, x, "e1", kvmodel.Store([]uint64{51, 52}, -1, toks, 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e1", "GPU", 2, 2)
}

func testLostRange(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(11, 64)
	apply(t, x, "e0", kvmodel.Store([]uint64{61, 62, 63, 64}, -1, toks, 16, "GPU", 0))
	apply(t, x, "e1", kvmodel.Store([]uint64{61, 62}, -1, toks[:32], 16, "GPU", 0))
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: "e0", From: 5, To: 9}); err != nil {
		t.Fatal(err)
	}
	// Never a certain hit the engine may no longer hold.
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 0, 4)
	expect(t, r, "e1", "GPU", 2, 2)
	if best, _ := r.Best(); best.Engine != "e1" {
		t.Fatalf("best %+v", best)
	}
	// Stored again after the loss: trusted again (a prefix of trusted
	// blocks is certain up to the first uncertain one).
	apply(t, x, "e0", kvmodel.Store([]uint64{61, 62}, -1, toks[:32], 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 4)
	// New stores after the loss are trusted; an uncertain block in the
	// middle stops the certain prefix there.
	apply(t, x, "e0", kvmodel.Store([]uint64{64}, 63, toks[48:], 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 4)
	// Removal of an uncertain block works as usual.
	apply(t, x, "e0", kvmodel.Remove([]uint64{63}, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 2)
	// A clear makes everything certain again (there is nothing left).
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: "e0"}); err != nil {
		t.Fatal(err)
	}
	apply(t, x, "e0", kvmodel.Store([]uint64{61, 62, 63, 64}, -1, toks, 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 4, 4)
	if st := x.Stats(); st.Losses != 1 || st.Resets != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func testIdempotent(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(12, 48)
	ev := kvmodel.Store([]uint64{71, 72, 73}, -1, toks, 16, "GPU", 0)
	for i := 0; i < 3; i++ {
		apply(t, x, "e0", ev, ev)
	}
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 3, 3)
	st := x.Stats()
	if st.Added != 3 || st.Refreshed != 15 || st.Backend.Entries != 3 || st.Backend.Blocks != 3 || st.Backend.Mappings != 3 {
		t.Fatalf("stats %+v", st)
	}
	rm := kvmodel.Remove([]uint64{73}, "GPU", 0)
	apply(t, x, "e0", rm, rm)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 2)
}

func testGroupsAndMedia(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(13, 32)
	// A hybrid model publishes the same blocks per KV-cache group.
	apply(t, x, "e0", kvmodel.Store([]uint64{81, 82}, -1, toks, 16, "GPU", 0), kvmodel.Store([]uint64{81, 82}, -1, toks, 16, "GPU", 1))
	if st := x.Stats(); st.Backend.Entries != 4 || st.Backend.Blocks != 2 || st.Backend.Mappings != 2 {
		t.Fatalf("stats %+v", st.Backend)
	}
	// Groups that do not hold whole prefixes (sliding window, Mamba) are
	// left out: a prefix counts where the full-attention group holds it.
	swa := kvmodel.Store([]uint64{85, 86}, -1, kvmodel.Tokens(22, 32), 16, "GPU", 1)
	swa.KVCacheSpecKind = kvevents.Some("sliding_window")
	fa := kvmodel.Store([]uint64{85}, -1, kvmodel.Tokens(22, 16), 16, "GPU", 0)
	fa.KVCacheSpecKind = kvevents.Some("full_attention")
	apply(t, x, "e3", swa, fa)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: kvmodel.Tokens(22, 32)}), "e3", "GPU", 1, 1)
	swaRm := kvmodel.Remove([]uint64{85}, "GPU", 1)
	swaRm.KVCacheSpecKind = kvevents.Some("sliding_window")
	apply(t, x, "e3", swaRm)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: kvmodel.Tokens(22, 32)}), "e3", "GPU", 1, 1)
	if st := x.Stats(); st.PartialGroups != 2 {
		t.Fatalf("PartialGroups %d, want 2", st.PartialGroups)
	}
	// Without a kind (releases before it was sent), a block counts while
	// any group holds it.
	apply(t, x, "e0", kvmodel.Remove([]uint64{82}, "GPU", 1))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 2, 2)
	apply(t, x, "e0", kvmodel.Remove([]uint64{82}, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e0", "GPU", 1, 1)
	// A medium left unset is GPU; a group left unset is 0.
	ev := kvmodel.Store([]uint64{91}, -1, kvmodel.Tokens(14, 16), 16, "", 0)
	ev.Medium, ev.GroupIdx = kvevents.Opt[string]{}, kvevents.Opt[int64]{}
	apply(t, x, "e1", ev)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: kvmodel.Tokens(14, 16)}), "e1", "GPU", 1, 1)
	rm := kvmodel.Remove([]uint64{91}, "", 0)
	rm.Medium, rm.GroupIdx = kvevents.Opt[string]{}, kvevents.Opt[int64]{}
	apply(t, x, "e1", rm)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: kvmodel.Tokens(14, 16)}), "e1", "GPU", 0, 0)
	// Unusable groups and media are refused, counted.
	apply(t, x, "e1", kvmodel.Store([]uint64{92}, -1, kvmodel.Tokens(15, 16), 16, "GPU", 255+1),
		kvmodel.Store([]uint64{93}, -1, kvmodel.Tokens(15, 16), 16, string(make([]byte, 64+1)), 0))
	if st := x.Stats(); st.Refused != 2 {
		t.Fatalf("Refused %d, want 2", st.Refused)
	}
	// A hybrid align store (more tokens than hashes × block size) is not
	// chainable.
	hy := kvmodel.Store([]uint64{94}, -1, kvmodel.Tokens(16, 32), 16, "GPU", 0)
	apply(t, x, "e1", hy)
	if st := x.Stats(); st.Hybrid != 1 {
		t.Fatalf("Hybrid %d, want 1", st.Hybrid)
	}
	// Different media are scored apart.
	apply(t, x, "e2", kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "CPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e2", "CPU", 2, 2)
	expect(t, r, "e2", "GPU", 0, 0)
}

func testLoraAndExtraKeys(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(17, 32)
	ev := kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0)
	ev.LoraName = kvevents.Some("sql-lora")
	ev.HasExtraKeys, ev.ExtraKeys = true, kvindex.LoraExtraKeys("sql-lora", 2)
	apply(t, x, "e0", ev)
	base := kvmodel.Store([]uint64{3, 4}, -1, toks, 16, "GPU", 0)
	base.HasExtraKeys, base.ExtraKeys = true, [][]byte{{0xc0}, nil}
	apply(t, x, "e1", base)
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e1", "GPU", 2, 2)
	expect(t, r, "e0", "GPU", 0, 0)
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks, LoraName: "sql-lora", ExtraKeys: kvindex.LoraExtraKeys("sql-lora", 2)})
	expect(t, r, "e0", "GPU", 2, 2)
	expect(t, r, "e1", "GPU", 0, 0)
	// Another adapter, or the name without vLLM's extra keys, is another
	// prefix.
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks, LoraName: "other", ExtraKeys: kvindex.LoraExtraKeys("other", 2)})
	if len(r.Engines) != 0 {
		t.Fatalf("other adapter: %+v", r.Engines)
	}
	if r := score(t, x, kvindex.ScoreRequest{Tokens: toks, LoraName: "sql-lora"}); len(r.Engines) != 0 {
		t.Fatalf("LoRA name without extra keys: %+v", r.Engines)
	}
	// Extra keys (a cache salt on the first block) separate prefixes.
	salted := kvmodel.Store([]uint64{5, 6}, -1, toks, 16, "GPU", 0)
	salt := []byte{0x91, 0xa4, 's', 'a', 'l', 't'}
	salted.HasExtraKeys, salted.ExtraKeys = true, [][]byte{salt, {0xc0}}
	apply(t, x, "e2", salted)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks, ExtraKeys: [][]byte{salt}}), "e2", "GPU", 2, 2)
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e2", "GPU", 0, 0)
}

func testModels(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{ModelOf: func(e string) string { return "m-" + e[:1] }})
	toks := kvmodel.Tokens(18, 32)
	apply(t, x, "a0", kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0))
	apply(t, x, "b0", kvmodel.Store([]uint64{1, 2}, -1, toks, 16, "GPU", 0))
	apply(t, x, "b1", kvmodel.Store([]uint64{7}, -1, toks[:8], 8, "GPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Model: "m-a", Tokens: toks})
	if len(r.Engines) != 1 || r.Engines[0].Engine != "a0" || r.Engines[0].Blocks != 2 {
		t.Fatalf("m-a: %+v", r.Engines)
	}
	// Model m-b has engines of block sizes 16 and 8: both are scored.
	r = score(t, x, kvindex.ScoreRequest{Model: "m-b", Tokens: toks})
	if len(r.Engines) != 2 || r.PromptBlocks != 4 {
		t.Fatalf("m-b: %+v", r)
	}
	expect(t, r, "b0", "GPU", 2, 2)
	expect(t, r, "b1", "GPU", 1, 1)
	if r := score(t, x, kvindex.ScoreRequest{Model: "m-c", Tokens: toks}); len(r.Engines) != 0 {
		t.Fatalf("m-c: %+v", r.Engines)
	}
}

func testRemap(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	a, b := kvmodel.Tokens(19, 16), kvmodel.Tokens(20, 16)
	// The engine reuses hash 5 for other content (e.g. a restart we did
	// not see with a fixed seed): the hash now means the new block.
	apply(t, x, "e0", kvmodel.Store([]uint64{5}, -1, a, 16, "GPU", 0), kvmodel.Placeholder([]uint64{5}, "CPU", 0))
	apply(t, x, "e0", kvmodel.Store([]uint64{5}, -1, b, 16, "GPU", 0))
	if r := score(t, x, kvindex.ScoreRequest{Tokens: a}); len(r.Engines) != 0 {
		t.Fatalf("old content still indexed: %+v", r.Engines)
	}
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: b}), "e0", "GPU", 1, 1)
	if st := x.Stats(); st.Remapped != 1 || st.Backend.Entries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func testBatchResolution(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	toks := kvmodel.Tokens(21, 48)
	// Parent stored earlier in the same batch; a placeholder for a block of
	// the same batch; a removal and a re-store of a parent in one batch.
	apply(t, x, "e0",
		kvmodel.Store([]uint64{1}, -1, toks[:16], 16, "GPU", 0),
		kvmodel.Store([]uint64{2}, 1, toks[16:32], 16, "GPU", 0),
		kvmodel.Placeholder([]uint64{2}, "CPU", 0),
		kvmodel.Remove([]uint64{1}, "GPU", 0),
		kvmodel.Store([]uint64{3}, 2, toks[32:], 16, "GPU", 0))
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 0, 0)
	apply(t, x, "e0", kvmodel.Store([]uint64{1}, -1, toks[:16], 16, "GPU", 0))
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e0", "GPU", 3, 3)
	// A parent removed earlier in the batch still resolves (the mapping
	// as the batch began); after a clear in the batch it does not.
	apply(t, x, "e1", kvmodel.Store([]uint64{1, 2}, -1, toks[:32], 16, "GPU", 0))
	apply(t, x, "e1", kvmodel.Remove([]uint64{2}, "GPU", 0), kvmodel.Store([]uint64{3}, 2, toks[32:], 16, "GPU", 0))
	r = score(t, x, kvindex.ScoreRequest{Tokens: toks})
	expect(t, r, "e1", "GPU", 1, 1)
	apply(t, x, "e1", kvmodel.Store([]uint64{2}, 1, toks[16:32], 16, "GPU", 0))
	expect(t, score(t, x, kvindex.ScoreRequest{Tokens: toks}), "e1", "GPU", 3, 3)
	apply(t, x, "e1", kvmodel.Cleared(), kvmodel.Store([]uint64{3}, 2, toks[32:], 16, "GPU", 0))
	if st := x.Stats(); st.UnknownParents != 1 {
		t.Fatalf("UnknownParents %d, want 1", st.UnknownParents)
	}
}

func testCapacity(t *testing.T, nb Factory, o Options) {
	if o.CapacityBackend != nil {
		nb = o.CapacityBackend
	}
	x := newIndex(t, nb, 4, kvindex.Config{})
	for i := 0; i < 6; i++ {
		apply(t, x, fmt.Sprint("e", i%2), kvmodel.Store([]uint64{uint64(100 + i)}, -1, kvmodel.Tokens(30+i, 16), 16, "GPU", 0))
	}
	st := x.Stats()
	if st.Backend.Entries != 4 || st.Evicted != 2 || st.Backend.Evicted != 2 || st.Backend.Capacity != 4 {
		t.Fatalf("stats %+v", st)
	}
	if !o.SkipExactEviction {
		for i := 0; i < 6; i++ {
			r := score(t, x, kvindex.ScoreRequest{Tokens: kvmodel.Tokens(30+i, 16)})
			if got, want := len(r.Engines), 1; i < 2 && got != 0 || i >= 2 && got != want {
				t.Fatalf("prompt %d: %+v (the 2 oldest entries go first)", i, r.Engines)
			}
		}
	}
	// A refresh does not add an entry; an evicted mapping is forgotten.
	apply(t, x, "e0", kvmodel.Store([]uint64{104}, -1, kvmodel.Tokens(34, 16), 16, "GPU", 0))
	if st := x.Stats(); st.Backend.Entries != 4 || st.Backend.Mappings != 4 {
		t.Fatalf("stats %+v", st)
	}
	apply(t, x, "e0", kvmodel.Store([]uint64{200}, 100, kvmodel.Tokens(40, 16), 16, "GPU", 0))
	if st := x.Stats(); st.UnknownParents != 1 && !o.SkipExactEviction {
		t.Fatalf("stats %+v", st)
	}
}

// testConcurrent: batches applied while a Score runs. A Score may see each
// change of a batch under way or not (the in-memory backend's Score takes
// no lock), but never a state that was not true at some moment of it:
// blocks 1..4 are stored by every engine's first batch and never removed,
// so a Score begun after an engine's first batch returned finds its prefix
// at 4 blocks at least, and never over the 8 stored.
func testConcurrent(t *testing.T, nb Factory, _ Options) {
	x := newIndex(t, nb, 0, kvindex.Config{})
	const engines, rounds = 4, 50
	toks := kvmodel.Tokens(50, 16*8)
	var wg sync.WaitGroup
	var first [engines]atomic.Bool // engine e's first batch has returned
	errs := make(chan error, engines+1)
	for e := 0; e < engines; e++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("e", e)
			for r := 0; r < rounds; r++ {
				evs := []kvevents.Event{kvmodel.Store(seqHashes(1, 8), -1, toks, 16, "GPU", 0)}
				if r%3 == 1 {
					evs = append(evs, kvmodel.Remove(seqHashes(5, 4), "GPU", 0))
				}
				if err := x.ApplyEvents(name, evs); err != nil {
					errs <- err
					return
				}
				first[e].Store(true)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := 0; r < rounds*2; r++ {
			var before [engines]bool
			for e := range before {
				before[e] = first[e].Load()
			}
			res, err := x.Score(kvindex.ScoreRequest{Tokens: toks})
			if err != nil {
				errs <- err
				return
			}
			seen := map[string]bool{}
			for _, m := range res.Engines {
				seen[m.Engine] = true
				var e int
				fmt.Sscanf(m.Engine, "e%d", &e)
				if m.Blocks > 8 || m.MaybeBlocks > 8 || before[e] && m.Blocks < 4 {
					errs <- fmt.Errorf("torn state (first batch returned before the Score: %v): %+v", before[e], m)
					return
				}
			}
			for e, b := range before {
				if b && !seen[fmt.Sprint("e", e)] {
					errs <- fmt.Errorf("engine e%d missing after its first batch returned: %+v", e, res.Engines)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := score(t, x, kvindex.ScoreRequest{Tokens: toks})
	if len(r.Engines) != engines {
		t.Fatalf("matches %+v", r.Engines)
	}
}
