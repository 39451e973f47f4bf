package kvindex

import (
	"errors"

	"github.com/zmqguard/zmqguard/kvevents"
)

// ErrBackendLost is returned, wrapped, by a shared Backend's calls when the
// store lost its data since the backend last saw it (a Redis restart
// without persistence, FLUSHALL, a failover to an empty replica): every
// cached table (engine and medium numbers, positions) is dropped by the
// backend before it returns the error, so that no call answers with a
// table of the lost store.
var ErrBackendLost = errors.New("kvindex: the shared index lost its data")

// PositionStore is implemented by a Backend that keeps each source's
// position (the last batch applied) beside its entries, so that a
// restarted index or a new replica resumes every source from where the
// shared store stands. A position is saved after the batch's Apply
// succeeded: a saved position is never ahead of the entries.
type PositionStore interface {
	// SavePosition records the source's position.
	SavePosition(source string, p kvevents.Position) error
	// Positions returns every source's saved position.
	Positions() (map[string]kvevents.Position, error)
	// DropPosition forgets a source's position (after a reset or
	// retirement).
	DropPosition(source string) error
}

// Key is a block's key. A local key is a 64-bit chained hash of the
// block's keyspace (model and block size), its parent's key, its token
// ids, its LoRA name and its extra keys: equal keys mean equal prefixes (up
// to a 2⁻⁶⁴ collision chance per pair). In engine-key mode (Config.Keys) a
// key is the hash the engine publishes.
type Key uint64

// OpKind says what an [Op] does.
type OpKind uint8

// The operations a [Backend] applies. Every one concerns the engine named
// in the Apply call.
const (
	// OpStore: the engine holds block Key (its own hash Hash) on Medium,
	// KV-cache group Group, as of now. It maps Hash to Key for the engine
	// (replacing, and removing the entries of, another key Hash mapped
	// to), adds the (Key, engine, Medium, Group) entry if new (counting it
	// against the capacity, evicting the oldest entries past it) and marks
	// the entry trusted (stored at the engine's current loss epoch). A
	// duplicate store changes nothing but trust.
	OpStore OpKind = iota + 1
	// OpRemove: the engine no longer holds the block it knows as Hash on
	// Medium, Group. Removes that entry; once the engine holds the block in
	// no medium and group, the Hash mapping goes too. A hash not mapped, or
	// an entry not held, is a no-op counted in Counts.UnknownRemovals.
	OpRemove
	// OpClear: the engine holds nothing (AllBlocksCleared, or its publisher
	// restarted). Removes every entry and mapping of the engine, eagerly
	// (the memory is reclaimed), and starts a new loss epoch.
	OpClear
	// OpLost: the engine's events were lost for a while. Its entries stored
	// before now become uncertain: Holders reports them with Trusted false
	// until they are stored again (OpStore) or cleared. Implemented as a
	// per-engine loss epoch: an entry is trusted while its epoch equals the
	// engine's.
	OpLost
)

// Op is one storage operation. Hash is the engine's block hash
// (kvevents.Hash.Uint64), Key the local key (OpStore only), Medium the tier
// ("GPU", "CPU", ...; never empty for OpStore and OpRemove, at most 64
// bytes), Group the KV-cache group (0 ≤ Group ≤ 255; an event naming a
// higher one is refused, counted in Stats.Refused).
type Op struct {
	Kind   OpKind
	Hash   uint64
	Key    Key
	Medium string
	Group  int
}

// Counts is what one Apply did, summed into the index's Stats.
type Counts struct {
	// Added counts entries that did not exist; Refreshed counts stores of
	// entries that did (duplicates, replays, re-stores after a loss).
	Added     uint64 `json:"added"`
	Refreshed uint64 `json:"refreshed"`
	// Removed counts entries removed by OpRemove; UnknownRemovals counts
	// OpRemove of an entry the backend does not hold.
	Removed         uint64 `json:"removed"`
	UnknownRemovals uint64 `json:"unknown_removals"`
	// Cleared counts entries removed by OpClear.
	Cleared uint64 `json:"cleared"`
	// Remapped counts OpStore of a Hash the engine had mapped to another
	// Key (the old key's entries of the engine are removed).
	Remapped uint64 `json:"remapped"`
	// Evicted counts entries removed to stay within the capacity.
	Evicted uint64 `json:"evicted"`
	// Rejected counts OpStore the backend could not hold: a group outside
	// 0..255, an empty or over-long medium name, or a medium past 64
	// distinct ones (vLLM knows a handful: GPU, CPU, disk/STORAGE,
	// connector names; names are kept for the backend's life, so a
	// publisher inventing names uses the slots up, and the rejections show
	// it). Never an error: a peer's bytes must not stop the index.
	Rejected uint64 `json:"rejected"`
}

// Holder is one (engine, medium) holding a block, as [Backend.Holders]
// reports it. Engine and Medium are the backend's small numbers for names
// (EngineName, MediumName give the names); an engine holding a block in
// several KV-cache groups of one medium may appear once per group.
type Holder struct {
	Engine  uint32
	Medium  uint16
	Trusted bool
}

// BackendStats are a backend's gauges and totals.
type BackendStats struct {
	// Entries is the number of (block, engine, medium, group) entries held;
	// Blocks the number of distinct local keys; Mappings the number of
	// (engine, engine hash) mappings; Engines the engines known (the
	// in-memory backend: live ones; a departed engine is forgotten).
	Entries  int64 `json:"entries"`
	Blocks   int64 `json:"blocks"`
	Mappings int64 `json:"mappings"`
	Engines  int64 `json:"engines"`
	// Capacity is the entry capacity.
	Capacity int64 `json:"capacity"`
	// Evicted counts entries evicted since the backend was made.
	Evicted uint64 `json:"evicted"`
	// Bytes estimates the memory the backend holds (0 when unknown, e.g.
	// a remote store).
	Bytes int64 `json:"bytes"`
}

// Backend is the index's storage: every stateful piece of the index lives
// behind it, so an in-memory backend ([NewMemory]) and a shared one (Redis)
// give the same answers for the same operations. The conformance suite in
// package kvindextest checks a Backend against these rules.
//
// Calls for one engine are made one at a time, in order (the index
// serialises them per engine); calls for different engines, and Holders,
// may run concurrently. A Backend must be safe for that.
type Backend interface {
	// Resolve looks up the keys the engine's hashes map to, as of now:
	// keys[i], found[i] for hashes[i] (len(keys) == len(found) ==
	// len(hashes)). One call per batch (a remote backend makes one round
	// trip).
	Resolve(engine string, hashes []uint64, keys []Key, found []bool) error
	// Apply applies ops for one engine, in order, and reports what they
	// did. One call per batch (one round trip, one lock). A Holders call
	// running meanwhile sees the state before or after each op (the
	// in-memory backend: before or after the whole call).
	Apply(engine string, ops []Op) (Counts, error)
	// Holders reports, for keys[0], keys[1], ... in order, who holds each
	// key, calling visit(i, holders) once per key until visit returns
	// false (a prefix walk stops at the first key nobody extends). The
	// holders slice is valid only during the call.
	Holders(keys []Key, visit func(i int, holders []Holder) bool) error
	// EngineName and MediumName return the names of a Holder's numbers.
	EngineName(id uint32) string
	MediumName(id uint16) string
	// Stats returns the backend's gauges.
	Stats() BackendStats
	// Close releases the backend.
	Close() error
}

// PrefixWalker is a Backend with a cheaper walk for Score: when the
// Backend has it, Score calls PrefixHolders instead of Holders.
// PrefixHolders is Holders, except that at keys[i] it may leave out a
// holder whose engine does not hold every one of keys[0..i-1] (on some
// medium, trusted or not): such a holder cannot extend the engine's
// prefix, so Score's answer is the same. After a key at which it reports
// no holder it may return without visiting the rest. A sharded backend
// uses it to stop reading a shard at the first key none of the shard's
// engines holds (redisstore).
type PrefixWalker interface {
	PrefixHolders(keys []Key, visit func(i int, holders []Holder) bool) error
}
