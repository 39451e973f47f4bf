package redisstore

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

// holderSet renders who holds each key, by names, sorted: the backends'
// numbers differ, their answers must not.
func holderSet(t *rapid.T, b kvindex.Backend, keys []kvindex.Key) []string {
	var out []string
	err := b.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		var row []string
		for _, h := range hs {
			row = append(row, fmt.Sprintf("%s/%s/%v", b.EngineName(h.Engine), b.MediumName(h.Medium), h.Trusted))
		}
		slices.Sort(row)
		out = append(out, fmt.Sprintf("%d:%v", i, row))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDifferentialMemory drives the Redis store and the in-memory backend
// with the same random batches (stores, duplicates, remaps, removals,
// clears, losses, refused mediums, a small capacity that evicts, engine
// maps moving to more buckets) and requires the same Counts, Resolve answers, holders and gauges after each.
func TestDifferentialMemory(t *testing.T) {
	rs := newStore(t, Config{Capacity: 1})
	srvURL := rs.cfg.URL
	rs.Close()
	differential(t, srvURL, 1)
}

// TestDifferentialSharded runs the differential test with the index split
// into 3 shards on one server and 4 on the 3-node cluster: the merged
// holders, Resolve answers, Counts and gauges equal the in-memory
// backend's. The capacity never evicts (eviction is per shard, by first
// store within the shard); Blocks, which counts a block once per shard
// holding it, is not compared.
func TestDifferentialSharded(t *testing.T) {
	t.Run("server", func(t *testing.T) { differential(t, redistest.Require(t).URL(), 3) })
	t.Run("cluster", func(t *testing.T) { differential(t, redistest.RequireCluster(t).URL(), 4) })
}

// differential drives a store on url (with shards shards) and the
// in-memory backend with the same random batches.
func differential(tt *testing.T, url string, shards int) {
	rapid.Check(tt, func(t *rapid.T) {
		capacity := rapid.IntRange(3, 40).Draw(t, "capacity")
		if shards > 1 {
			capacity = 600 * shards // 576 entries at most: no eviction
		}
		mem, err := kvindex.NewMemory(capacity)
		if err != nil {
			t.Fatal(err)
		}
		defer mem.Close()
		// An engine's map moves to more buckets past mapSplit mappings per
		// bucket: 1 and 2 make the moves happen within a few steps.
		split := rapid.SampledFrom([]int{0, 1, 2}).Draw(t, "mapSplit")
		red, err := New(Config{URL: url, Prefix: "{" + NewWriterID() + "}", Capacity: capacity, Shards: shards, mapSplit: split})
		if err != nil {
			t.Fatal(err)
		}
		defer red.Close()
		engines := []string{"e0", "e1", "e2"}
		mediums := []string{"GPU", "CPU", "disk", ""}
		keyOf := func(h uint64) kvindex.Key { return kvindex.Key(h*0x9e3779b97f4a7c15 + 1) }
		allKeys := make([]kvindex.Key, 0, 12)
		for h := uint64(0); h < 12; h++ {
			allKeys = append(allKeys, keyOf(h), keyOf(h)+1)
		}
		// A prompt's keys for PrefixHolders: engines hold runs of them.
		prefixKeys := make([]kvindex.Key, 0, 12)
		for h := uint64(0); h < 12; h++ {
			prefixKeys = append(prefixKeys, keyOf(h))
		}
		steps := rapid.IntRange(1, 25).Draw(t, "steps")
		for s := 0; s < steps; s++ {
			eng := rapid.SampledFrom(engines).Draw(t, "engine")
			n := rapid.IntRange(0, 8).Draw(t, "ops")
			ops := make([]kvindex.Op, n)
			for i := range ops {
				h := rapid.Uint64Range(0, 11).Draw(t, "hash")
				k := keyOf(h)
				if rapid.IntRange(0, 9).Draw(t, "remap") == 0 {
					k++
				}
				ops[i] = kvindex.Op{Kind: kvindex.OpKind(rapid.SampledFrom([]int{1, 1, 1, 1, 2, 2, 3, 4}).Draw(t, "kind")),
					Hash: h ^ 0xfedcba9876543210, Key: k,
					Medium: rapid.SampledFrom(mediums).Draw(t, "medium"), Group: rapid.IntRange(0, 1).Draw(t, "group")}
			}
			cm, errM := mem.Apply(eng, ops)
			cr, errR := red.Apply(eng, ops)
			if (errM == nil) != (errR == nil) || cm != cr {
				t.Fatalf("step %d %s %v:\nmemory %+v %v\nredis  %+v %v", s, eng, ops, cm, errM, cr, errR)
			}
			for _, e := range engines {
				hashes := make([]uint64, 12)
				for i := range hashes {
					hashes[i] = uint64(i) ^ 0xfedcba9876543210
				}
				km, fm := make([]kvindex.Key, 12), make([]bool, 12)
				kr, fr := make([]kvindex.Key, 12), make([]bool, 12)
				if err := mem.Resolve(e, hashes, km, fm); err != nil {
					t.Fatal(err)
				}
				if err := red.Resolve(e, hashes, kr, fr); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(km, kr) || !slices.Equal(fm, fr) {
					t.Fatalf("step %d Resolve %s:\nmemory %v %v\nredis  %v %v", s, e, km, fm, kr, fr)
				}
			}
			hm, hr := holderSet(t, mem, allKeys), holderSet(t, red, allKeys)
			if !slices.Equal(hm, hr) {
				t.Fatalf("step %d holders:\nmemory %v\nredis  %v", s, hm, hr)
			}
			if pw, ok := red.(kvindex.PrefixWalker); ok {
				checkPrefixWalk(t, s, mem, pw, red, prefixKeys)
			}
			sm, sr := mem.Stats(), red.Stats()
			sm.Bytes, sr.Bytes = 0, 0
			if shards > 1 {
				sm.Blocks, sr.Blocks = 0, 0
			}
			if sm != sr {
				t.Fatalf("step %d stats:\nmemory %+v\nredis  %+v", s, sm, sr)
			}
		}
	})
}

// checkPrefixWalk checks a PrefixWalker's walk of keys against the
// memory backend's holders: at each key it reports every holder whose
// engine holds all the keys before it and no holder the memory backend
// does not report; it visits the keys in order and stops early only after
// a key it reports no holder for.
func checkPrefixWalk(t *rapid.T, step int, mem kvindex.Backend, pw kvindex.PrefixWalker, red kvindex.Backend, keys []kvindex.Key) {
	type holder struct{ engine, row string }
	var all [][]holder
	if err := mem.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		var row []holder
		for _, h := range hs {
			row = append(row, holder{mem.EngineName(h.Engine), fmt.Sprintf("%s/%s/%v", mem.EngineName(h.Engine), mem.MediumName(h.Medium), h.Trusted)})
		}
		all = append(all, row)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	if err := pw.PrefixHolders(keys, func(i int, hs []kvindex.Holder) bool {
		if i != len(got) {
			t.Fatalf("step %d: PrefixHolders visited key %d after %d keys", step, i, len(got))
		}
		var row []string
		for _, h := range hs {
			row = append(row, fmt.Sprintf("%s/%s/%v", red.EngineName(h.Engine), red.MediumName(h.Medium), h.Trusted))
		}
		got = append(got, row)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) < len(keys) && (len(got) == 0 || len(got[len(got)-1]) != 0) {
		t.Fatalf("step %d: PrefixHolders stopped after %d of %d keys, the last with holders %v", step, len(got), len(keys), got)
	}
	run := map[string]int{} // engine -> keys held in a row from keys[0]
	for i, row := range all {
		if i >= len(got) {
			break
		}
		left := map[string]int{}
		for _, r := range got[i] {
			left[r]++
		}
		for _, h := range row {
			if run[h.engine] >= i {
				run[h.engine] = i + 1
				if left[h.row] == 0 {
					t.Fatalf("step %d key %d: PrefixHolders left out %s (its engine holds the keys before); got %v, all %v", step, i, h.row, got[i], row)
				}
			}
			if left[h.row] > 0 {
				left[h.row]--
			}
		}
		for r, n := range left {
			if n > 0 {
				t.Fatalf("step %d key %d: PrefixHolders reported %s, which the memory backend does not (%v)", step, i, r, row)
			}
		}
	}
}
