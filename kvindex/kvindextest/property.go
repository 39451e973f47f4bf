package kvindextest

import (
	"fmt"
	"hash/fnv"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/internal/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// The property test drives an index and the Model with random streams of
// one small world: a few engines caching blocks of a few documents that
// share prefixes, with LoRA variants, two media and two KV-cache groups.
// Each engine also has a ground truth (what it really holds, whatever
// was delivered). Events are batched, duplicated, lost (generated, applied
// to the truth, never delivered, then reported as a lost range), and
// engines restart (a reset, sometimes with a new hash seed) or join late.
//
// After every step: the index equals the Model (or, with a small
// capacity, holds a subset of it), and no engine's certain prefix is
// longer than what the engine really holds.

const (
	propBS     = 4
	propBlocks = 6
	propDocs   = 4
)

var propEngines = []string{"e0", "e1", "e2"}
var propMedia = []string{"GPU", "CPU"}
var propLoras = []string{"", "L1"}

// propDoc returns document d's tokens: doc 1 shares its first 2 blocks
// with doc 0, doc 2 its first block, doc 3 nothing.
func propDoc(d int) []int64 {
	shared := map[int]int{1: 2, 2: 1}[d]
	out := make([]int64, propBS*propBlocks)
	for i := range out {
		src := d
		if i < shared*propBS {
			src = 0
		}
		out[i] = int64(src*1000 + i + 1)
	}
	return out
}

type content string

type truthKey struct {
	c      content
	medium string
	group  int
}

type world struct {
	t       *rapid.T
	x       *kvindex.Index
	m       *kvmodel.Model
	exact   bool
	cap     int
	seeds   map[string]uint64
	truth   map[string]map[truthKey]bool
	last    *kvevents.Update
	lastEvs []kvevents.Event
	fresh   uint64
}

func contentOf(d, i int, lora string) content {
	return content(fmt.Sprint(lora, "|", propDoc(d)[:(i+1)*propBS]))
}

func (w *world) hash(engine string, c content) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, w.seeds[engine], "/", c)
	return h.Sum64()
}

func testProperty(t *testing.T, nb Factory, o Options) {
	steps := o.PropertySteps
	if steps == 0 {
		steps = 60
	}
	if steps < 0 {
		t.Fatalf("kvindextest: Options.PropertySteps %d is negative", steps)
	}
	for _, capacity := range []int{0, 12} {
		t.Run(fmt.Sprint("capacity=", capacity), func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				x := newIndex(t, nb, capacity, kvindex.Config{})
				defer x.Close()
				w := &world{t: rt, x: x, m: kvmodel.NewModel(0, nil), exact: capacity == 0, cap: capacity,
					seeds: map[string]uint64{}, truth: map[string]map[truthKey]bool{}}
				for _, e := range propEngines {
					w.truth[e] = map[truthKey]bool{}
				}
				n := rapid.IntRange(1, steps).Draw(rt, "steps")
				for i := 0; i < n; i++ {
					w.step()
					w.check()
				}
			})
		})
	}
}

// event draws one event for engine e, applies it to the truth and returns
// it.
func (w *world) event(e string) kvevents.Event {
	t := w.t
	kind := rapid.IntRange(0, 9).Draw(t, "kind")
	group := rapid.IntRange(0, 1).Draw(t, "group")
	switch {
	case kind <= 3: // store a run of a document's blocks
		d := rapid.IntRange(0, propDocs-1).Draw(t, "doc")
		a := rapid.IntRange(0, propBlocks-1).Draw(t, "from")
		b := rapid.IntRange(a+1, propBlocks).Draw(t, "to")
		lora := rapid.SampledFrom(propLoras).Draw(t, "lora")
		med := "GPU"
		if rapid.IntRange(0, 4).Draw(t, "cpu") == 0 {
			med = "CPU"
		}
		var hashes []uint64
		for i := a; i < b; i++ {
			c := contentOf(d, i, lora)
			hashes = append(hashes, w.hash(e, c))
			w.truth[e][truthKey{c, med, group}] = true
		}
		parent := int64(-1)
		ev := kvmodel.Store(hashes, parent, propDoc(d)[a*propBS:b*propBS], propBS, med, group)
		if group == 1 && rapid.IntRange(0, 3).Draw(t, "swa") == 0 {
			// A sliding-window group's store: left out of the index.
			ev.KVCacheSpecKind = kvevents.Some("sliding_window")
		}
		if a > 0 {
			ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(w.hash(e, contentOf(d, a-1, lora))), Valid: true}
		}
		if lora != "" {
			ev.LoraName = kvevents.Some(lora)
			ev.HasExtraKeys, ev.ExtraKeys = true, kvindex.LoraExtraKeys(lora, b-a)
		}
		return ev
	case kind <= 5: // offload a block to CPU (a placeholder)
		d := rapid.IntRange(0, propDocs-1).Draw(t, "doc")
		i := rapid.IntRange(0, propBlocks-1).Draw(t, "block")
		lora := rapid.SampledFrom(propLoras).Draw(t, "lora")
		c := contentOf(d, i, lora)
		w.truth[e][truthKey{c, "CPU", group}] = true
		return kvmodel.Placeholder([]uint64{w.hash(e, c)}, "CPU", group)
	case kind <= 7: // remove a few blocks
		d := rapid.IntRange(0, propDocs-1).Draw(t, "doc")
		a := rapid.IntRange(0, propBlocks-1).Draw(t, "from")
		b := rapid.IntRange(a+1, min(a+3, propBlocks)).Draw(t, "to")
		lora := rapid.SampledFrom(propLoras).Draw(t, "lora")
		med := rapid.SampledFrom(propMedia).Draw(t, "medium")
		var hashes []uint64
		for i := a; i < b; i++ {
			c := contentOf(d, i, lora)
			hashes = append(hashes, w.hash(e, c))
			delete(w.truth[e], truthKey{c, med, group})
		}
		return kvmodel.Remove(hashes, med, group)
	case kind == 8: // a hybrid align store under fresh hashes
		w.fresh++
		return kvmodel.Store([]uint64{1<<63 | w.fresh}, -1, propDoc(3)[:2*propBS], propBS, "GPU", group)
	default:
		clear(w.truth[e])
		return kvmodel.Cleared()
	}
}

func (w *world) deliver(u kvevents.Update) {
	if err := w.x.Apply(u); err != nil {
		w.t.Fatal(err)
	}
	w.m.Apply(u)
	w.last = &u
}

func (w *world) step() {
	t := w.t
	e := rapid.SampledFrom(propEngines).Draw(t, "engine")
	switch rapid.IntRange(0, 9).Draw(t, "step") {
	case 0: // publisher restart, sometimes with a new hash seed
		clear(w.truth[e])
		if rapid.Bool().Draw(t, "new seed") {
			w.seeds[e]++
		}
		w.deliver(kvevents.Update{Kind: kvevents.UpdateReset, Source: e})
	case 1: // a lost range: events happen, are never delivered
		n := rapid.IntRange(1, 3).Draw(t, "lost")
		for i := 0; i < n; i++ {
			w.event(e)
		}
		w.deliver(kvevents.Update{Kind: kvevents.UpdateLost, Source: e})
	case 2: // the last batch again (a duplicate delivery)
		if w.last != nil && w.last.Kind == kvevents.UpdateBatch {
			w.deliver(kvevents.Update{Kind: kvevents.UpdateBatch, Source: w.last.Source,
				Batch: &kvevents.Batch{Events: slices.Clone(w.lastEvs)}})
		}
	default:
		n := rapid.IntRange(1, 4).Draw(t, "batch")
		evs := make([]kvevents.Event, n)
		for i := range evs {
			evs[i] = w.event(e)
		}
		w.lastEvs = evs
		w.deliver(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: &kvevents.Batch{Events: evs}})
	}
}

// truthPrefix is how many leading blocks of the prompt engine e really
// holds on medium ("": on any medium).
func (w *world) truthPrefix(e string, d int, lora, med string) int {
	n := 0
	for i := 0; i < propBlocks; i++ {
		c := contentOf(d, i, lora)
		held := false
		for k := range w.truth[e] {
			held = held || k.c == c && (med == "" || k.medium == med)
		}
		if !held {
			break
		}
		n++
	}
	return n
}

func (w *world) check() {
	t := w.t
	st := w.x.Stats()
	if w.exact && st.Backend.Entries != int64(w.m.Entries()) {
		t.Fatalf("index holds %d entries, model %d", st.Backend.Entries, w.m.Entries())
	}
	if !w.exact && st.Backend.Entries > int64(w.cap) {
		t.Fatalf("index holds %d entries, capacity %d", st.Backend.Entries, w.cap)
	}
	for d := 0; d < propDocs; d++ {
		for _, lora := range propLoras {
			toks := append(propDoc(d), 9, 9) // and a partial block
			req := kvindex.ScoreRequest{Tokens: toks, LoraName: lora}
			if lora != "" {
				req.ExtraKeys = kvindex.LoraExtraKeys(lora, propBlocks)
			}
			got, err := w.x.Score(req)
			if err != nil {
				t.Fatal(err)
			}
			want := w.m.Score(req, kvmodel.BlockSize)
			if w.exact {
				if !reflect.DeepEqual(got.Engines, want.Engines) {
					t.Fatalf("doc %d lora %q:\nindex %+v\nmodel %+v", d, lora, got.Engines, want.Engines)
				}
			}
			for _, g := range got.Engines {
				for _, med := range append([]string{""}, propMedia...) {
					p, mw := find(got, g.Engine, med), find(want, g.Engine, med)
					if p.Blocks > mw.Blocks || p.MaybeBlocks > mw.MaybeBlocks {
						t.Fatalf("doc %d lora %q: index %s/%s %+v beyond model %+v", d, lora, g.Engine, med, p, mw)
					}
					if tp := w.truthPrefix(g.Engine, d, lora, med); p.Blocks > tp {
						t.Fatalf("doc %d lora %q: %s certainly holds %d blocks on %q, really %d", d, lora, g.Engine, p.Blocks, med, tp)
					}
				}
			}
		}
	}
}
