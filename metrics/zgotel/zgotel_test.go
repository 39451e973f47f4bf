package zgotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgotel"
	"github.com/zmqguard/zmqguard/socket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// point returns the value of name's data point whose attributes are attrs.
func point(rm *metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) (float64, string, bool) {
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), fmt.Sprintf("sum monotonic=%v %s", d.IsMonotonic, m.Unit), true
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), "gauge " + m.Unit, true
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return p.Value, "gauge " + m.Unit, true
					}
				}
			}
		}
	}
	return 0, "", false
}

func TestRegisterReportsLoopAndSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	l, err := loop.New(pull, loop.Config[any]{
		Name:    "jobs",
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(context.Context, loop.Delivery[any]) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(lctx) }()
	defer func() { lcancel(); <-done }()
	push, err := socket.New("PUSH", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Dial(pull.Endpoint()); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{{0xa2, 0xff, 0xfe}, {0x92, 0x01, 0x02}, {0xc1}} { // bad UTF-8, valid, never-used byte
		if err := push.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	for l.Stats().Received < 3 {
		if ctx.Err() != nil {
			t.Fatalf("3 messages not received within 20 s: %+v", l.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}

	set := metrics.NewSet()
	if err := set.AddLoop("jobs", l); err != nil {
		t.Fatal(err)
	}
	if err := set.AddSocket("jobs", pull); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := zgotel.Register(mp.Meter("github.com/zmqguard/zmqguard"), set)
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	jobs := attribute.String("loop", "jobs")
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
		kind  string
	}{
		{"zmqguard.loop.messages_received", []attribute.KeyValue{jobs}, 3, "sum monotonic=true {message}"},
		{"zmqguard.loop.messages_delivered", []attribute.KeyValue{jobs}, 1, "sum monotonic=true {message}"},
		{"zmqguard.loop.messages_dropped", []attribute.KeyValue{jobs, attribute.String("reason", "decode")}, 2, "sum monotonic=true {message}"},
		{"zmqguard.loop.messages_dropped", []attribute.KeyValue{jobs, attribute.String("reason", "oversize")}, 0, "sum monotonic=true {message}"},
		{"zmqguard.socket.peers", []attribute.KeyValue{attribute.String("socket", "jobs")}, 1, "gauge {peer}"},
	} {
		got, kind, ok := point(&rm, tc.name, tc.attrs...)
		if !ok {
			t.Errorf("no data point %s %v", tc.name, tc.attrs)
			continue
		}
		if got != tc.want || kind != tc.kind {
			t.Errorf("%s %v = %v (%s), want %v (%s)", tc.name, tc.attrs, got, kind, tc.want, tc.kind)
		}
	}
	if v, kind, ok := point(&rm, "zmqguard.loop.last_drop_timestamp", jobs); !ok || kind != "gauge s" || v < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last drop timestamp %v (%s, %v), want a recent time in s", v, kind, ok)
	}

	// After Unregister the callback no longer reports.
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	rm = metricdata.ResourceMetrics{}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := point(&rm, "zmqguard.loop.messages_received", jobs); ok {
		t.Error("still reporting after Unregister")
	}
}

func TestRegisterRefusesNil(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())
	if _, err := zgotel.Register(mp.Meter("x"), nil); err == nil {
		t.Error("nil set accepted")
	}
	if _, err := zgotel.Register(nil, metrics.NewSet()); err == nil {
		t.Error("nil meter accepted")
	}
}
