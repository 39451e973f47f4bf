package zgotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgotel"
	"github.com/zmqguard/zmqguard/socket"
)

// A loop's counters as OpenTelemetry instruments. A program would use its
// own MeterProvider (otel.GetMeterProvider(), with an OTLP or Prometheus
// exporter); a ManualReader shows what any exporter receives.
func Example() {
	pull, _ := socket.New("PULL", socket.DefaultOptions())
	defer pull.Close()
	l, _ := loop.New(pull, loop.Config[any]{
		Name:    "jobs",
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(context.Context, loop.Delivery[any]) error { return nil },
	})
	set := metrics.NewSet()
	_ = set.AddLoop("jobs", l)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	reg, err := zgotel.Register(mp.Meter("github.com/zmqguard/zmqguard"), set)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "zmqguard.loop.messages_dropped" {
			fmt.Println(m.Name, m.Unit, len(s.DataPoints), "reasons")
		}
	}
	// Output: zmqguard.loop.messages_dropped {message} 11 reasons
}
