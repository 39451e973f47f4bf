package kvindex

import "sync/atomic"

// Stats are an index's counters and its backend's gauges.
type Stats struct {
	// Batches and Events count what Apply/ApplyEvents took.
	Batches uint64 `json:"batches"`
	Events  uint64 `json:"events"`
	// Stores, Removals and Clears count events by type (BlockStored,
	// BlockRemoved, AllBlocksCleared).
	Stores   uint64 `json:"stores"`
	Removals uint64 `json:"removals"`
	Clears   uint64 `json:"clears"`
	// Resets counts engine resets (publisher restarts, Clear); Losses
	// counts lost ranges (Lost).
	Resets uint64 `json:"resets"`
	Losses uint64 `json:"losses"`
	// Departed counts engines retired (kvevents.UpdateDeparted: removed
	// from the subscriber, e.g. by discovery): each one's entries,
	// mappings and position were dropped.
	Departed uint64 `json:"departed"`
	// Placeholders counts tier-only stores (no tokens) applied.
	Placeholders uint64 `json:"placeholders"`
	// UnknownParents counts stores not indexed because their parent hash
	// was unknown (the engine joined late, the parent was removed or
	// evicted); UnknownPlaceholders counts tier-only store hashes not
	// indexed because the hash was unknown; Hybrid counts hybrid stores
	// (more tokens than blocks) not indexed; Bigrams counts SGLang's
	// bigram stores (token pairs, kvevents.Event.TokenPairs), not indexed
	// in local-key mode (see the package documentation).
	UnknownParents      uint64 `json:"unknown_parents"`
	UnknownPlaceholders uint64 `json:"unknown_placeholders"`
	Hybrid              uint64 `json:"hybrid"`
	Bigrams             uint64 `json:"bigrams"`
	// PartialGroups counts stores and removals of KV-cache groups that do
	// not hold whole prefixes (sliding window, chunked local, Mamba,
	// encoder-only, cross-attention; see the package documentation), left
	// out.
	PartialGroups uint64 `json:"partial_groups"`
	// Refused counts events refused: a block size out of range, tokens not
	// a whole number of blocks, an unusable medium or group, an unknown
	// event type.
	Refused uint64 `json:"refused"`
	// Inactive counts vLLM's BlockInactive events (vLLM PR #50732, open;
	// kvevents.Config.DecodeBlockInactive): blocks still cached that no
	// request references; their entries stay as they were.
	Inactive uint64 `json:"inactive"`
	// Counts sums what the backend did (entries added, refreshed, removed,
	// evicted, ...).
	Counts
	// Scores counts Score calls; Errors counts backend failures.
	Scores uint64 `json:"scores"`
	Errors uint64 `json:"errors"`
	// UnknownModels counts Score calls for a model no engine the index
	// knows serves (ScoreResult.UnknownModel).
	UnknownModels uint64 `json:"unknown_models"`
	// BackendLosses counts the shared backend's losses of its data
	// (ErrBackendLost): each dropped the index's cached tables and asked
	// for every source's resync (Config.OnBackendLost).
	BackendLosses uint64 `json:"backend_losses"`
	// Snapshots counts snapshots written (Config.SnapshotFile);
	// SnapshotErrors those that failed (logged); SnapshotRefused counts a
	// snapshot refused at start (corrupt, truncated, foreign, newer).
	Snapshots       uint64 `json:"snapshots"`
	SnapshotErrors  uint64 `json:"snapshot_errors"`
	SnapshotRefused uint64 `json:"snapshot_refused"`
	// Backend holds the backend's gauges.
	Backend BackendStats `json:"backend"`
}

type counters struct {
	batches, events, stores, removals, clears, resets, losses atomic.Uint64
	placeholders, unknownParents, unknownPlaceholders, hybrid atomic.Uint64
	partialGroups, bigrams, inactive                          atomic.Uint64
	refused, scores, errors                                   atomic.Uint64
	unknownModels, backendLosses, departed                    atomic.Uint64
	snapshots, snapshotErrors, snapshotRefused                atomic.Uint64
	added, refreshed, removed, unknownRemovals, cleared       atomic.Uint64
	remapped, evicted, backendRefused                         atomic.Uint64
}

func (c *counters) add(o Counts) {
	c.added.Add(o.Added)
	c.refreshed.Add(o.Refreshed)
	c.removed.Add(o.Removed)
	c.unknownRemovals.Add(o.UnknownRemovals)
	c.cleared.Add(o.Cleared)
	c.remapped.Add(o.Remapped)
	c.evicted.Add(o.Evicted)
	c.backendRefused.Add(o.Rejected)
}

// Stats returns the index's counters now.
func (x *Index) Stats() Stats {
	c := &x.st
	return Stats{
		Batches: c.batches.Load(), Events: c.events.Load(),
		Stores: c.stores.Load(), Removals: c.removals.Load(), Clears: c.clears.Load(),
		Resets: c.resets.Load(), Losses: c.losses.Load(), Departed: c.departed.Load(), Placeholders: c.placeholders.Load(),
		UnknownParents: c.unknownParents.Load(), UnknownPlaceholders: c.unknownPlaceholders.Load(),
		Hybrid: c.hybrid.Load(), Bigrams: c.bigrams.Load(), PartialGroups: c.partialGroups.Load(), Refused: c.refused.Load(),
		Inactive: c.inactive.Load(),
		Counts: Counts{Added: c.added.Load(), Refreshed: c.refreshed.Load(), Removed: c.removed.Load(),
			UnknownRemovals: c.unknownRemovals.Load(), Cleared: c.cleared.Load(), Remapped: c.remapped.Load(),
			Evicted: c.evicted.Load(), Rejected: c.backendRefused.Load()},
		Scores: c.scores.Load(), Errors: c.errors.Load(), UnknownModels: c.unknownModels.Load(),
		BackendLosses: c.backendLosses.Load(), Snapshots: c.snapshots.Load(), SnapshotErrors: c.snapshotErrors.Load(),
		SnapshotRefused: c.snapshotRefused.Load(),
		Backend:         x.be.Stats(),
	}
}
