package kvindextest

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// The property test drives an index and the Model with random streams of
// one small world: a few engines caching blocks of a few documents that
// share prefixes, with LoRA variants, two media and two KV-cache groups.
// Each engine also has a ground truth (what it really holds, whatever
// was delivered). Events are batched, duplicated, lost (generated, applied
// to the truth, never delivered, then reported as a lost range), and
// engines restart (a reset, sometimes with a new hash seed) or join late,
// or restart while their subscriber is in back-off (the old process's last
// events never delivered, the new one's delivered after the reset).
//
// Two more variants: "index restarts" restarts the index itself — from
// its snapshot when the backend is the in-memory one, over the same
// backend otherwise — while the engines go on, each then resuming exact
// (its gap delivered), unproven (a lost range) or reset (it restarted
// too); "backend losses" loses the shared store's data (the backend's
// next call fails with kvindex.ErrBackendLost, the store comes back
// empty), and the index must ask for every source's resync
// (Config.OnBackendLost), whose resets the test delivers.
//
// After every step: the index equals the Model (or, with a small
// capacity, holds a subset of it), no engine's certain prefix is longer
// than what the engine really holds, and every engine named is one of the
// world's (zero certain phantoms, zero wrong engine names).

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

	// index restarts
	nb       Factory
	tt       *testing.T
	be       kvindex.Backend
	restarts bool
	snap     string // the snapshot file, when the backend is in-memory
	// backend losses
	lossy  *lossyBackend
	lostCh chan struct{}
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
	for _, variant := range []string{"capacity=0", "capacity=12", "index restarts", "backend losses"} {
		capacity := 0
		if variant == "capacity=12" {
			capacity = 12
		}
		t.Run(variant, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) {
				w := &world{t: rt, m: kvmodel.NewModel(0, nil), exact: capacity == 0, cap: capacity,
					seeds: map[string]uint64{}, truth: map[string]map[truthKey]bool{}, nb: nb, tt: t}
				cfg := kvindex.Config{Logger: quiet}
				w.be = nb(t, capacity)
				switch variant {
				case "index restarts":
					// A shared backend keeps no block sizes: an index
					// started over it scores in Config.BlockSize until it
					// sees a store.
					cfg.BlockSize = propBS
					w.restarts = true
					w.snap = filepath.Join(t.TempDir(), "index.snap")
					cfg.SnapshotFile = w.snap
					if x, err := kvindex.New(kvindex.Config{Backend: w.be, SnapshotFile: w.snap, Logger: quiet}); err == nil {
						x.Close()
					} else if strings.Contains(err.Error(), "in-memory") {
						w.snap, cfg.SnapshotFile = "", "" // a shared backend: restarts over it
					} else {
						t.Fatal(err)
					}
				case "backend losses":
					w.lossy = &lossyBackend{t: t, nb: nb, capacity: capacity, be: w.be}
					w.be = w.lossy
					w.lostCh = make(chan struct{}, 16)
					cfg.OnBackendLost = func() { w.lostCh <- struct{}{} }
				}
				cfg.Backend = w.be
				x, err := kvindex.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				w.x = x
				defer func() { w.x.Close() }()
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

// quiet drops the indexes' log lines (snapshot loads, backend losses:
// expected here).
var quiet = slog.New(slog.DiscardHandler)

// lossyBackend is a shared backend that loses its data on demand: the
// call after lose fails with a wrapped kvindex.ErrBackendLost and the
// store is replaced by an empty one, as a Redis backend reports a Redis
// restart without persistence.
type lossyBackend struct {
	t        *testing.T
	nb       Factory
	capacity int
	mu       sync.Mutex
	be       kvindex.Backend
	lost     atomic.Bool
}

func (l *lossyBackend) cur() (kvindex.Backend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost.Swap(false) {
		l.be = l.nb(l.t, l.capacity)
		return nil, fmt.Errorf("kvindextest: the store restarted empty: %w", kvindex.ErrBackendLost)
	}
	return l.be, nil
}

func (l *lossyBackend) Resolve(e string, h []uint64, k []kvindex.Key, f []bool) error {
	be, err := l.cur()
	if err != nil {
		return err
	}
	return be.Resolve(e, h, k, f)
}

func (l *lossyBackend) Apply(e string, ops []kvindex.Op) (kvindex.Counts, error) {
	be, err := l.cur()
	if err != nil {
		return kvindex.Counts{}, err
	}
	return be.Apply(e, ops)
}

func (l *lossyBackend) Holders(k []kvindex.Key, visit func(int, []kvindex.Holder) bool) error {
	be, err := l.cur()
	if err != nil {
		return err
	}
	return be.Holders(k, visit)
}

func (l *lossyBackend) locked() kvindex.Backend {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.be
}

func (l *lossyBackend) EngineName(id uint32) string { return l.locked().EngineName(id) }
func (l *lossyBackend) MediumName(id uint16) string { return l.locked().MediumName(id) }
func (l *lossyBackend) Stats() kvindex.BackendStats { return l.locked().Stats() }
func (l *lossyBackend) Close() error                { return nil }

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
	kind := rapid.IntRange(0, 12).Draw(t, "step")
	switch {
	case kind == 11 && w.restarts:
		w.restartIndex()
		return
	case kind == 12 && w.lossy != nil:
		w.loseBackend(e)
		return
	case kind == 10:
		// The publisher restarts while its subscriber is in back-off:
		// the old process's last events are never delivered, the new one
		// (empty, perhaps another seed) publishes before the subscriber
		// is back; the subscriber proves the run changed: a reset, then
		// the new run's batches.
		for i := rapid.IntRange(0, 2).Draw(t, "undelivered"); i > 0; i-- {
			w.event(e)
		}
		clear(w.truth[e])
		if rapid.Bool().Draw(t, "new seed") {
			w.seeds[e]++
		}
		evs := []kvevents.Event{w.event(e)}
		w.deliver(kvevents.Update{Kind: kvevents.UpdateReset, Source: e})
		w.lastEvs = evs
		w.deliver(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: &kvevents.Batch{Events: evs}})
		return
	}
	switch kind {
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

// restartIndex closes the index and starts a new one: from its snapshot
// (in-memory backend) or over the same shared backend. Meanwhile each
// engine goes on; when the new index is up, each one's feed resumes:
// proven (its next batch delivered: the index is exact again at once),
// unproven (events happened and were lost: a lost range) or the engine
// restarted too (a reset).
func (w *world) restartIndex() {
	t := w.t
	if err := w.x.Close(); err != nil {
		t.Fatal(err)
	}
	// While the index is down each engine goes on: what it does is in its
	// truth at once, delivered (or not) when the index is back.
	fates := map[string]int{}
	gap := map[string][]kvevents.Event{}
	for _, e := range propEngines {
		fates[e] = rapid.IntRange(0, 2).Draw(t, "resume")
		switch fates[e] {
		case 0, 1: // the gap: delivered (proven) or gone (unproven)
			gap[e] = []kvevents.Event{w.event(e)}
		default: // the engine restarted
			clear(w.truth[e])
		}
	}
	cfg := kvindex.Config{Backend: w.be, BlockSize: propBS, Logger: quiet}
	if w.snap != "" {
		cfg.Backend = w.nb(w.tt, w.cap)
		w.be = cfg.Backend
		cfg.SnapshotFile = w.snap
	}
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.x = x
	if w.snap != "" {
		if x.Stats().SnapshotRefused != 0 {
			t.Fatal("the index's own snapshot was refused")
		}
		// Loaded, not yet resumed: whatever the engines did meanwhile,
		// nothing the index reports as certain is gone. (Over a shared
		// backend the entries stay as they were through the writer's
		// downtime until the feed resumes; see the package
		// documentation.)
		w.checkTruth()
	}
	for _, e := range propEngines {
		switch fates[e] {
		case 0:
			w.lastEvs = gap[e]
			w.deliver(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: &kvevents.Batch{Events: gap[e]}})
		case 1:
			w.deliver(kvevents.Update{Kind: kvevents.UpdateLost, Source: e})
			w.deliver(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: &kvevents.Batch{}})
		default:
			w.deliver(kvevents.Update{Kind: kvevents.UpdateReset, Source: e})
		}
	}
	w.last = nil // no duplicate of these (lastEvs is not theirs)
}

// loseBackend loses the shared store's data: the next batch fails with
// ErrBackendLost, the index asks for a resync (OnBackendLost), and the
// test delivers what the subscriber's Resync leads to: every source's
// reset.
func (w *world) loseBackend(e string) {
	t := w.t
	w.lossy.lost.Store(true)
	evs := []kvevents.Event{w.event(e)}
	u := kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Batch: &kvevents.Batch{Events: evs}}
	err := w.x.Apply(u)
	if err == nil {
		// The batch needed no backend call (nothing to index): a Score
		// makes the next one.
		w.m.Apply(u)
		_, err = w.x.Score(kvindex.ScoreRequest{Tokens: propDoc(0)})
	}
	if !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("the call after the store's loss: %v, want ErrBackendLost", err)
	}
	select {
	case <-w.lostCh:
	case <-time.After(20 * time.Second):
		t.Fatal("Config.OnBackendLost not called within 20 s")
	}
	for _, e := range propEngines {
		w.deliver(kvevents.Update{Kind: kvevents.UpdateReset, Source: e})
	}
	w.last = nil
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

// checkTruth checks that no engine's certain prefix is longer than what
// it really holds, and that every engine named is one of the world's.
func (w *world) checkTruth() {
	for d := 0; d < propDocs; d++ {
		for _, lora := range propLoras {
			req := kvindex.ScoreRequest{Tokens: propDoc(d), LoraName: lora}
			if lora != "" {
				req.ExtraKeys = kvindex.LoraExtraKeys(lora, propBlocks)
			}
			got, err := w.x.Score(req)
			if err != nil {
				w.t.Fatal(err)
			}
			for _, g := range got.Engines {
				if !slices.Contains(propEngines, g.Engine) {
					w.t.Fatalf("doc %d lora %q: engine %q is none of the world's", d, lora, g.Engine)
				}
				for _, med := range append([]string{""}, propMedia...) {
					if p, tp := find(got, g.Engine, med), w.truthPrefix(g.Engine, d, lora, med); p.Blocks > tp {
						w.t.Fatalf("doc %d lora %q after a restart: %s certainly holds %d blocks on %q, really %d", d, lora, g.Engine, p.Blocks, med, tp)
					}
				}
			}
		}
	}
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
				if !slices.Contains(propEngines, g.Engine) {
					t.Fatalf("doc %d lora %q: engine %q is none of the world's", d, lora, g.Engine)
				}
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
