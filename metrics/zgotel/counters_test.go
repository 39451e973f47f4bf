package zgotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgotel"
)

type stubKVEvents kvevents.SourceStats

func (s *stubKVEvents) Stats() kvevents.SourceStats { return kvevents.SourceStats(*s) }

type stubKVIndex kvindex.Stats

func (s *stubKVIndex) Stats() kvindex.Stats { return kvindex.Stats(*s) }

// TestRegisterResetAndEvictionFamilies reads the kvevents resets by
// reason, continuity and unknown-field counters, the kvindex bigram,
// inactive, unknown-model, backend-loss and snapshot counters, and the
// socket and listener evictions by reason as OpenTelemetry data points.
func TestRegisterResetAndEvictionFamilies(t *testing.T) {
	var ks kvevents.SourceStats
	ks.ResetsBy.SeqBack, ks.ResetsBy.Digest, ks.ResetsBy.Jump, ks.ResetsBy.Resync = 1, 2, 3, 4
	ks.ContinuityProven, ks.Unproven, ks.UnknownFields = 5, 6, 7
	set := metrics.NewSet()
	for _, err := range []error{
		set.AddKVEvents("kv", 0, (*stubKVEvents)(&ks)),
		set.AddKVIndex("kv", &stubKVIndex{Bigrams: 11, Inactive: 12, UnknownModels: 13, BackendLosses: 14, Snapshots: 15,
			SnapshotErrors: 16, SnapshotRefused: 17}),
		set.AddSocket("s", &stubSocket{EvictedIdle: 21, EvictedOverShare: 22, EvictedForReserve: 23}),
		set.AddZMTPListener("z", &stubZMTP{EvictedIdle: 24, EvictedOverShare: 25, EvictedForReserve: 26}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := zgotel.Register(mp.Meter("github.com/zmqguard/zmqguard"), set)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	kv, s, z := attribute.String("loop", "kv"), attribute.String("socket", "s"), attribute.String("socket", "z")
	reason := func(r string) attribute.KeyValue { return attribute.String("reason", r) }
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
		kind  string
	}{
		{"zmqguard.kvevents.resets", []attribute.KeyValue{kv, reason("seq_back")}, 1, "sum monotonic=true {reset}"},
		{"zmqguard.kvevents.resets", []attribute.KeyValue{kv, reason("digest")}, 2, "sum monotonic=true {reset}"},
		{"zmqguard.kvevents.resets", []attribute.KeyValue{kv, reason("jump")}, 3, "sum monotonic=true {reset}"},
		{"zmqguard.kvevents.resets", []attribute.KeyValue{kv, reason("resync")}, 4, "sum monotonic=true {reset}"},
		{"zmqguard.kvevents.continuity_proven", []attribute.KeyValue{kv}, 5, "sum monotonic=true {connection}"},
		{"zmqguard.kvevents.continuity_unproven", []attribute.KeyValue{kv}, 6, "sum monotonic=true {connection}"},
		{"zmqguard.kvevents.unknown_fields", []attribute.KeyValue{kv}, 7, "sum monotonic=true {field}"},
		{"zmqguard.kvindex.not_indexed", []attribute.KeyValue{kv, reason("bigram")}, 11, "sum monotonic=true {event}"},
		{"zmqguard.kvindex.inactive_events", []attribute.KeyValue{kv}, 12, "sum monotonic=true {event}"},
		{"zmqguard.kvindex.unknown_model_scores", []attribute.KeyValue{kv}, 13, "sum monotonic=true {request}"},
		{"zmqguard.kvindex.backend_losses", []attribute.KeyValue{kv}, 14, "sum monotonic=true {loss}"},
		{"zmqguard.kvindex.snapshots", []attribute.KeyValue{kv}, 15, "sum monotonic=true {snapshot}"},
		{"zmqguard.kvindex.snapshot_errors", []attribute.KeyValue{kv}, 16, "sum monotonic=true {error}"},
		{"zmqguard.kvindex.snapshot_refused", []attribute.KeyValue{kv}, 17, "sum monotonic=true {snapshot}"},
		{"zmqguard.socket.connection_evictions", []attribute.KeyValue{s, reason("idle")}, 21, "sum monotonic=true {connection}"},
		{"zmqguard.socket.connection_evictions", []attribute.KeyValue{s, reason("over_share")}, 22, "sum monotonic=true {connection}"},
		{"zmqguard.socket.connection_evictions", []attribute.KeyValue{s, reason("reserve")}, 23, "sum monotonic=true {connection}"},
		{"zmqguard.zmtp.connection_evictions", []attribute.KeyValue{z, reason("idle")}, 24, "sum monotonic=true {connection}"},
		{"zmqguard.zmtp.connection_evictions", []attribute.KeyValue{z, reason("over_share")}, 25, "sum monotonic=true {connection}"},
		{"zmqguard.zmtp.connection_evictions", []attribute.KeyValue{z, reason("reserve")}, 26, "sum monotonic=true {connection}"},
	} {
		got, kind, ok := point(&rm, tc.name, tc.attrs...)
		if !ok {
			t.Errorf("no data point %s %v", tc.name, tc.attrs)
			continue
		}
		if got != tc.want || kind != tc.kind {
			t.Errorf("%s%v = %v (%s), want %v (%s)", tc.name, tc.attrs, got, kind, tc.want, tc.kind)
		}
	}
}
