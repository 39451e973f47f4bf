package kvindex

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/kvevents"
)

// ErrClosed is returned by an Index or Backend used after Close.
var ErrClosed = errors.New("kvindex: closed")

// DefaultBlockSize is the block size Score uses for a model no store has
// named yet, when neither the request nor Config.BlockSize names one
// (vLLM's default --block-size on GPUs).
const DefaultBlockSize = 16

// DefaultMedium is the medium of an event that names none: releases before
// the medium field published GPU blocks only.
const DefaultMedium = "GPU"

// MaxBlockSize bounds a block size the index accepts (vLLM's largest
// configurable block size is far below it).
const MaxBlockSize = 1 << 16

// Config configures an Index. Zero fields take the defaults.
type Config struct {
	// Backend stores the index (nil: NewMemory with Capacity).
	Backend Backend
	// Capacity is the entry capacity of the default memory backend
	// (0: DefaultCapacity). Ignored when Backend is set.
	Capacity int
	// Seed is the local-key seed (0: DefaultSeed). Every process sharing
	// a backend must use the same one.
	Seed uint64
	// Model is the model every engine serves when ModelOf is nil ("" is a
	// valid model name: a single-model deployment needs neither).
	Model string
	// ModelOf names the model an engine (a source name) serves, e.g. from
	// the topic llm-d deployments publish under. Called once per engine.
	ModelOf func(engine string) string
	// BlockSize is the block size Score uses for a model no store has
	// named yet (0: DefaultBlockSize).
	BlockSize int
	// Logger receives a line when the backend fails (nil: slog.Default()).
	Logger *slog.Logger
}

// Index is a KV-cache index: it follows what every engine's prefix cache
// holds, from the engines' KV events, and tells which engine holds the
// longest prefix of a prompt, on which medium. Its methods are safe for
// concurrent use; updates for one engine must come in order (as a
// kvevents.Subscriber delivers them).
type Index struct {
	cfg  Config
	be   Backend
	own  bool // be was made by New
	seed uint64
	log  *slog.Logger

	mu      sync.Mutex
	engines map[string]*engineState

	spaceMu sync.RWMutex
	spaces  map[string][]int // model → block sizes seen, ascending

	scratch sync.Pool // *scoreScratch

	st     counters
	closed atomic.Bool
}

type engineState struct {
	mu    sync.Mutex
	model string

	// scratch, reused per batch under mu
	ops     []Op
	hashes  []uint64
	keys    []Key
	found   []bool
	overlay map[uint64]Key
	blk     []Key
}

// New returns an Index.
func New(cfg Config) (*Index, error) {
	if cfg.Capacity < 0 || cfg.BlockSize < 0 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("kvindex: bad Config (Capacity %d, BlockSize %d)", cfg.Capacity, cfg.BlockSize)
	}
	x := &Index{cfg: cfg, be: cfg.Backend, seed: cfg.Seed, log: cfg.Logger,
		engines: map[string]*engineState{}, spaces: map[string][]int{}}
	if x.seed == 0 {
		x.seed = DefaultSeed
	}
	if x.log == nil {
		x.log = slog.Default()
	}
	if x.cfg.BlockSize == 0 {
		x.cfg.BlockSize = DefaultBlockSize
	}
	if x.be == nil {
		be, err := NewMemory(MemoryConfig{Capacity: cfg.Capacity})
		if err != nil {
			return nil, err
		}
		x.be, x.own = be, true
	}
	return x, nil
}

// Backend returns the index's backend.
func (x *Index) Backend() Backend { return x.be }

func (x *Index) engine(name string) *engineState {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.engines[name]
	if st == nil {
		model := x.cfg.Model
		if x.cfg.ModelOf != nil {
			model = x.cfg.ModelOf(name)
		}
		st = &engineState{model: model, overlay: map[uint64]Key{}}
		x.engines[name] = st
	}
	return st
}

// Apply applies one update of a kvevents.Subscriber: a batch's events, a
// publisher reset (the engine is cleared) or a lost range (the engine's
// entries become uncertain). Its signature fits kvevents.Config.Handler with
// the context dropped.
func (x *Index) Apply(u kvevents.Update) error {
	switch u.Kind {
	case kvevents.UpdateBatch:
		if u.Batch == nil {
			return nil
		}
		return x.ApplyEvents(u.Source, u.Batch.Events)
	case kvevents.UpdateReset:
		x.st.resets.Add(1)
		return x.do(u.Source, OpClear)
	case kvevents.UpdateLost:
		x.st.losses.Add(1)
		return x.do(u.Source, OpLost)
	}
	return nil
}

// Clear empties what the index holds for engine, as a publisher reset
// does (for feeds other than a kvevents.Subscriber).
func (x *Index) Clear(engine string) error {
	x.st.resets.Add(1)
	return x.do(engine, OpClear)
}

// Lost tells the index that some of engine's events were lost: its
// entries become uncertain until stored again (for feeds other than a
// kvevents.Subscriber).
func (x *Index) Lost(engine string) error {
	x.st.losses.Add(1)
	return x.do(engine, OpLost)
}

func (x *Index) do(engine string, k OpKind) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ops = append(st.ops[:0], Op{Kind: k})
	return x.apply(engine, st.ops)
}

func (x *Index) apply(engine string, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	c, err := x.be.Apply(engine, ops)
	x.st.add(c)
	if err != nil {
		x.st.errors.Add(1)
		x.log.Error("kvindex: backend apply failed", "engine", safeName(engine), "err", err)
	}
	return err
}

// ApplyEvent applies one event of engine (for any feed of events).
func (x *Index) ApplyEvent(engine string, ev *kvevents.Event) error {
	return x.ApplyEvents(engine, []kvevents.Event{*ev})
}

// isPlaceholder reports a tier-only store: an offloading connector's
// BlockStored with no tokens (block_size 0), which says a block the engine
// already knows by its hash is now also on another medium.
func isPlaceholder(ev *kvevents.Event) bool {
	return ev.Type == kvevents.BlockStored && len(ev.TokenIDs) == 0
}

// isHybrid reports a hybrid-model store whose tokens outnumber its hashes'
// blocks (vLLM drops null blocks' hashes but keeps their tokens, vLLM issue
// #44451): which tokens belong to which hash cannot be known, so it is not
// chainable. It is kvevents' Event.SkippedBlocks above 0, widened to any
// token surplus, since a feed other than kvevents' decoder may hand over a
// partial block that the decoder would have refused.
func isHybrid(ev *kvevents.Event) bool {
	return ev.BlockSize > 0 && int64(len(ev.TokenIDs)) > int64(len(ev.BlockHashes))*ev.BlockSize
}

// partialKinds are the KV-cache group kinds whose blocks do not hold a
// whole prefix (vLLM's KVCacheSpecKind, vllm/v1/kv_cache_interface.py; sent
// since vLLM PR #40984): a sliding-window or chunked-local group drops the
// blocks before its window, a Mamba group keeps a state, not the prefix's
// KV, and encoder-only and cross-attention caches are not prompt prefixes.
// Events of these groups are not indexed (Stats.PartialGroups): a prefix
// counts where the full-attention (or MLA) group holds it, as vLLM's hybrid
// manager needs the full-attention blocks of every prefix block.
var partialKinds = map[string]bool{
	"sliding_window": true, "sliding_window_mla": true, "mamba": true, "chunked_local_attention": true,
	"encoder_only_attention": true, "cross_attention": true,
}

// PartialGroup reports whether ev belongs to a KV-cache group whose blocks
// do not hold a whole prefix (a sliding-window, chunked-local, Mamba,
// encoder-only or cross-attention group): the index leaves such events out.
func PartialGroup(ev *kvevents.Event) bool {
	return ev.KVCacheSpecKind.Valid && partialKinds[ev.KVCacheSpecKind.V]
}

func medium(ev *kvevents.Event) string {
	if ev.Medium.Valid {
		return ev.Medium.V
	}
	return DefaultMedium
}

func group(ev *kvevents.Event) (int, bool) {
	if !ev.GroupIdx.Valid {
		return 0, true
	}
	if ev.GroupIdx.V < 0 || ev.GroupIdx.V > MaxGroup {
		return 0, false
	}
	return int(ev.GroupIdx.V), true
}

func validMedium(s string) bool {
	return s != "" && len(s) <= MaxMediumLen
}

// ApplyEvents applies a batch of engine's events, in order, with one
// Resolve and one Apply of the backend. The rules are in the package
// documentation.
func (x *Index) ApplyEvents(engine string, evs []kvevents.Event) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	defer st.mu.Unlock()
	x.st.batches.Add(1)
	x.st.events.Add(uint64(len(evs)))

	// Pass 1: every hash the batch needs resolved as of its start.
	st.hashes = st.hashes[:0]
	for i := range evs {
		ev := &evs[i]
		if ev.Type != kvevents.BlockStored {
			continue
		}
		if isPlaceholder(ev) {
			for _, h := range ev.BlockHashes {
				st.hashes = append(st.hashes, h.Uint64())
			}
		} else if ev.ParentBlockHash.Valid {
			st.hashes = append(st.hashes, ev.ParentBlockHash.V.Uint64())
		}
	}
	st.keys = slices.Grow(st.keys[:0], len(st.hashes))[:len(st.hashes)]
	st.found = slices.Grow(st.found[:0], len(st.hashes))[:len(st.hashes)]
	// The in-memory backend resolves and applies under one write lock (a
	// Score waiting between the two would cost a lock hand-off per batch).
	mem, _ := x.be.(*memory)
	if mem != nil {
		mem.lock()
		defer mem.mu.Unlock()
	}
	if len(st.hashes) > 0 {
		var err error
		if mem != nil {
			err = mem.resolveLocked(engine, st.hashes, st.keys, st.found)
		} else {
			err = x.be.Resolve(engine, st.hashes, st.keys, st.found)
		}
		if err != nil {
			x.st.errors.Add(1)
			x.log.Error("kvindex: backend resolve failed", "engine", safeName(engine), "err", err)
			return err
		}
	}
	// Pass 2: the ops, resolving against the batch's start plus its own
	// earlier stores; after a clear in the batch only the latter count.
	clear(st.overlay)
	cleared := false
	next := 0 // next resolved hash
	lookup := func(h uint64, r int) (Key, bool) {
		if k, ok := st.overlay[h]; ok {
			return k, true
		}
		if !cleared && st.found[r] {
			return st.keys[r], true
		}
		return 0, false
	}
	st.ops = st.ops[:0]
	for i := range evs {
		ev := &evs[i]
		if ev.Type != kvevents.AllBlocksCleared && PartialGroup(ev) {
			x.st.partialGroups.Add(1)
			if ev.Type == kvevents.BlockStored {
				x.st.stores.Add(1)
				if isPlaceholder(ev) {
					next += len(ev.BlockHashes)
				} else if ev.ParentBlockHash.Valid {
					next++
				}
			} else if ev.Type == kvevents.BlockRemoved {
				x.st.removals.Add(1)
			}
			continue
		}
		switch ev.Type {
		case kvevents.BlockStored:
			x.st.stores.Add(1)
			med := medium(ev)
			g, ok := group(ev)
			if !ok || !validMedium(med) {
				x.st.refused.Add(1)
				if isPlaceholder(ev) {
					next += len(ev.BlockHashes)
				} else if ev.ParentBlockHash.Valid {
					next++
				}
				continue
			}
			if isPlaceholder(ev) {
				x.st.placeholders.Add(1)
				for _, h := range ev.BlockHashes {
					k, ok := lookup(h.Uint64(), next)
					next++
					if !ok {
						x.st.unknownPlaceholders.Add(1)
						continue
					}
					st.ops = append(st.ops, Op{Kind: OpStore, Hash: h.Uint64(), Key: k, Medium: med, Group: g})
				}
				continue
			}
			var parent Key
			hasParent := ev.ParentBlockHash.Valid
			if hasParent {
				k, ok := lookup(ev.ParentBlockHash.V.Uint64(), next)
				next++
				if !ok {
					x.st.unknownParents.Add(1)
					continue
				}
				parent = k
			}
			if isHybrid(ev) {
				x.st.hybrid.Add(1)
				continue
			}
			if ev.BlockSize <= 0 || ev.BlockSize > MaxBlockSize || int64(len(ev.TokenIDs)) != int64(len(ev.BlockHashes))*ev.BlockSize {
				x.st.refused.Add(1)
				continue
			}
			bs := int(ev.BlockSize)
			x.noteSpace(st.model, bs)
			var extra [][]byte
			if ev.HasExtraKeys {
				extra = ev.ExtraKeys
			}
			lora := ""
			if ev.LoraName.Valid {
				lora = ev.LoraName.V
			}
			root := keyspace(x.seed, st.model, bs)
			st.blk = blockKeys(x.seed, root, parent, hasParent, hashLora(x.seed, lora), extra, bs, ev.TokenIDs, st.blk[:0])
			for j, h := range ev.BlockHashes {
				st.ops = append(st.ops, Op{Kind: OpStore, Hash: h.Uint64(), Key: st.blk[j], Medium: med, Group: g})
				st.overlay[h.Uint64()] = st.blk[j]
			}
		case kvevents.BlockRemoved:
			x.st.removals.Add(1)
			med := medium(ev)
			g, ok := group(ev)
			if !ok || !validMedium(med) {
				x.st.refused.Add(1)
				continue
			}
			for _, h := range ev.BlockHashes {
				st.ops = append(st.ops, Op{Kind: OpRemove, Hash: h.Uint64(), Medium: med, Group: g})
			}
		case kvevents.AllBlocksCleared:
			x.st.clears.Add(1)
			st.ops = append(st.ops, Op{Kind: OpClear})
			clear(st.overlay)
			cleared = true
		default:
			x.st.refused.Add(1)
		}
	}
	var err error
	if mem != nil {
		if len(st.ops) > 0 {
			var c Counts
			c, err = mem.applyLocked(engine, st.ops)
			x.st.add(c)
			if err != nil {
				x.st.errors.Add(1)
			}
		}
	} else {
		err = x.apply(engine, st.ops)
	}
	if cap(st.ops) > 1<<16 {
		st.ops = nil
	}
	if len(st.overlay) > 1<<12 {
		st.overlay = map[uint64]Key{}
	}
	return err
}

func (x *Index) noteSpace(model string, bs int) {
	x.spaceMu.RLock()
	sizes := x.spaces[model]
	x.spaceMu.RUnlock()
	if slices.Contains(sizes, bs) {
		return
	}
	x.spaceMu.Lock()
	defer x.spaceMu.Unlock()
	sizes = x.spaces[model]
	if !slices.Contains(sizes, bs) && len(sizes) < 8 {
		sizes = append(slices.Clone(sizes), bs)
		slices.Sort(sizes)
		x.spaces[model] = sizes
	}
}

// Close closes the index, and its backend when New made it.
func (x *Index) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	if x.own {
		return x.be.Close()
	}
	return nil
}

// safeName renders an engine name for a log line (printable, capped).
func safeName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
