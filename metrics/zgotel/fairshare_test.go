package zgotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgotel"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type stubSocket socket.Stats

func (s *stubSocket) Stats() socket.Stats { return socket.Stats(*s) }

type stubZMTP zmtpguard.Stats

func (s *stubZMTP) Stats() zmtpguard.Stats { return zmtpguard.Stats(*s) }

type stubOutputs outputs.Stats

func (s *stubOutputs) Stats() outputs.Stats { return outputs.Stats(*s) }

// TestRegisterFairShareFamilies reads the fair-share, budget, eviction and
// queue counters as OpenTelemetry data points.
func TestRegisterFairShareFamilies(t *testing.T) {
	set := metrics.NewSet()
	for _, err := range []error{
		set.AddSocket("s", &stubSocket{ZMTP30Peers: 2, DroppedFairShare: 3, SendEvictions: 4, BudgetBytes: 5,
			BudgetStalls: 6, BudgetEvictions: 7}),
		set.AddZMTPListener("z", &stubZMTP{ConnsEvicted: 8}),
		set.AddOutputs("o", &stubOutputs{ClaimsRefused: 9, EngineDead: 10, UnattributedDead: 11, QueuedBytes: 12,
			Holds: 13, QueueWaits: 14}),
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
	s, z, o := attribute.String("socket", "s"), attribute.String("socket", "z"), attribute.String("loop", "o")
	for _, tc := range []struct {
		name string
		attr attribute.KeyValue
		want float64
		kind string
	}{
		{"zmqguard.socket.zmtp30_peers", s, 2, "gauge {peer}"},
		{"zmqguard.socket.fair_share_dropped_messages", s, 3, "sum monotonic=true {message}"},
		{"zmqguard.socket.send_evictions", s, 4, "sum monotonic=true {peer}"},
		{"zmqguard.socket.budget", s, 5, "gauge By"},
		{"zmqguard.socket.budget_stalls", s, 6, "sum monotonic=true {stall}"},
		{"zmqguard.socket.budget_evictions", s, 7, "sum monotonic=true {connection}"},
		{"zmqguard.zmtp.evicted_connections", z, 8, "sum monotonic=true {connection}"},
		{"zmqguard.outputs.claims_refused", o, 9, "sum monotonic=true {message}"},
		{"zmqguard.outputs.engine_dead", o, 10, "sum monotonic=true {message}"},
		{"zmqguard.outputs.unattributed_dead", o, 11, "sum monotonic=true {message}"},
		{"zmqguard.outputs.queued", o, 12, "gauge By"},
		{"zmqguard.outputs.holds", o, 13, "sum monotonic=true {hold}"},
		{"zmqguard.outputs.queue_waits", o, 14, "sum monotonic=true {wait}"},
	} {
		got, kind, ok := point(&rm, tc.name, tc.attr)
		if !ok {
			t.Errorf("no data point %s %v", tc.name, tc.attr)
			continue
		}
		if got != tc.want || kind != tc.kind {
			t.Errorf("%s = %v (%s), want %v (%s)", tc.name, got, kind, tc.want, tc.kind)
		}
	}
}
