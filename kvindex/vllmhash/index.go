package vllmhash

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// IndexConfig configures [NewIndex].
type IndexConfig struct {
	// Hasher is the engines' hash function and NONE_HASH (required).
	Hasher *Hasher
	// BlockSize is the engines' block size (required): Score hashes the
	// prompt in blocks of it.
	BlockSize int
	// Backend stores the index (nil: kvindex.NewMemory with Capacity).
	// Every backend kvindex accepts works here, with the same rules.
	Backend kvindex.Backend
	// Capacity is the entry capacity of the default memory backend.
	Capacity int
}

// IndexStats are an Index's counters.
type IndexStats struct {
	// Batches and Events count what was applied; NotIndexed counts events
	// left out (a partial KV-cache group, an unusable group, a placeholder
	// whose hash no store named); Resets and Losses count engine clears and
	// lost ranges.
	Batches, Events, NotIndexed, Resets, Losses uint64
	// Counts sums what the backend did.
	kvindex.Counts
	// Scores counts Score calls; Errors backend failures.
	Scores, Errors uint64
}

// Index is a KV-cache index in vLLM-key mode: a block's key is the hash
// the engine publishes for it (its KV-event int form), and Score hashes the
// prompt with vLLM's own function (the Hasher) to find them. Nothing is
// recomputed from token ids on the event side, so it needs neither the
// tokens nor the parent hash of a store (and hybrid stores, whose hashes
// do not pair with their tokens by position, are indexed as published);
// but every engine must run with the Hasher's hash function,
// PYTHONHASHSEED and block size, or nothing matches. The trust rules are
// kvindex's: a publisher reset or AllBlocksCleared clears the engine, a
// lost range makes its entries uncertain until stored again.
type Index struct {
	cfg    IndexConfig
	be     kvindex.Backend
	own    bool
	mu     sync.Mutex
	locks  map[string]*sync.Mutex
	closed atomic.Bool

	batches, events, notIndexed, resets, losses, scores, errs atomic.Uint64
	cmu                                                       sync.Mutex
	counts                                                    kvindex.Counts
}

// NewIndex returns a vLLM-key mode Index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	if cfg.Hasher == nil {
		return nil, errors.New("vllmhash: IndexConfig.Hasher is required")
	}
	if cfg.BlockSize <= 0 || cfg.BlockSize > kvindex.MaxBlockSize {
		return nil, fmt.Errorf("vllmhash: IndexConfig.BlockSize %d out of range 1..%d", cfg.BlockSize, kvindex.MaxBlockSize)
	}
	x := &Index{cfg: cfg, be: cfg.Backend, locks: map[string]*sync.Mutex{}}
	if x.be == nil {
		be, err := kvindex.NewMemory(kvindex.MemoryConfig{Capacity: cfg.Capacity})
		if err != nil {
			return nil, err
		}
		x.be, x.own = be, true
	}
	return x, nil
}

// engineLock serialises one engine's backend calls (the Backend contract).
func (x *Index) engineLock(engine string) *sync.Mutex {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.locks[engine]
	if l == nil {
		l = &sync.Mutex{}
		x.locks[engine] = l
	}
	return l
}

func (x *Index) apply(engine string, ops []kvindex.Op) error {
	if len(ops) == 0 {
		return nil
	}
	c, err := x.be.Apply(engine, ops)
	x.cmu.Lock()
	x.counts.Added += c.Added
	x.counts.Refreshed += c.Refreshed
	x.counts.Removed += c.Removed
	x.counts.UnknownRemovals += c.UnknownRemovals
	x.counts.Cleared += c.Cleared
	x.counts.Remapped += c.Remapped
	x.counts.Evicted += c.Evicted
	x.counts.Rejected += c.Rejected
	x.cmu.Unlock()
	if err != nil {
		x.errs.Add(1)
	}
	return err
}

// Apply applies one update of a kvevents.Subscriber.
func (x *Index) Apply(u kvevents.Update) error {
	switch u.Kind {
	case kvevents.UpdateBatch:
		if u.Batch == nil {
			return nil
		}
		return x.ApplyEvents(u.Source, u.Batch.Events)
	case kvevents.UpdateReset:
		x.resets.Add(1)
		return x.do(u.Source, kvindex.OpClear)
	case kvevents.UpdateLost:
		x.losses.Add(1)
		return x.do(u.Source, kvindex.OpLost)
	}
	return nil
}

func (x *Index) do(engine string, k kvindex.OpKind) error {
	if x.closed.Load() {
		return kvindex.ErrClosed
	}
	l := x.engineLock(engine)
	l.Lock()
	defer l.Unlock()
	return x.apply(engine, []kvindex.Op{{Kind: k}})
}

// ApplyEvents applies one engine's events, in order (for any feed).
func (x *Index) ApplyEvents(engine string, evs []kvevents.Event) error {
	if x.closed.Load() {
		return kvindex.ErrClosed
	}
	x.batches.Add(1)
	x.events.Add(uint64(len(evs)))
	l := x.engineLock(engine)
	l.Lock()
	defer l.Unlock()
	var ops []kvindex.Op
	for i := range evs {
		ev := &evs[i]
		switch ev.Type {
		case kvevents.AllBlocksCleared:
			ops = append(ops, kvindex.Op{Kind: kvindex.OpClear})
			continue
		case kvevents.BlockStored, kvevents.BlockRemoved:
		default:
			x.notIndexed.Add(1)
			continue
		}
		med := kvindex.DefaultMedium
		if ev.Medium.Valid {
			med = ev.Medium.V
		}
		grp := 0
		if ev.GroupIdx.Valid {
			if ev.GroupIdx.V < 0 || ev.GroupIdx.V > kvindex.MaxGroup {
				x.notIndexed.Add(1)
				continue
			}
			grp = int(ev.GroupIdx.V)
		}
		if ev.Type == kvevents.BlockRemoved {
			for _, h := range ev.BlockHashes {
				ops = append(ops, kvindex.Op{Kind: kvindex.OpRemove, Hash: h.Uint64(), Medium: med, Group: grp})
			}
			continue
		}
		if kvindex.PartialGroup(ev) {
			x.notIndexed.Add(1)
			continue
		}
		if len(ev.TokenIDs) == 0 {
			// A placeholder (offloaded tier): its hash is the offload key's,
			// indexed only when a store of this engine named it.
			if err := x.placeholder(engine, ev, med, grp, &ops); err != nil {
				return err
			}
			continue
		}
		for _, h := range ev.BlockHashes {
			v := h.Uint64()
			ops = append(ops, kvindex.Op{Kind: kvindex.OpStore, Hash: v, Key: kvindex.Key(v), Medium: med, Group: grp})
		}
	}
	return x.apply(engine, ops)
}

// placeholder resolves a tier-only store's hashes against what the engine
// stored; ops queued so far are applied first (they may map its hashes).
func (x *Index) placeholder(engine string, ev *kvevents.Event, med string, grp int, ops *[]kvindex.Op) error {
	if err := x.apply(engine, *ops); err != nil {
		return err
	}
	*ops = (*ops)[:0]
	hashes := make([]uint64, len(ev.BlockHashes))
	for i, h := range ev.BlockHashes {
		hashes[i] = h.Uint64()
	}
	keys, found := make([]kvindex.Key, len(hashes)), make([]bool, len(hashes))
	if err := x.be.Resolve(engine, hashes, keys, found); err != nil {
		x.errs.Add(1)
		return err
	}
	for i, ok := range found {
		if !ok {
			x.notIndexed.Add(1)
			continue
		}
		*ops = append(*ops, kvindex.Op{Kind: kvindex.OpStore, Hash: hashes[i], Key: keys[i], Medium: med, Group: grp})
	}
	return nil
}

// run is one (engine, medium) or (engine, any medium) prefix in progress.
type walkRun struct {
	maybe, certain int
	last           int // the last block index this run saw (dedupe)
	lastTrusted    bool
}

// Score returns, per engine, the longest prefix of r's full blocks the
// engine holds, on any medium and per medium, certain and maybe, in
// kvindex's order. r's hashes are computed with the Index's Hasher.
func (x *Index) Score(r *Request) (kvindex.ScoreResult, error) {
	var res kvindex.ScoreResult
	if x.closed.Load() {
		return res, kvindex.ErrClosed
	}
	if len(r.TokenIDs) > kvindex.MaxScoreTokens {
		return res, fmt.Errorf("vllmhash: %d tokens, over %d", len(r.TokenIDs), kvindex.MaxScoreTokens)
	}
	x.scores.Add(1)
	ds, err := x.cfg.Hasher.Request(r, x.cfg.BlockSize)
	if err != nil {
		return res, err
	}
	res.PromptBlocks = len(ds)
	keys := make([]kvindex.Key, len(ds))
	for i, d := range ds {
		keys[i] = kvindex.Key(d.Uint64())
	}
	type rk struct {
		engine uint32
		medium int32 // -1: any medium
	}
	runs := map[rk]*walkRun{}
	err = x.be.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		extended := false
		for _, h := range hs {
			for _, k := range []rk{{h.Engine, int32(h.Medium)}, {h.Engine, -1}} {
				w := runs[k]
				if w == nil {
					if i != 0 {
						continue
					}
					w = &walkRun{last: -1}
					runs[k] = w
				}
				if w.last == i { // another entry of this run at this block
					if h.Trusted && !w.lastTrusted && w.certain == i {
						w.certain++
						w.lastTrusted = true
					}
					extended = true
					continue
				}
				if w.maybe != i {
					continue // the run ended before this block
				}
				w.maybe++
				w.last, w.lastTrusted = i, h.Trusted
				if h.Trusted && w.certain == i {
					w.certain++
				}
				extended = true
			}
		}
		return extended
	})
	if err != nil {
		x.errs.Add(1)
		return res, err
	}
	bs := x.cfg.BlockSize
	pre := func(w *walkRun) kvindex.Prefix {
		return kvindex.Prefix{Blocks: w.certain, Tokens: w.certain * bs, MaybeBlocks: w.maybe, MaybeTokens: w.maybe * bs}
	}
	byEngine := map[uint32]int{}
	for k, w := range runs {
		if k.medium != -1 || w.maybe == 0 {
			continue
		}
		byEngine[k.engine] = len(res.Engines)
		res.Engines = append(res.Engines, kvindex.EngineScore{Engine: x.be.EngineName(k.engine), BlockSize: bs, Prefix: pre(w)})
	}
	for k, w := range runs {
		if k.medium == -1 || w.maybe == 0 {
			continue
		}
		e := &res.Engines[byEngine[k.engine]]
		e.Tiers = append(e.Tiers, kvindex.Tier{Medium: x.be.MediumName(uint16(k.medium)), Prefix: pre(w)})
	}
	for i := range res.Engines {
		slices.SortFunc(res.Engines[i].Tiers, func(a, b kvindex.Tier) int { return cmp.Compare(a.Medium, b.Medium) })
	}
	slices.SortFunc(res.Engines, func(a, b kvindex.EngineScore) int {
		if c := cmp.Compare(b.Tokens, a.Tokens); c != 0 {
			return c
		}
		if c := cmp.Compare(b.MaybeTokens, a.MaybeTokens); c != 0 {
			return c
		}
		return cmp.Compare(a.Engine, b.Engine)
	})
	return res, nil
}

// Stats returns the Index's counters.
func (x *Index) Stats() IndexStats {
	x.cmu.Lock()
	c := x.counts
	x.cmu.Unlock()
	return IndexStats{Batches: x.batches.Load(), Events: x.events.Load(), NotIndexed: x.notIndexed.Load(),
		Resets: x.resets.Load(), Losses: x.losses.Load(), Counts: c, Scores: x.scores.Load(), Errors: x.errs.Load()}
}

// Backend returns the Index's backend.
func (x *Index) Backend() kvindex.Backend { return x.be }

// Close closes the Index, and its backend when NewIndex made it.
func (x *Index) Close() error {
	if x.closed.Swap(true) || !x.own {
		return nil
	}
	return x.be.Close()
}
