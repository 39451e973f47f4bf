package metrics

import (
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
)

type fakeKVIndex struct{ st kvindex.Stats }

func (f *fakeKVIndex) Stats() kvindex.Stats { return f.st }

// kvStats has a distinct value in every field the families report.
func kvStats() kvindex.Stats {
	return kvindex.Stats{Batches: 1, Events: 2, Stores: 3, Removals: 4, Clears: 5, Resets: 6, Losses: 7,
		Placeholders: 8, UnknownParents: 9, UnknownPlaceholders: 10, Hybrid: 11, PartialGroups: 29, Refused: 12,
		Counts: kvindex.Counts{Added: 13, Refreshed: 14, Removed: 15, UnknownRemovals: 16, Cleared: 17,
			Remapped: 18, Evicted: 19, Rejected: 20},
		Scores: 21, Errors: 22, Bigrams: 30, Inactive: 31, UnknownModels: 32, BackendLosses: 33, Snapshots: 34,
		SnapshotErrors: 35, SnapshotRefused: 36, Departed: 37,
		Backend: kvindex.BackendStats{Entries: 23, Blocks: 24, Mappings: 25, Engines: 26, Capacity: 27, Evicted: 19, Bytes: 28}}
}

// TestAddKVIndexMapsEveryField: each kvindex family reports its Stats
// field under loop=the index's name.
func TestAddKVIndexMapsEveryField(t *testing.T) {
	s := NewSet()
	if err := s.AddKVIndex("kv", &fakeKVIndex{st: kvStats()}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddKVIndex("kv", &fakeKVIndex{}); err == nil {
		t.Fatal("a second index named kv accepted")
	}
	if err := s.AddKVIndex("x", nil); err == nil {
		t.Fatal("nil index accepted")
	}
	var nilIndex *kvindex.Index
	if err := s.AddKVIndex("y", nilIndex); err == nil {
		t.Fatal("nil *kvindex.Index accepted")
	}
	got := map[string]float64{}
	s.Collect(func(smp Sample) {
		got[smp.Family.Name+"{"+strings.Join(smp.Labels, ",")+"}"] = smp.Value
	})
	for k, v := range map[string]float64{
		"zmqguard_kvindex_batches_total{kv}":                         1,
		"zmqguard_kvindex_stored_events_total{kv}":                   3,
		"zmqguard_kvindex_removed_events_total{kv}":                  4,
		"zmqguard_kvindex_cleared_events_total{kv}":                  5,
		"zmqguard_kvindex_engine_resets_total{kv}":                   6,
		"zmqguard_kvindex_lost_ranges_total{kv}":                     7,
		"zmqguard_kvindex_not_indexed_total{kv,unknown_parent}":      9,
		"zmqguard_kvindex_not_indexed_total{kv,unknown_placeholder}": 10,
		"zmqguard_kvindex_not_indexed_total{kv,hybrid}":              11,
		"zmqguard_kvindex_not_indexed_total{kv,bigram}":              30,
		"zmqguard_kvindex_not_indexed_total{kv,partial_group}":       29,
		"zmqguard_kvindex_inactive_events_total{kv}":                 31,
		"zmqguard_kvindex_unknown_model_scores_total{kv}":            32,
		"zmqguard_kvindex_backend_losses_total{kv}":                  33,
		"zmqguard_kvindex_snapshots_total{kv}":                       34,
		"zmqguard_kvindex_departed_engines_total{kv}":                37,
		"zmqguard_kvindex_snapshot_errors_total{kv}":                 35,
		"zmqguard_kvindex_snapshot_refused_total{kv}":                36,
		"zmqguard_kvindex_not_indexed_total{kv,refused}":             12,
		"zmqguard_kvindex_not_indexed_total{kv,rejected}":            20,
		"zmqguard_kvindex_entries_added_total{kv}":                   13,
		"zmqguard_kvindex_entries_removed_total{kv,removed}":         15,
		"zmqguard_kvindex_entries_removed_total{kv,cleared}":         17,
		"zmqguard_kvindex_entries_removed_total{kv,evicted}":         19,
		"zmqguard_kvindex_unknown_removals_total{kv}":                16,
		"zmqguard_kvindex_scores_total{kv}":                          21,
		"zmqguard_kvindex_backend_errors_total{kv}":                  22,
		"zmqguard_kvindex_entries{kv}":                               23,
		"zmqguard_kvindex_blocks{kv}":                                24,
		"zmqguard_kvindex_engines{kv}":                               26,
		"zmqguard_kvindex_capacity{kv}":                              27,
		"zmqguard_kvindex_memory_bytes{kv}":                          28,
	} {
		want(t, got, k, v)
	}
	if len(got) != 32 {
		t.Errorf("%d samples, want 32", len(got))
	}
}
