package kvindex_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// TestCountersApart: a BlockInactive (vLLM PR #50732) is counted in
// Stats.Inactive, not refused, and leaves the entries as they were; an
// SGLang bigram store (token pairs) is counted in Stats.Bigrams and a vLLM
// hybrid store (more tokens than hashes × block size) in Stats.Hybrid,
// each in its own counter only, under snake_case JSON keys.
func TestCountersApart(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	apply := func(evs ...kvevents.Event) kvindex.Stats {
		t.Helper()
		if err := x.ApplyEvents("e", evs); err != nil {
			t.Fatal(err)
		}
		return x.Stats()
	}
	h := kvevents.IntHash
	apply(kvevents.Event{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{h(1), h(2)}, TokenIDs: []int64{1, 2, 3, 4}, BlockSize: 2})
	wantPrefix(t, x, "", "e", []int64{1, 2, 3, 4}, 2, 2)

	st := apply(kvevents.Event{Type: "BlockInactive", BlockHashes: []kvevents.Hash{h(1), h(2)}, Medium: kvevents.Some("GPU")})
	if st.Inactive != 1 || st.Refused != 0 {
		t.Fatalf("BlockInactive: inactive %d, refused %d; want 1, 0", st.Inactive, st.Refused)
	}
	wantPrefix(t, x, "", "e", []int64{1, 2, 3, 4}, 2, 2)

	st = apply(kvevents.Event{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{h(10)}, TokenIDs: []int64{7, 8, 8, 9},
		TokenPairs: true, BlockSize: 2},
		kvevents.Event{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{h(11)}, ParentBlockHash: kvevents.Some(h(10)),
			TokenIDs: []int64{9, 10, 10, 11}, TokenPairs: true, BlockSize: 2})
	if st.Bigrams != 2 || st.Hybrid != 0 || st.UnknownParents != 0 || st.Refused != 0 {
		t.Fatalf("bigram stores: bigrams %d, hybrid %d, unknown parents %d, refused %d; want 2, 0, 0, 0",
			st.Bigrams, st.Hybrid, st.UnknownParents, st.Refused)
	}
	st = apply(kvevents.Event{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{h(20)}, TokenIDs: []int64{5, 6, 7, 8}, BlockSize: 2})
	if st.Hybrid != 1 || st.Bigrams != 2 || st.Inactive != 1 {
		t.Fatalf("hybrid store: hybrid %d, bigrams %d, inactive %d; want 1, 2, 1", st.Hybrid, st.Bigrams, st.Inactive)
	}
	j, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"bigrams":2`, `"inactive":1`, `"hybrid":1`} {
		if !strings.Contains(string(j), key) {
			t.Fatalf("JSON lacks %s: %s", key, j)
		}
	}
}
