package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
)

// heldKeys returns the keys among 1..n that engine "e" holds.
func heldKeys(t *testing.T, s *store, n int) []int {
	t.Helper()
	keys := make([]kvindex.Key, n)
	for i := range keys {
		keys[i] = kvindex.Key(i + 1)
	}
	var held []int
	if err := s.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		if len(hs) > 0 {
			held = append(held, i+1)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return held
}

func storeRange(t *testing.T, s *store, from, to int) {
	t.Helper()
	for lo := from; lo <= to; lo += 10 {
		var ops []kvindex.Op
		for k := lo; k < lo+10 && k <= to; k++ {
			ops = append(ops, kvindex.Op{Kind: kvindex.OpStore, Hash: uint64(k), Key: kvindex.Key(k), Medium: "GPU"})
		}
		if _, err := s.Apply("e", ops); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEvictionOrderAcrossBuckets: the store order lives in buckets of 64
// stores; eviction takes the oldest entries first across buckets, past
// buckets that removals emptied, and an entry left alone in an old bucket
// goes before every newer one.
func TestEvictionOrderAcrossBuckets(t *testing.T) {
	s := newStore(t, Config{Capacity: 100})
	storeRange(t, s, 1, 300) // buckets 0..4; 200 evicted, oldest first
	held := heldKeys(t, s, 400)
	if len(held) != 100 || held[0] != 201 || held[99] != 300 {
		t.Fatalf("after 300 stores at capacity 100: held %v; want 201..300", held)
	}
	var ops []kvindex.Op
	for k := 201; k <= 263; k++ {
		if k != 230 {
			ops = append(ops, kvindex.Op{Kind: kvindex.OpRemove, Hash: uint64(k), Medium: "GPU"})
		}
	}
	if _, err := s.Apply("e", ops); err != nil {
		t.Fatal(err)
	}
	// Live: 230 and 264..300 (38 entries); 100 more stores evict those 38.
	storeRange(t, s, 301, 400)
	held = heldKeys(t, s, 400)
	if len(held) != 100 || held[0] != 301 || held[99] != 400 {
		t.Fatalf("after removals and 100 more stores: held %v; want 301..400", held)
	}
	if st := s.Stats(); st.Entries != 100 || st.Evicted != 238 || st.Mappings != 100 || st.Blocks != 100 {
		t.Fatalf("stats %+v; want 100 entries, blocks and mappings, 238 evicted", st)
	}
	// A refresh keeps an entry's place: 301 stored again is still the oldest.
	storeRange(t, s, 301, 301)
	storeRange(t, s, 401, 401)
	if held = heldKeys(t, s, 401); held[0] != 302 || held[len(held)-1] != 401 {
		t.Fatalf("a refreshed entry moved in the store order: held %v; want 302..401", held)
	}
}

// TestOlderLayoutRefused: an index written by an older zmqguard (a
// sorted-set "fifo" key under the prefix) is refused when the store
// starts, naming the layout, rather than mixed with the bucketed one.
func TestOlderLayoutRefused(t *testing.T) {
	s := newStore(t, Config{})
	ctx := context.Background()
	if err := s.client.Do(ctx, s.client.B().Zadd().Key(s.prefix+"fifo").ScoreMember().ScoreMember(1, "1:1:1:1:0").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.client.Do(ctx, s.client.B().Del().Key(s.prefix+"gen").Build())
	_, err := open(Config{URL: s.cfg.URL, Prefix: s.prefix})
	if err == nil || !strings.Contains(err.Error(), "older zmqguard") {
		t.Fatalf("open over the older layout: %v; want a refusal naming it", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(s.prefix)) {
		t.Fatalf("the refusal %q does not name the prefix %q", err, s.prefix)
	}
}
