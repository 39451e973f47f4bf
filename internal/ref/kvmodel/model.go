// Package kvmodel is the reference package kvindex is checked against
// (the rules written plainly, as a Model) and the event builders its tests
// share.
//
// It lives in internal/ref, not internal/testkit: the public conformance
// suite kvindextest runs the Model and its builders, and no library package
// imports internal/testkit (internal/testkit/layering holds that rule). It
// imports kvindex, so it is in the references' layer, not the wire's.
package kvmodel

import (
	"cmp"
	"slices"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// Model is the reference the index is checked against: the rules of
// package kvindex written as plainly as possible (maps of maps, no
// capacity, no batching tricks). It is not safe for concurrent use.
type Model struct {
	seed    uint64
	modelOf func(engine string) string
	engines map[string]*modelEngine
	spaces  map[string][]int
}

type tier struct {
	medium string
	group  int
}

type modelGroup struct {
	key   kvindex.Key
	tiers map[tier]int // → epoch when last stored
}

type modelEngine struct {
	epoch  int
	hashes map[uint64]*modelGroup
}

// BlockSize is the index's default block size (Config.BlockSize zero).
const BlockSize = 16

// NewModel returns an empty Model with the index's key seed (0: the
// default) and model naming (nil: every engine serves model "").
func NewModel(seed uint64, modelOf func(engine string) string) *Model {
	if modelOf == nil {
		modelOf = func(string) string { return "" }
	}
	return &Model{seed: seed, modelOf: modelOf, engines: map[string]*modelEngine{}, spaces: map[string][]int{}}
}

func (m *Model) engine(name string) *modelEngine {
	e := m.engines[name]
	if e == nil {
		e = &modelEngine{hashes: map[uint64]*modelGroup{}}
		m.engines[name] = e
	}
	return e
}

// Clear empties the engine (AllBlocksCleared, a publisher reset).
func (m *Model) Clear(engine string) {
	e := m.engine(engine)
	e.hashes = map[uint64]*modelGroup{}
	e.epoch++
}

// Lost marks the engine's entries uncertain.
func (m *Model) Lost(engine string) { m.engine(engine).epoch++ }

// Apply applies a kvevents update the way Index.Apply does.
func (m *Model) Apply(u kvevents.Update) {
	switch u.Kind {
	case kvevents.UpdateBatch:
		if u.Batch != nil {
			m.ApplyEvents(u.Source, u.Batch.Events)
		}
	case kvevents.UpdateReset:
		m.Clear(u.Source)
	case kvevents.UpdateLost:
		m.Lost(u.Source)
	}
}

func medium(ev *kvevents.Event) string {
	if ev.Medium.Valid {
		return ev.Medium.V
	}
	return kvkey.Medium
}

// ApplyEvents applies one batch of an engine's events. Parent and
// placeholder hashes resolve against the engine's mapping as it was when
// the batch began, plus the batch's own earlier stores; after an
// AllBlocksCleared in the batch, only the latter.
func (m *Model) ApplyEvents(engine string, evs []kvevents.Event) {
	e := m.engine(engine)
	start := make(map[uint64]kvindex.Key, len(e.hashes))
	for h, g := range e.hashes {
		start[h] = g.key
	}
	overlay := map[uint64]kvindex.Key{}
	resolve := func(h uint64) (kvindex.Key, bool) {
		if k, ok := overlay[h]; ok {
			return k, true
		}
		k, ok := start[h]
		return k, ok
	}
	model := m.modelOf(engine)
	for i := range evs {
		ev := &evs[i]
		g := 0
		if ev.GroupIdx.Valid {
			g = int(min(max(ev.GroupIdx.V, -1), kvkey.MaxGroup+1))
		}
		med := medium(ev)
		usable := g >= 0 && g <= kvkey.MaxGroup && med != "" && len(med) <= kvkey.MaxMediumLen
		if !usable && ev.Type != kvevents.AllBlocksCleared {
			continue
		}
		if ev.Type != kvevents.AllBlocksCleared && ev.KVCacheSpecKind.Valid && kvkey.PartialKind(ev.KVCacheSpecKind.V) {
			continue
		}
		switch ev.Type {
		case kvevents.BlockStored:
			if len(ev.TokenIDs) == 0 { // tier-only
				for _, h := range ev.BlockHashes {
					if k, ok := resolve(h.Uint64()); ok {
						m.store(e, h.Uint64(), k, tier{med, g})
					}
				}
				continue
			}
			p := kvkey.Params[kvindex.Key]{Seed: m.seed, Model: model, BlockSize: int(ev.BlockSize)}
			if ev.ParentBlockHash.Valid {
				k, ok := resolve(ev.ParentBlockHash.V.Uint64())
				if !ok {
					continue
				}
				p.Parent, p.HasParent = k, true
			}
			if ev.BlockSize <= 0 || ev.BlockSize > kvindex.MaxBlockSize ||
				int64(len(ev.TokenIDs)) != int64(len(ev.BlockHashes))*ev.BlockSize {
				continue
			}
			if ev.LoraName.Valid {
				p.LoraName = ev.LoraName.V
			}
			if ev.HasExtraKeys {
				p.ExtraKeys = ev.ExtraKeys
			}
			if !slices.Contains(m.spaces[model], p.BlockSize) {
				m.spaces[model] = append(m.spaces[model], p.BlockSize)
				slices.Sort(m.spaces[model])
			}
			keys := kvkey.BlockKeys(p, ev.TokenIDs, nil)
			for j, h := range ev.BlockHashes {
				m.store(e, h.Uint64(), keys[j], tier{med, g})
				overlay[h.Uint64()] = keys[j]
			}
		case kvevents.BlockRemoved:
			for _, h := range ev.BlockHashes {
				grp := e.hashes[h.Uint64()]
				if grp == nil {
					continue
				}
				delete(grp.tiers, tier{med, g})
				if len(grp.tiers) == 0 {
					delete(e.hashes, h.Uint64())
				}
			}
		case kvevents.AllBlocksCleared:
			e.hashes = map[uint64]*modelGroup{}
			e.epoch++
			clear(overlay)
			clear(start)
		}
	}
}

func (m *Model) store(e *modelEngine, h uint64, k kvindex.Key, t tier) {
	grp := e.hashes[h]
	if grp != nil && grp.key != k {
		grp = nil
	}
	if grp == nil {
		grp = &modelGroup{key: k, tiers: map[tier]int{}}
		e.hashes[h] = grp
	}
	grp.tiers[t] = e.epoch
}

// Entries returns the number of (block, engine, medium, group) entries.
func (m *Model) Entries() int {
	n := 0
	for _, e := range m.engines {
		for _, g := range e.hashes {
			n += len(g.tiers)
		}
	}
	return n
}

// Score scores a prompt by the rules of Index.Score (without its request
// checks); blockSize is the one to use when the model has seen none.
func (m *Model) Score(req kvindex.ScoreRequest, blockSize int) kvindex.ScoreResult {
	var res kvindex.ScoreResult
	sizes := m.spaces[req.Model]
	if req.BlockSize > 0 {
		sizes = []int{req.BlockSize}
	} else if len(sizes) == 0 {
		sizes = []int{blockSize}
	}
	res.PromptBlocks = len(req.Tokens) / sizes[0]
	for _, bs := range sizes {
		keys := kvkey.BlockKeys(kvkey.Params[kvindex.Key]{Seed: m.seed, Model: req.Model, BlockSize: bs,
			LoraName: req.LoraName, ExtraKeys: req.ExtraKeys}, req.Tokens, nil)
		for name, e := range m.engines {
			if m.modelOf(name) != req.Model {
				// The key space already separates models; this only
				// saves work.
				continue
			}
			// held reports whether e holds key k on medium (any medium
			// when med is ""), and whether certainly.
			held := func(k kvindex.Key, med string) (bool, bool) {
				h, tr := false, false
				for _, g := range e.hashes {
					if g.key != k {
						continue
					}
					for t, ep := range g.tiers {
						if med == "" || t.medium == med {
							h = true
							tr = tr || ep == e.epoch
						}
					}
				}
				return h, tr
			}
			pre := func(med string) kvindex.Prefix {
				var p kvindex.Prefix
				certainRun := true
				for _, k := range keys {
					h, tr := held(k, med)
					if !h {
						break
					}
					p.MaybeBlocks++
					if certainRun && tr {
						p.Blocks++
					} else {
						certainRun = false
					}
				}
				p.Tokens, p.MaybeTokens = p.Blocks*bs, p.MaybeBlocks*bs
				return p
			}
			es := kvindex.EngineScore{Engine: name, BlockSize: bs, Prefix: pre("")}
			if es.MaybeBlocks == 0 {
				continue
			}
			media := map[string]bool{}
			for _, g := range e.hashes {
				for t := range g.tiers {
					media[t.medium] = true
				}
			}
			for med := range media {
				if p := pre(med); p.MaybeBlocks > 0 {
					es.Tiers = append(es.Tiers, kvindex.Tier{Medium: med, Prefix: p})
				}
			}
			slices.SortFunc(es.Tiers, func(a, b kvindex.Tier) int { return cmp.Compare(a.Medium, b.Medium) })
			res.Engines = append(res.Engines, es)
		}
	}
	// Score's order: most certain tokens, most maybe tokens, engine name,
	// block size.
	slices.SortFunc(res.Engines, func(a, b kvindex.EngineScore) int {
		return cmp.Or(cmp.Compare(b.Tokens, a.Tokens), cmp.Compare(b.MaybeTokens, a.MaybeTokens),
			cmp.Compare(a.Engine, b.Engine), cmp.Compare(a.BlockSize, b.BlockSize))
	})
	return res
}

// Tokens returns n deterministic token ids of document doc (documents
// differ from their first token on).
func Tokens(doc, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(doc*100003+i*7919) % 150000
	}
	return out
}

// Store builds a BlockStored of tokens (whole blocks of bs), with hashes
// and an optional parent hash (parent < 0: none).
func Store(hashes []uint64, parent int64, tokens []int64, bs int, med string, group int) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: tokens, BlockSize: int64(bs),
		Medium: kvevents.Some(med), GroupIdx: kvevents.Some[int64](int64(group))}
	for _, h := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
	}
	if parent >= 0 {
		ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(uint64(parent)), Valid: true}
	}
	return ev
}

// Placeholder builds a tier-only BlockStored (no tokens, block size 0),
// as vLLM's offloading connector publishes it.
func Placeholder(hashes []uint64, med string, group int) kvevents.Event {
	return Store(hashes, -1, nil, 0, med, group)
}

// Remove builds a BlockRemoved.
func Remove(hashes []uint64, med string, group int) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some(med), GroupIdx: kvevents.Some[int64](int64(group))}
	for _, h := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
	}
	return ev
}

// Cleared builds an AllBlocksCleared.
func Cleared() kvevents.Event { return kvevents.Event{Type: kvevents.AllBlocksCleared} }
