package zgprom_test

import (
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
)

type stubKVEvents kvevents.SourceStats

func (s *stubKVEvents) Stats() kvevents.SourceStats { return kvevents.SourceStats(*s) }

type stubKVIndex kvindex.Stats

func (s *stubKVIndex) Stats() kvindex.Stats { return kvindex.Stats(*s) }

// kvEventsStub has a distinct value in every counter the zmqguard_kvevents_
// families report.
func kvEventsStub() *stubKVEvents {
	var st kvevents.SourceStats
	st.ResetsBy.SeqBack, st.ResetsBy.Digest, st.ResetsBy.Jump, st.ResetsBy.Resync = 1, 2, 3, 4
	st.ContinuityProven, st.Unproven, st.UnknownFields = 5, 6, 7
	st.Sources = []kvevents.SourceStats{{Name: "pod-0", Batches: 8}}
	return (*stubKVEvents)(&st)
}

// TestCollectorResetAndEvictionFamilies reads, through a Prometheus
// registry, the counters of issues 35, 37 and 39 that each have a family:
// kvevents resets by reason, continuity proven and unproven, unknown
// fields; kvindex bigram stores, BlockInactive events, unknown models,
// backend losses and snapshots; socket and listener evictions by reason.
func TestCollectorResetAndEvictionFamilies(t *testing.T) {
	c := zgprom.NewCollector(nil)
	for _, err := range []error{
		c.AddKVEvents("kv", 0, kvEventsStub()),
		c.AddKVIndex("kv", &stubKVIndex{Bigrams: 11, Inactive: 12, UnknownModels: 13, BackendLosses: 14, Snapshots: 15,
			SnapshotErrors: 16, SnapshotRefused: 17}),
		c.AddSocket("s", &stubSocket{ConnsEvicted: 21 + 22 + 23, EvictedIdle: 21, EvictedOverShare: 22, EvictedForReserve: 23}),
		c.AddZMTPListener("z", &stubZMTP{ConnsEvicted: 24 + 25 + 26, EvictedIdle: 24, EvictedOverShare: 25, EvictedForReserve: 26}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mfs := gather(t, c)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"zmqguard_kvevents_resets_total", []string{"loop", "kv", "reason", "seq_back"}, 1},
		{"zmqguard_kvevents_resets_total", []string{"loop", "kv", "reason", "digest"}, 2},
		{"zmqguard_kvevents_resets_total", []string{"loop", "kv", "reason", "jump"}, 3},
		{"zmqguard_kvevents_resets_total", []string{"loop", "kv", "reason", "resync"}, 4},
		{"zmqguard_kvevents_continuity_proven_total", []string{"loop", "kv"}, 5},
		{"zmqguard_kvevents_continuity_unproven_total", []string{"loop", "kv"}, 6},
		{"zmqguard_kvevents_unknown_fields_total", []string{"loop", "kv"}, 7},
		{"zmqguard_source_messages_received_total", []string{"loop", "kv", "source", "pod-0"}, 8},
		{"zmqguard_kvindex_not_indexed_total", []string{"loop", "kv", "reason", "bigram"}, 11},
		{"zmqguard_kvindex_inactive_events_total", []string{"loop", "kv"}, 12},
		{"zmqguard_kvindex_unknown_model_scores_total", []string{"loop", "kv"}, 13},
		{"zmqguard_kvindex_backend_losses_total", []string{"loop", "kv"}, 14},
		{"zmqguard_kvindex_snapshots_total", []string{"loop", "kv"}, 15},
		{"zmqguard_kvindex_snapshot_errors_total", []string{"loop", "kv"}, 16},
		{"zmqguard_kvindex_snapshot_refused_total", []string{"loop", "kv"}, 17},
		{"zmqguard_socket_connection_evictions_total", []string{"socket", "s", "reason", "idle"}, 21},
		{"zmqguard_socket_connection_evictions_total", []string{"socket", "s", "reason", "over_share"}, 22},
		{"zmqguard_socket_connection_evictions_total", []string{"socket", "s", "reason", "reserve"}, 23},
		{"zmqguard_zmtp_connection_evictions_total", []string{"socket", "z", "reason", "idle"}, 24},
		{"zmqguard_zmtp_connection_evictions_total", []string{"socket", "z", "reason", "over_share"}, 25},
		{"zmqguard_zmtp_connection_evictions_total", []string{"socket", "z", "reason", "reserve"}, 26},
		{"zmqguard_zmtp_evicted_connections_total", []string{"socket", "z"}, 24 + 25 + 26},
	} {
		if got := value(t, mfs, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
