package kvindex_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
)

type refEntry struct {
	engine string
	hash   uint64
	medium string
	group  int
}

// TestMemoryAtScale drives the memory backend with 200,000 random
// operations over 8 engines and 30,000 hashes each (enough for its tables
// to grow, shrink and shift slots many times) and compares every mapping,
// every key's holders and every count with a plain map after each phase.
func TestMemoryAtScale(t *testing.T) {
	b := newMemory(t, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	ref := map[refEntry]kvindex.Key{}
	maps := map[string]map[uint64]kvindex.Key{}
	engines := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, e := range engines {
		maps[e] = map[uint64]kvindex.Key{}
	}
	media := []string{"GPU", "CPU"}
	keyOf := func(h uint64) kvindex.Key { return kvindex.Key(h*0x9e3779b97f4a7c15 + 1) } // same content for every engine
	dropHash := func(e string, h uint64) {
		for r := range ref {
			if r.engine == e && r.hash == h {
				delete(ref, r)
			}
		}
		delete(maps[e], h)
	}
	for phase := 0; phase < 8; phase++ {
		for i := 0; i < 25000; i++ {
			e := engines[rng.IntN(len(engines))]
			h := uint64(rng.IntN(30000))
			med, g := media[rng.IntN(2)], rng.IntN(2)
			var op kvindex.Op
			switch r := rng.IntN(100); {
			case r < 60 || phase < 2:
				op = kvindex.Op{Kind: kvindex.OpStore, Hash: h, Key: keyOf(h), Medium: med, Group: g}
				if phase == 5 && r%7 == 0 { // remaps
					op.Key++
				}
				if k, ok := maps[e][h]; ok && k != op.Key {
					dropHash(e, h)
				}
				ref[refEntry{e, h, med, g}] = op.Key
				maps[e][h] = op.Key
			case r < 99:
				op = kvindex.Op{Kind: kvindex.OpRemove, Hash: h, Medium: med, Group: g}
				delete(ref, refEntry{e, h, med, g})
				still := false
				for _, m2 := range media {
					for g2 := 0; g2 < 2; g2++ {
						_, ok := ref[refEntry{e, h, m2, g2}]
						still = still || ok
					}
				}
				if !still {
					delete(maps[e], h)
				}
			default:
				op = kvindex.Op{Kind: kvindex.OpClear}
				for r := range ref {
					if r.engine == e {
						delete(ref, r)
					}
				}
				maps[e] = map[uint64]kvindex.Key{}
			}
			if _, err := b.Apply(e, []kvindex.Op{op}); err != nil {
				t.Fatal(err)
			}
		}
		// Compare.
		st := b.Stats()
		nmaps := 0
		for _, m := range maps {
			nmaps += len(m)
		}
		blocks := map[kvindex.Key]int{}
		for _, k := range ref {
			blocks[k]++
		}
		if st.Entries != int64(len(ref)) || st.Mappings != int64(nmaps) || st.Blocks != int64(len(blocks)) {
			t.Fatalf("phase %d: backend %+v; reference %d entries, %d mappings, %d blocks", phase, st, len(ref), nmaps, len(blocks))
		}
		for _, e := range engines {
			hashes := make([]uint64, 30000)
			for i := range hashes {
				hashes[i] = uint64(i)
			}
			keys, found := make([]kvindex.Key, len(hashes)), make([]bool, len(hashes))
			if err := b.Resolve(e, hashes, keys, found); err != nil {
				t.Fatal(err)
			}
			for i, h := range hashes {
				k, ok := maps[e][h]
				if found[i] != ok || found[i] && keys[i] != k {
					t.Fatalf("phase %d engine %s hash %d: backend %v %#x, reference %v %#x", phase, e, h, found[i], keys[i], ok, k)
				}
			}
		}
		all := make([]kvindex.Key, 0, len(blocks))
		for k := range blocks {
			all = append(all, k)
		}
		err := b.Holders(all, func(i int, hs []kvindex.Holder) bool {
			if len(hs) != blocks[all[i]] {
				t.Fatalf("phase %d key %#x: %d holders, want %d", phase, all[i], len(hs), blocks[all[i]])
			}
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if b.Stats().Entries == 0 {
		t.Fatal("nothing left to compare")
	}
}

// TestMemoryEvictionAtScale fills a small memory backend far past its
// capacity and checks that exactly the newest entries stay.
func TestMemoryEvictionAtScale(t *testing.T) {
	const capacity = 5000
	b := newMemory(t, capacity)
	for i := 0; i < 40000; i++ {
		e := fmt.Sprint("e", i%3)
		if _, err := b.Apply(e, []kvindex.Op{{Kind: kvindex.OpStore, Hash: uint64(i), Key: kvindex.Key(i/2 + 1), Medium: "GPU"}}); err != nil {
			t.Fatal(err)
		}
	}
	st := b.Stats()
	if st.Entries != capacity || st.Evicted != 40000-capacity || st.Mappings != capacity {
		t.Fatalf("stats %+v", st)
	}
	for i := 0; i < 40000; i++ {
		e := fmt.Sprint("e", i%3)
		keys, found := make([]kvindex.Key, 1), make([]bool, 1)
		if err := b.Resolve(e, []uint64{uint64(i)}, keys, found); err != nil {
			t.Fatal(err)
		}
		if found[0] != (i >= 40000-capacity) {
			t.Fatalf("hash %d found %v", i, found[0])
		}
	}
}

// TestMemoryRefusals: unusable stores are refused and counted, never an
// error (they come from a peer's bytes); misuse is an error; a closed
// backend says so.
func TestMemoryRefusals(t *testing.T) {
	b := newMemory(t, 0)
	if c, err := b.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Medium: "", Key: 1}}); err != nil || c.Rejected != 1 {
		t.Fatalf("empty medium: %+v %v", c, err)
	}
	if c, err := b.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Medium: "GPU", Group: 256}}); err != nil || c.Rejected != 1 {
		t.Fatalf("group 256: %+v %v", c, err)
	}
	if _, err := b.Apply("e", []kvindex.Op{{Kind: 99}}); err == nil {
		t.Fatal("op kind 99 accepted")
	}
	for i := 0; i < kvindex.MaxMediums; i++ {
		if _, err := b.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Medium: fmt.Sprint("m", i), Key: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := b.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Medium: "one-too-many", Key: 1}}); err != nil || c.Rejected != 1 || c.Added != 0 {
		t.Fatalf("medium past MaxMediums: %+v %v", c, err)
	}
	if err := b.Resolve("e", []uint64{1}, nil, nil); err == nil {
		t.Fatal("short Resolve slices accepted")
	}
	if _, err := kvindex.NewMemory(-1); err == nil {
		t.Fatal("negative capacity accepted")
	}
	b.Close()
	if _, err := b.Apply("e", nil); err != kvindex.ErrClosed {
		t.Fatalf("Apply after Close: %v", err)
	}
}
