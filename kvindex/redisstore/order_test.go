package redisstore

import (
	"context"
	"fmt"
	"slices"
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

// TestMapLevels: one engine's map grows through the levels of buckets
// (mapSplit 1: level 1 from 2 mappings, 2 from 11, 3 from 101) while a second engine stays in
// one hash; Resolve, Holders, removals, an eviction of the bucketed
// engine's entries, a clear and the gauges give the in-memory backend's
// answers at each step, and the clear takes the engine back to one hash.
func TestMapLevels(t *testing.T) {
	red := newStore(t, Config{Capacity: 400, mapSplit: 1})
	mem, err := kvindex.NewMemory(400)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	const n = 300
	keyOf := func(h int) kvindex.Key { return kvindex.Key(uint64(h)*0x9e3779b97f4a7c15 + 7) }
	hashOf := func(h int) uint64 { return uint64(h)*1000003 + 5 }
	both := func(engine string, ops []kvindex.Op) {
		t.Helper()
		cm, errM := mem.Apply(engine, ops)
		cr, errR := red.Apply(engine, ops)
		if errM != nil || errR != nil || cm != cr {
			t.Fatalf("%s: memory %+v %v, redis %+v %v", engine, cm, errM, cr, errR)
		}
	}
	check := func(step string) {
		t.Helper()
		for _, e := range []string{"big", "small"} {
			hashes := make([]uint64, n+10)
			for i := range hashes {
				hashes[i] = hashOf(i)
			}
			km, fm := make([]kvindex.Key, len(hashes)), make([]bool, len(hashes))
			kr, fr := make([]kvindex.Key, len(hashes)), make([]bool, len(hashes))
			if err := mem.Resolve(e, hashes, km, fm); err != nil {
				t.Fatal(err)
			}
			if err := red.Resolve(e, hashes, kr, fr); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(km, kr) || !slices.Equal(fm, fr) {
				t.Fatalf("%s: Resolve %s differs", step, e)
			}
		}
		keys := make([]kvindex.Key, n+10)
		for i := range keys {
			keys[i] = keyOf(i)
		}
		names := func(b kvindex.Backend) []string {
			var out []string
			if err := b.Holders(keys, func(i int, hs []kvindex.Holder) bool {
				for _, h := range hs {
					out = append(out, fmt.Sprint(i, b.EngineName(h.Engine), h.Trusted))
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(out)
			return out
		}
		if hm, hr := names(mem), names(red); !slices.Equal(hm, hr) {
			t.Fatalf("%s: holders differ: memory %d, redis %d", step, len(hm), len(hr))
		}
		sm, sr := mem.Stats(), red.Stats()
		sm.Bytes, sr.Bytes = 0, 0
		if sm != sr {
			t.Fatalf("%s: stats memory %+v, redis %+v", step, sm, sr)
		}
	}
	level := func(e string) string {
		t.Helper()
		ctx := context.Background()
		id, _ := red.client.Do(ctx, red.client.B().Hget().Key(red.prefix+"eid").Field(e).Build()).ToString()
		l, err := red.client.Do(ctx, red.client.B().Hget().Key(red.prefix+"ml").Field(id).Build()).ToString()
		if err != nil {
			return "0"
		}
		return l
	}
	stores := func(from, to int) []kvindex.Op {
		var ops []kvindex.Op
		for h := from; h < to; h++ {
			ops = append(ops, kvindex.Op{Kind: kvindex.OpStore, Hash: hashOf(h), Key: keyOf(h), Medium: "GPU"})
		}
		return ops
	}
	both("small", stores(0, 1))
	both("big", stores(0, 1))
	if l := level("big"); l != "0" {
		t.Fatalf("one mapping: level %s", l)
	}
	both("big", stores(1, 50))
	check("50 mappings")
	if l := level("big"); l != "2" {
		t.Fatalf("50 mappings at 1 per bucket: level %s, want 2", l)
	}
	both("big", stores(50, n))
	check("300 mappings")
	if l, ls := level("big"), level("small"); l != "3" || ls != "0" {
		t.Fatalf("300 mappings: level %s, want 3 (the last); the small engine's %s, want 0", l, ls)
	}
	var rm []kvindex.Op
	for h := 0; h < n; h += 3 {
		rm = append(rm, kvindex.Op{Kind: kvindex.OpRemove, Hash: hashOf(h), Medium: "GPU"})
	}
	both("big", rm)
	both("big", append(stores(0, 3), kvindex.Op{Kind: kvindex.OpLost}))
	both("small", stores(1, 250)) // past the capacity: the big engine's oldest go
	check("removals, a loss, evictions")
	both("big", []kvindex.Op{{Kind: kvindex.OpClear}})
	check("clear")
	if l := level("big"); l != "0" {
		t.Fatalf("after a clear: level %s, want 0", l)
	}
	both("big", stores(0, 5))
	check("stored again")
}
