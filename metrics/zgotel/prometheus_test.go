package zgotel_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgotel"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type (
	fakeLoop      loop.Stats
	fakeSocket    socket.Stats
	fakeZMTP      zmtpguard.Stats
	fakeHandshake handshake.ListenerStats
	fakeCoord     coordinator.Stats
)

func (f *fakeLoop) Stats() loop.Stats                   { return loop.Stats(*f) }
func (f *fakeSocket) Stats() socket.Stats               { return socket.Stats(*f) }
func (f *fakeZMTP) Stats() zmtpguard.Stats              { return zmtpguard.Stats(*f) }
func (f *fakeHandshake) Stats() handshake.ListenerStats { return handshake.ListenerStats(*f) }
func (f *fakeCoord) Stats() coordinator.Stats           { return coordinator.Stats(*f) }

type fakeKVIndex struct{}

func (fakeKVIndex) Stats() kvindex.Stats {
	return kvindex.Stats{Batches: 1, Stores: 2, UnknownParents: 3, Counts: kvindex.Counts{Added: 4, Evicted: 5},
		Backend: kvindex.BackendStats{Entries: 6, Capacity: 7, Bytes: 8}, Bigrams: 9, Inactive: 10, UnknownModels: 11,
		BackendLosses: 12, Snapshots: 13, SnapshotErrors: 14, SnapshotRefused: 15}
}

// kvEventsFull is a KV-event subscriber's counters with distinct non-zero
// values in the zmqguard_kvevents_ families' fields.
func kvEventsFull() *stubKVEvents {
	var st kvevents.SourceStats
	st.ResetsBy.SeqBack, st.ResetsBy.Digest, st.ResetsBy.Jump, st.ResetsBy.Resync = 1, 2, 3, 4
	st.ContinuityProven, st.Unproven, st.UnknownFields = 5, 6, 7
	st.Sources = []kvevents.SourceStats{{Name: "pod-0", Batches: 8, Connected: true}}
	return (*stubKVEvents)(&st)
}

// fullSet has one component of every kind with distinct non-zero values,
// so that every family has samples.
func fullSet(t *testing.T) *metrics.Set {
	t.Helper()
	var d decodeguard.Counts
	for i := range d {
		d[i] = uint64(10 + i)
	}
	ls := loop.Stats{Received: 100, Delivered: 50, Dropped: d, HandlerErrors: 3, LastDrop: time.Unix(1700000000, 0)}
	ss := socket.Stats{Received: 101, Sent: 102, DroppedHWM: 103, DroppedUnroutable: 104, DroppedFiltered: 105,
		Refused: d, Peers: 6, Connects: 107, Disconnects: 108, AcceptErrors: 109, EvictedIdle: 110, EvictedOverShare: 111,
		EvictedForReserve: 112}
	cs := coordinator.Stats{Engines: 2, Wave: 7, Running: true, Started: true, StatsPublished: 1, WavePublished: 2,
		ReadySent: 3, StartWaveSent: 4, StatsApplied: 5, StaleStats: 6, Resizes: 7, BackUnsubscribed: 8}
	cs.Front.Loop, cs.Front.Socket, cs.Front.StateDrops = ls, ss, d
	s := metrics.NewSet()
	for _, err := range []error{
		s.AddLoop("l", (*fakeLoop)(&ls)),
		s.AddSocket("s", (*fakeSocket)(&ss)),
		s.AddZMTPListener("z", &fakeZMTP{Accepted: 1, Handshakes: 2, AcceptErrors: 3, Refused: d, Evicted: 4, Open: 5, Pending: 6,
			EvictedIdle: 7, EvictedOverShare: 8, EvictedForReserve: 9}),
		s.AddHandshakeListener("h", &fakeHandshake{Served: [4]uint64{0, 1, 2, 3}, ErrorReplies: 4, Loop: ls, Socket: ss}),
		s.AddCoordinator("", (*fakeCoord)(&cs)),
		s.AddSources("src", 1, func() []metrics.Source {
			return []metrics.Source{{Name: "a", Received: 9, Dropped: d, Connected: true}, {Name: "b", Received: 8}}
		}),
		s.AddKVIndex("kv", fakeKVIndex{}),
		s.AddKVEvents("kv", 0, kvEventsFull()),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// flatten renders the zmqguard_ samples of a gather as sorted
// "name{k=v,...} value type" lines.
func flatten(mfs []*dto.MetricFamily) []string {
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "zmqguard_") {
			continue
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, lp := range m.Label {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out = append(out, fmt.Sprintf("%s{%s} %g %s", mf.GetName(), strings.Join(ls, ","), v, mf.GetType()))
		}
	}
	sort.Strings(out)
	return out
}

// TestSameSeriesThroughOTelPrometheusExporter: the instruments zgotel
// registers, exported by OpenTelemetry's own Prometheus exporter, are the
// series zgprom exposes directly: same names, labels, values and types.
func TestSameSeriesThroughOTelPrometheusExporter(t *testing.T) {
	set := fullSet(t)
	direct := prometheus.NewPedanticRegistry()
	direct.MustRegister(zgprom.NewCollector(set))
	want, err := direct.Gather()
	if err != nil {
		t.Fatal(err)
	}

	viaOTel := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(viaOTel), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(context.Background())
	reg, err := zgotel.Register(mp.Meter("github.com/zmqguard/zmqguard"), set)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	got, err := viaOTel.Gather()
	if err != nil {
		t.Fatal(err)
	}

	w, g := flatten(want), flatten(got)
	if len(w) < len(metrics.Families()) {
		t.Fatalf("only %d direct samples for %d families", len(w), len(metrics.Families()))
	}
	gs := map[string]bool{}
	for _, l := range g {
		gs[l] = true
	}
	ws := map[string]bool{}
	for _, l := range w {
		ws[l] = true
		if !gs[l] {
			t.Errorf("zgprom has %s; the OTel exporter does not", l)
		}
	}
	for _, l := range g {
		if !ws[l] {
			t.Errorf("the OTel exporter has %s; zgprom does not", l)
		}
	}
}
