package metrics

import (
	"errors"

	"github.com/zmqguard/zmqguard/kvindex"
)

// KV-cache indexes (kvindex.Index), under loop=the index's name (by
// convention the name of the KV-event source set that feeds it).
var (
	KVIndexBatches = family("zmqguard_kvindex_batches_total", Counter, "{batch}",
		"Event batches the index applied.", LabelLoop)
	KVIndexStored = family("zmqguard_kvindex_stored_events_total", Counter, "{event}",
		"BlockStored events the index took (tier-only ones included).", LabelLoop)
	KVIndexRemoved = family("zmqguard_kvindex_removed_events_total", Counter, "{event}",
		"BlockRemoved events the index took.", LabelLoop)
	KVIndexCleared = family("zmqguard_kvindex_cleared_events_total", Counter, "{event}",
		"AllBlocksCleared events the index took.", LabelLoop)
	KVIndexResets = family("zmqguard_kvindex_engine_resets_total", Counter, "{reset}",
		"Engines cleared because their publisher restarted.", LabelLoop)
	KVIndexLostRanges = family("zmqguard_kvindex_lost_ranges_total", Counter, "{range}",
		"Lost ranges that made an engine's entries uncertain.", LabelLoop)
	KVIndexNotIndexed = family("zmqguard_kvindex_not_indexed_total", Counter, "{event}",
		"Stores (or tier-only hashes) not indexed, by reason: unknown_parent, unknown_placeholder, hybrid, "+
			"partial_group (a sliding-window or Mamba group's event), refused (an unusable event), "+
			"rejected (the backend could not hold it).", LabelLoop, LabelReason)
	KVIndexEntriesAdded = family("zmqguard_kvindex_entries_added_total", Counter, "{entry}",
		"(block, engine, medium, group) entries added.", LabelLoop)
	KVIndexEntriesRemoved = family("zmqguard_kvindex_entries_removed_total", Counter, "{entry}",
		"Entries removed, by reason: removed (BlockRemoved, or a remapped hash), cleared (AllBlocksCleared, reset), "+
			"evicted (capacity).", LabelLoop, LabelReason)
	KVIndexUnknownRemovals = family("zmqguard_kvindex_unknown_removals_total", Counter, "{entry}",
		"Removals of entries the index did not hold.", LabelLoop)
	KVIndexScores = family("zmqguard_kvindex_scores_total", Counter, "{request}",
		"Score calls.", LabelLoop)
	KVIndexErrors = family("zmqguard_kvindex_backend_errors_total", Counter, "{error}",
		"Backend failures (a remote store unreachable).", LabelLoop)
	KVIndexEntries = family("zmqguard_kvindex_entries", Gauge, "{entry}",
		"Entries held now.", LabelLoop)
	KVIndexBlocks = family("zmqguard_kvindex_blocks", Gauge, "{block}",
		"Distinct blocks (local keys) held now.", LabelLoop)
	KVIndexEngines = family("zmqguard_kvindex_engines", Gauge, "{engine}",
		"Engines the backend knows.", LabelLoop)
	KVIndexCapacity = family("zmqguard_kvindex_capacity", Gauge, "{entry}",
		"The backend's entry capacity.", LabelLoop)
	KVIndexBytes = &Family{Name: "zmqguard_kvindex_memory_bytes", Kind: Gauge, Unit: "By",
		Help: "Memory the backend's tables hold (0 for a remote backend).", Labels: []string{LabelLoop}}
)

// The reason label values of KVIndexNotIndexed and KVIndexEntriesRemoved.
var (
	kvNotIndexedReasons = []string{"unknown_parent", "unknown_placeholder", "hybrid", "partial_group", "refused", "rejected"}
	kvRemovedReasons    = []string{"removed", "cleared", "evicted"}
)

var kvindexFamilies = []*Family{KVIndexBatches, KVIndexStored, KVIndexRemoved, KVIndexCleared, KVIndexResets,
	KVIndexLostRanges, KVIndexNotIndexed, KVIndexEntriesAdded, KVIndexEntriesRemoved, KVIndexUnknownRemovals,
	KVIndexScores, KVIndexErrors, KVIndexEntries, KVIndexBlocks, KVIndexEngines, KVIndexCapacity, KVIndexBytes}

// KVIndexStats is what AddKVIndex reads: a KV-cache index
// (*kvindex.Index).
type KVIndexStats interface{ Stats() kvindex.Stats }

type namedKVIndex struct {
	name string
	x    KVIndexStats
}

// AddKVIndex adds a KV-cache index under loop=name (the zmqguard_kvindex_
// families). Use the name of the source set feeding it (AddKVEvents), so
// that one loop label follows the pipeline.
func (s *Set) AddKVIndex(name string, x KVIndexStats) error {
	if isNil(x) {
		return errors.New("metrics: AddKVIndex: nil index")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("kv index", []string{"kvindex"}, name); err != nil {
		return err
	}
	s.kvindexes = append(s.kvindexes, namedKVIndex{name, x})
	return nil
}

func (e emitter) kvindex(name string, st kvindex.Stats) {
	f := func(v uint64) float64 { return float64(v) }
	e.emit(KVIndexBatches, f(st.Batches), name)
	e.emit(KVIndexStored, f(st.Stores), name)
	e.emit(KVIndexRemoved, f(st.Removals), name)
	e.emit(KVIndexCleared, f(st.Clears), name)
	e.emit(KVIndexResets, f(st.Resets), name)
	e.emit(KVIndexLostRanges, f(st.Losses), name)
	for i, v := range []uint64{st.UnknownParents, st.UnknownPlaceholders, st.Hybrid, st.PartialGroups, st.Refused, st.Rejected} {
		e.emit(KVIndexNotIndexed, f(v), name, kvNotIndexedReasons[i])
	}
	e.emit(KVIndexEntriesAdded, f(st.Added), name)
	for i, v := range []uint64{st.Removed, st.Cleared, st.Evicted} {
		e.emit(KVIndexEntriesRemoved, f(v), name, kvRemovedReasons[i])
	}
	e.emit(KVIndexUnknownRemovals, f(st.UnknownRemovals), name)
	e.emit(KVIndexScores, f(st.Scores), name)
	e.emit(KVIndexErrors, f(st.Errors), name)
	e.emit(KVIndexEntries, float64(st.Backend.Entries), name)
	e.emit(KVIndexBlocks, float64(st.Backend.Blocks), name)
	e.emit(KVIndexEngines, float64(st.Backend.Engines), name)
	e.emit(KVIndexCapacity, float64(st.Backend.Capacity), name)
	e.emit(KVIndexBytes, float64(st.Backend.Bytes), name)
}
