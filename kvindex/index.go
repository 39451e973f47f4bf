package kvindex

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// ErrClosed is returned by an Index or Backend used after Close.
var ErrClosed = errors.New("kvindex: closed")

// defaultBlockSize is the block size Score uses for a model no store has
// named yet, when neither the request nor Config.BlockSize names one
// (vLLM's default --block-size on GPUs).
const defaultBlockSize = 16

// MaxBlockSize bounds a block size the index accepts (vLLM's largest
// configurable block size is far below it).
const MaxBlockSize = kvkey.MaxBlockSize

// Config configures an Index. The zero value of every field means its
// documented default; New refuses a negative number.
type Config struct {
	// Backend stores the index. Nil means an in-memory one (NewMemory)
	// holding Capacity entries, closed by Index.Close.
	Backend Backend
	// Capacity is the entry capacity of the default in-memory backend;
	// ignored when Backend is set. Zero means 4,194,304 (about 256 MiB).
	Capacity int
	// Seed is the local-key seed; every process sharing a backend must
	// use the same one. Zero means the index's fixed default seed.
	Seed uint64
	// Model is the model every engine serves when ModelOf is nil ("" is a
	// valid model name: a single-model deployment needs neither).
	Model string
	// ModelOf names the model an engine (a source name) serves, e.g. from
	// the topic llm-d deployments publish under. Called once per engine.
	ModelOf func(engine string) string
	// BlockSize is the block size Score uses for a model no store has
	// named yet. Zero means 16 (vLLM's default on GPUs); at most
	// MaxBlockSize.
	BlockSize int
	// Keys, when set, keys blocks by the hashes the engines publish
	// instead of the index's own hashes of their tokens ("engine-key
	// mode"): a store needs neither tokens nor a parent, and Score asks
	// Keys for the keys of a prompt's full blocks of blockSize tokens,
	// appended to dst. Package vllmhash's Hasher.Keys computes vLLM's own
	// hashes. Every engine must then hash as Keys does (vLLM: one hash
	// function, one PYTHONHASHSEED), and Model does not separate keys.
	// Nil means local keys (see the package documentation).
	Keys func(req *ScoreRequest, blockSize int, dst []Key) ([]Key, error)
	// Logger receives a line when the backend fails. Nil means
	// slog.Default().
	Logger *slog.Logger
	// SnapshotFile, when set, makes the in-memory backend survive the
	// index's restart: New loads the file when it exists (a snapshot that
	// is corrupt, truncated, foreign, of a newer format or of another
	// seed or key mode is refused with one log line and the index starts
	// empty), and the index writes it (atomically: a temporary file,
	// fsync, rename) every SnapshotInterval and on Close. It holds the
	// entries, mappings, loss epochs, the engines' and media's names, the
	// block sizes seen and each source's Position; see the package
	// documentation, Restarts. Needs the in-memory backend (Backend nil or
	// made by NewMemory).
	SnapshotFile string
	// SnapshotInterval is how often the snapshot is written. Zero means
	// one minute; negative is refused.
	SnapshotInterval time.Duration
	// OnBackendLost, when set, is called after a backend call returned
	// ErrBackendLost (the shared store lost its data): in its own
	// goroutine, under no lock of the index, once per loss. It must make
	// the feed re-deliver every source from the start as after a reset
	// (kvevents.Subscriber.Resync for every source); the index has by
	// then dropped what it cached about the store.
	OnBackendLost func()
}

// defaultSnapshotInterval is how often a snapshot is written when
// Config.SnapshotInterval is zero.
const defaultSnapshotInterval = time.Minute

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
	models  map[string]int // model → engines serving it

	spaceMu sync.RWMutex
	spaces  map[string][]int // model → block sizes seen, ascending

	scratch sync.Pool // *scoreScratch

	st     counters
	closed atomic.Bool

	fails *ratelog.Limiter // backend-failure lines

	// Positions: each source's last applied batch (restart.go).
	posMu    sync.Mutex
	pos      map[string]kvevents.Position
	pending  map[string]pendingTrust // engines loaded from a snapshot, not yet proven
	npending atomic.Int64            // len(pending)
	ps       PositionStore           // the backend's, or nil

	// Backend losses: no OnBackendLost goroutine starts once closing.
	lostMu  sync.Mutex
	closing bool

	// Snapshots (snapshot.go).
	snapMu   sync.Mutex // one write at a time
	snapStop chan struct{}
	snapDone chan struct{}

	capWarned atomic.Bool // the memory backend's engine cap was logged

	afterWalk func() // tests only (export_test.go): runs in Score after each walk
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

// New returns an Index. It fills the defaults of cfg's zero fields first,
// then checks the result.
func New(cfg Config) (*Index, error) {
	if cfg.Seed == 0 {
		cfg.Seed = kvkey.DefaultSeed
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = defaultBlockSize
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = defaultCapacity
	}
	if cfg.SnapshotInterval == 0 {
		cfg.SnapshotInterval = defaultSnapshotInterval
	}
	switch {
	case cfg.SnapshotInterval < 0:
		return nil, fmt.Errorf("kvindex: Config.SnapshotInterval %v is negative", cfg.SnapshotInterval)
	case cfg.Capacity < 0 || cfg.Capacity > maxCapacity:
		return nil, fmt.Errorf("kvindex: Config.Capacity %d out of range 1..%d", cfg.Capacity, maxCapacity)
	case cfg.BlockSize < 0 || cfg.BlockSize > MaxBlockSize:
		return nil, fmt.Errorf("kvindex: Config.BlockSize %d out of range 1..%d", cfg.BlockSize, MaxBlockSize)
	}
	x := &Index{cfg: cfg, be: cfg.Backend, seed: cfg.Seed, log: cfg.Logger,
		engines: map[string]*engineState{}, models: map[string]int{}, spaces: map[string][]int{}, pos: map[string]kvevents.Position{},
		pending: map[string]pendingTrust{},
		fails:   ratelog.New(ratelog.Config{Logger: cfg.Logger, Component: "kvindex"})}
	if cfg.SnapshotFile != "" {
		_, ok := x.be.(snapshotter)
		if !ok && x.be != nil {
			return nil, fmt.Errorf("kvindex: Config.SnapshotFile %q needs the in-memory backend (a shared backend keeps its own state)", cfg.SnapshotFile)
		}
		if ok && x.be.Stats().Engines != 0 {
			return nil, fmt.Errorf("kvindex: Config.SnapshotFile %q needs an empty backend: the one given holds engines already", cfg.SnapshotFile)
		}
	}
	if x.be == nil {
		be, err := NewMemory(cfg.Capacity)
		if err != nil {
			return nil, err
		}
		x.be, x.own = be, true
	}
	if ps, ok := x.be.(PositionStore); ok {
		x.ps = ps
		if err := x.loadPositions(); err != nil {
			if x.own {
				x.be.Close()
			}
			return nil, err
		}
	}
	if cfg.SnapshotFile != "" {
		x.loadSnapshot()
		x.snapStop, x.snapDone = make(chan struct{}), make(chan struct{})
		go x.snapshotLoop()
	}
	return x, nil
}

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
		x.models[model]++
	}
	return st
}

// Apply applies one update of a kvevents.Subscriber: a batch's events, a
// publisher reset (the engine is cleared), a lost range (the engine's
// entries become uncertain) or a departure (the engine is retired: its
// entries, mappings and position go, counted in Stats.Departed). Its
// signature fits kvevents.Config.Handler with the context dropped.
func (x *Index) Apply(u kvevents.Update) error {
	switch u.Kind {
	case kvevents.UpdateBatch:
		if u.Batch == nil {
			return nil
		}
		seq := u.Seq
		if seq == 0 {
			seq = u.Batch.Seq
		}
		return x.applyEvents(u.Source, u.Batch.Events, &kvevents.Position{Seq: seq, Digest: u.Batch.Digest}, true)
	case kvevents.UpdateReset:
		x.st.resets.Add(1)
		return x.reset(u.Source)
	case kvevents.UpdateLost:
		x.st.losses.Add(1)
		return x.lost(u.Source)
	case kvevents.UpdateDeparted:
		return x.depart(u.Source)
	}
	return nil
}

func (x *Index) apply(engine string, ops []Op) error {
	if len(ops) == 0 {
		return nil
	}
	c, err := x.be.Apply(engine, ops)
	x.st.add(c)
	if err != nil {
		x.failed("apply", engine, err)
	}
	return err
}

// chained reports whether a store's parent hash must be resolved: it has
// one, and the index computes local keys (engine-key mode needs none).
func (x *Index) chained(ev *kvevents.Event) bool {
	return ev.ParentBlockHash.Valid && x.cfg.Keys == nil
}

// isPlaceholder reports a tier-only store: an offloading connector's
// BlockStored with no tokens (block_size 0), which says a block the engine
// already knows by its hash is now also on another medium.
func isPlaceholder(ev *kvevents.Event) bool {
	return ev.Type == kvevents.BlockStored && len(ev.TokenIDs) == 0
}

// inactiveType is the Type of vLLM's BlockInactive events (vLLM PR #50732,
// open; kvevents.Config.DecodeBlockInactive): blocks no request references
// any more, still cached. Counted in Stats.Inactive; the entries stay.
const inactiveType = "BlockInactive"

// isHybrid reports a hybrid-model store whose tokens outnumber its hashes'
// blocks (vLLM drops null blocks' hashes but keeps their tokens, vLLM issue
// #44451): which tokens belong to which hash cannot be known, so it is not
// chainable. It is kvevents' Event.SkippedBlocks above 0, widened to any
// token surplus, since a feed other than kvevents' decoder may hand over a
// partial block that the decoder would have refused.
func isHybrid(ev *kvevents.Event) bool {
	return ev.BlockSize > 0 && int64(len(ev.TokenIDs)) > int64(len(ev.BlockHashes))*ev.BlockSize
}

func medium(ev *kvevents.Event) string {
	if ev.Medium.Valid {
		return ev.Medium.V
	}
	return kvkey.Medium
}

func group(ev *kvevents.Event) (int, bool) {
	if !ev.GroupIdx.Valid {
		return 0, true
	}
	if ev.GroupIdx.V < 0 || ev.GroupIdx.V > kvkey.MaxGroup {
		return 0, false
	}
	return int(ev.GroupIdx.V), true
}

func validMedium(s string) bool {
	return s != "" && len(s) <= kvkey.MaxMediumLen
}

// ApplyEvents applies a batch of engine's events, in order, with one
// Resolve and one Apply of the backend. The rules are in the package
// documentation. It leaves the engine's Position as it was (Apply records
// it).
func (x *Index) ApplyEvents(engine string, evs []kvevents.Event) error {
	return x.applyEvents(engine, evs, nil, false)
}

// applyEvents is ApplyEvents; when pos is not nil and the batch applied,
// it records pos as the engine's position, still in the engine's turn.
// delivered says the batch came from a feed that proves continuity (Apply).
func (x *Index) applyEvents(engine string, evs []kvevents.Event, pos *kvevents.Position, delivered bool) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	defer st.mu.Unlock()
	x.resumed(engine, delivered)
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
		} else if x.chained(ev) {
			st.hashes = append(st.hashes, ev.ParentBlockHash.V.Uint64())
		}
	}
	st.keys = slices.Grow(st.keys[:0], len(st.hashes))[:len(st.hashes)]
	st.found = slices.Grow(st.found[:0], len(st.hashes))[:len(st.hashes)]
	// The in-memory backend resolves and applies under one write lock (a
	// Score waiting between the two would cost a lock hand-off per batch).
	mem, _ := x.be.(lockedApplier)
	var applyErr error // under mem's lock: logged after it (warnEngineCap)
	defer func() { x.warnEngineCap(engine, applyErr) }()
	if mem != nil {
		mem.lock()
		defer mem.unlock()
	}
	if len(st.hashes) > 0 {
		var err error
		if mem != nil {
			err = mem.resolveLocked(engine, st.hashes, st.keys, st.found)
		} else {
			err = x.be.Resolve(engine, st.hashes, st.keys, st.found)
		}
		if err != nil {
			x.failed("resolve", engine, err)
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
		if ev.Type == inactiveType {
			// Still cached, only unreferenced: the entries stay.
			x.st.inactive.Add(1)
			continue
		}
		if ev.Type != kvevents.AllBlocksCleared && ev.KVCacheSpecKind.Valid && kvkey.PartialKind(ev.KVCacheSpecKind.V) {
			x.st.partialGroups.Add(1)
			if ev.Type == kvevents.BlockStored {
				x.st.stores.Add(1)
				if isPlaceholder(ev) {
					next += len(ev.BlockHashes)
				} else if x.chained(ev) {
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
				} else if x.chained(ev) {
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
			if x.cfg.Keys != nil {
				// Engine-key mode: the published hashes are the keys.
				if ev.BlockSize > 0 && ev.BlockSize <= MaxBlockSize {
					x.noteSpace(st.model, int(ev.BlockSize))
				}
				for _, h := range ev.BlockHashes {
					st.ops = append(st.ops, Op{Kind: OpStore, Hash: h.Uint64(), Key: Key(h.Uint64()), Medium: med, Group: g})
					st.overlay[h.Uint64()] = Key(h.Uint64())
				}
				continue
			}
			if ev.TokenPairs {
				// SGLang's bigram pages: a hit only if the token after
				// the page matches too, which a prompt does not show.
				x.st.bigrams.Add(1)
				if ev.ParentBlockHash.Valid {
					next++
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
			root := kvkey.Keyspace(x.seed, st.model, bs)
			st.blk = kvkey.Chain(x.seed, root, parent, hasParent, kvkey.Lora(x.seed, lora), extra, bs, ev.TokenIDs, st.blk[:0])
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
				applyErr = err
			}
		}
	} else {
		err = x.apply(engine, st.ops)
	}
	if err == nil && pos != nil {
		x.setPosition(engine, *pos)
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

// Close closes the index: it writes the snapshot (Config.SnapshotFile) and
// closes the backend when New made it. No Config.OnBackendLost call begins
// once Close has been called; Close does not wait for one under way (it
// may be its caller), which then finds the index closed.
func (x *Index) Close() error {
	if x.closed.Swap(true) {
		return nil
	}
	x.lostMu.Lock()
	x.closing = true
	x.lostMu.Unlock()
	var err error
	if x.snapStop != nil {
		close(x.snapStop)
		<-x.snapDone
		err = x.writeSnapshot()
	}
	if x.own {
		err = errors.Join(err, x.be.Close())
	}
	return err
}

// warnEngineCap logs one WARN, the first time, when err is the in-memory
// backend refusing a new engine at its cap (never under the backend's
// lock: the handler is the user's).
func (x *Index) warnEngineCap(engine string, err error) {
	if errors.Is(err, errTooManyEngines) && x.capWarned.CompareAndSwap(false, true) {
		x.log.Warn("kvindex: the in-memory backend reached its cap of live engines; new engines are refused (counted in errors) until engines depart",
			slog.Int("max_engines", maxEngines), slog.String("engine", ratelog.Escape(engine, 64)))
	}
}

// logFailure writes a backend failure under the index's limiter: at most
// one line per second for all operations together (a backend outage fails
// every batch of every engine), with held_back counting the failures not
// written since the previous line.
func (x *Index) logFailure(op, engine string, err error) {
	x.warnEngineCap(engine, err)
	x.fails.Error("backend", "kvindex: backend "+op+" failed",
		slog.String("engine", ratelog.Escape(engine, 64)), slog.Any(ratelog.KeyErr, err))
}
