package metrics

import (
	"errors"

	"github.com/zmqguard/zmqguard/kvindex"
)

// KV-cache indexes (kvindex.Index), under loop=the index's name (by
// convention the name of the KV-event source set that feeds it).
var (
	kvindexBatches = family("zmqguard_kvindex_batches_total", Counter, "{batch}",
		"Event batches the index applied.", labelLoop)
	kvindexStored = family("zmqguard_kvindex_stored_events_total", Counter, "{event}",
		"BlockStored events the index took (tier-only ones included).", labelLoop)
	kvindexRemoved = family("zmqguard_kvindex_removed_events_total", Counter, "{event}",
		"BlockRemoved events the index took.", labelLoop)
	kvindexCleared = family("zmqguard_kvindex_cleared_events_total", Counter, "{event}",
		"AllBlocksCleared events the index took.", labelLoop)
	kvindexInactive = family("zmqguard_kvindex_inactive_events_total", Counter, "{event}",
		"BlockInactive events the index took (blocks still cached, no longer referenced: the entries stay).", labelLoop)
	kvindexResets = family("zmqguard_kvindex_engine_resets_total", Counter, "{reset}",
		"Engines cleared because their publisher restarted.", labelLoop)
	kvindexLostRanges = family("zmqguard_kvindex_lost_ranges_total", Counter, "{range}",
		"Lost ranges that made an engine's entries uncertain.", labelLoop)
	kvindexNotIndexed = family("zmqguard_kvindex_not_indexed_total", Counter, "{event}",
		"Stores (or tier-only hashes) not indexed, by reason: unknown_parent, unknown_placeholder, hybrid, "+
			"bigram (SGLang's token-pair pages), partial_group (a sliding-window or Mamba group's event), refused (an unusable event), "+
			"rejected (the backend could not hold it).", labelLoop, labelReason)
	kvindexEntriesAdded = family("zmqguard_kvindex_entries_added_total", Counter, "{entry}",
		"(block, engine, medium, group) entries added.", labelLoop)
	kvindexEntriesRemoved = family("zmqguard_kvindex_entries_removed_total", Counter, "{entry}",
		"Entries removed, by reason: removed (BlockRemoved, or a remapped hash), cleared (AllBlocksCleared, reset), "+
			"evicted (capacity).", labelLoop, labelReason)
	kvindexUnknownRemovals = family("zmqguard_kvindex_unknown_removals_total", Counter, "{entry}",
		"Removals of entries the index did not hold.", labelLoop)
	kvindexScores = family("zmqguard_kvindex_scores_total", Counter, "{request}",
		"Score calls.", labelLoop)
	kvindexUnknownModels = family("zmqguard_kvindex_unknown_model_scores_total", Counter, "{request}",
		"Score calls for a model no engine the index knows serves.", labelLoop)
	kvindexErrors = family("zmqguard_kvindex_backend_errors_total", Counter, "{error}",
		"Backend failures (a remote store unreachable).", labelLoop)
	kvindexBackendLosses = family("zmqguard_kvindex_backend_losses_total", Counter, "{loss}",
		"Losses of the shared backend's data (a Redis restarted empty, flushed or failed over): each dropped the "+
			"cached tables and resynced every source.", labelLoop)
	kvindexDeparted = family("zmqguard_kvindex_departed_engines_total", Counter, "{engine}",
		"Engines retired because they left the fleet (kvevents.UpdateDeparted: removed from the subscriber, "+
			"e.g. by discovery): each one's entries, mappings and position were dropped.", labelLoop)
	kvindexSnapshots = family("zmqguard_kvindex_snapshots_total", Counter, "{snapshot}",
		"Snapshots written.", labelLoop)
	kvindexSnapshotErrors = family("zmqguard_kvindex_snapshot_errors_total", Counter, "{error}",
		"Snapshot writes that failed.", labelLoop)
	kvindexSnapshotRefused = family("zmqguard_kvindex_snapshot_refused_total", Counter, "{snapshot}",
		"Snapshots refused at start (corrupt, truncated, foreign or newer): the index started empty.", labelLoop)
	kvindexEntries = family("zmqguard_kvindex_entries", Gauge, "{entry}",
		"Entries held now.", labelLoop)
	kvindexBlocks = family("zmqguard_kvindex_blocks", Gauge, "{block}",
		"Distinct blocks (local keys) held now.", labelLoop)
	kvindexEngines = family("zmqguard_kvindex_engines", Gauge, "{engine}",
		"Engines the backend knows.", labelLoop)
	kvindexCapacity = family("zmqguard_kvindex_capacity", Gauge, "{entry}",
		"The backend's entry capacity.", labelLoop)
	kvindexBytes = &Family{Name: "zmqguard_kvindex_memory_bytes", Kind: Gauge, Unit: "By",
		Help: "Memory the backend's tables hold (0 for a remote backend).", Labels: []string{labelLoop}}
)

// The reason label values of kvindexNotIndexed and kvindexEntriesRemoved.
var (
	kvNotIndexedReasons = []string{"unknown_parent", "unknown_placeholder", "hybrid", "bigram", "partial_group", "refused", "rejected"}
	kvRemovedReasons    = []string{"removed", "cleared", "evicted"}
)

type namedKVIndex struct {
	name string
	x    interface{ Stats() kvindex.Stats }
}

// AddKVIndex adds a KV-cache index under loop=name (the zmqguard_kvindex_
// families). Use the name of the source set feeding it (AddKVEvents), so
// that one loop label follows the pipeline.
func (s *Set) AddKVIndex(name string, x interface{ Stats() kvindex.Stats }) error {
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
	e.emit(kvindexBatches, f(st.Batches), name)
	e.emit(kvindexStored, f(st.Stores), name)
	e.emit(kvindexRemoved, f(st.Removals), name)
	e.emit(kvindexCleared, f(st.Clears), name)
	e.emit(kvindexInactive, f(st.Inactive), name)
	e.emit(kvindexResets, f(st.Resets), name)
	e.emit(kvindexLostRanges, f(st.Losses), name)
	for i, v := range []uint64{st.UnknownParents, st.UnknownPlaceholders, st.Hybrid, st.Bigrams, st.PartialGroups, st.Refused, st.Rejected} {
		e.emit(kvindexNotIndexed, f(v), name, kvNotIndexedReasons[i])
	}
	e.emit(kvindexEntriesAdded, f(st.Added), name)
	for i, v := range []uint64{st.Removed, st.Cleared, st.Evicted} {
		e.emit(kvindexEntriesRemoved, f(v), name, kvRemovedReasons[i])
	}
	e.emit(kvindexUnknownRemovals, f(st.UnknownRemovals), name)
	e.emit(kvindexScores, f(st.Scores), name)
	e.emit(kvindexUnknownModels, f(st.UnknownModels), name)
	e.emit(kvindexErrors, f(st.Errors), name)
	e.emit(kvindexBackendLosses, f(st.BackendLosses), name)
	e.emit(kvindexDeparted, f(st.Departed), name)
	e.emit(kvindexSnapshots, f(st.Snapshots), name)
	e.emit(kvindexSnapshotErrors, f(st.SnapshotErrors), name)
	e.emit(kvindexSnapshotRefused, f(st.SnapshotRefused), name)
	e.emit(kvindexEntries, float64(st.Backend.Entries), name)
	e.emit(kvindexBlocks, float64(st.Backend.Blocks), name)
	e.emit(kvindexEngines, float64(st.Backend.Engines), name)
	e.emit(kvindexCapacity, float64(st.Backend.Capacity), name)
	e.emit(kvindexBytes, float64(st.Backend.Bytes), name)
}
