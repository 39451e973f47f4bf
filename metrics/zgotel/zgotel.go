// Package zgotel exposes zmqguard's counters as OpenTelemetry observable
// instruments (go.opentelemetry.io/otel/metric).
//
//	set := metrics.NewSet()
//	set.AddLoop("jobs", l)
//	reg, err := zgotel.Register(otel.Meter("github.com/zmqguard/zmqguard"), set)
//	defer reg.Unregister()
//
// [Register] creates one instrument per family of package metrics on a
// Meter and one callback that reads a [metrics.Set]'s Stats snapshots
// whenever the SDK collects: nothing runs on the hot path.
//
// Instrument names are the Prometheus names written the OpenTelemetry way
// (zmqguard_loop_messages_dropped_total is zmqguard.loop.messages_dropped,
// unit {message}); attributes are the same four labels (socket, reason,
// loop, source). Through the OpenTelemetry Prometheus exporter they come out
// under the names package zgprom uses.
package zgotel

import (
	"context"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/zmqguard/zmqguard/metrics"
)

// Register creates the instruments on m and a callback reporting set.
// Unregister the returned Registration to stop reporting.
func Register(m metric.Meter, set *metrics.Set) (metric.Registration, error) {
	if m == nil || set == nil {
		return nil, fmt.Errorf("zgotel: Register needs a Meter and a Set (got meter %v, set %v)", m != nil, set != nil)
	}
	type inst struct {
		i64 metric.Int64Observable
		f64 metric.Float64Observable
	}
	insts := map[*metrics.Family]inst{}
	var all []metric.Observable
	for _, f := range metrics.Families() {
		name, desc, unit := f.OTelName(), metric.WithDescription(f.Help), metric.WithUnit(f.Unit)
		var in inst
		var err error
		switch {
		case f.Float:
			in.f64, err = m.Float64ObservableGauge(name, desc, unit)
		case f.Kind == metrics.Gauge:
			in.i64, err = m.Int64ObservableGauge(name, desc, unit)
		default:
			in.i64, err = m.Int64ObservableCounter(name, desc, unit)
		}
		if err != nil {
			return nil, fmt.Errorf("zgotel: instrument %s: %w", name, err)
		}
		insts[f] = in
		if in.f64 != nil {
			all = append(all, in.f64)
		} else {
			all = append(all, in.i64)
		}
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		set.Collect(func(s metrics.Sample) {
			kv := make([]attribute.KeyValue, len(s.Labels))
			for i, v := range s.Labels {
				kv[i] = attribute.String(s.Family.Labels[i], v)
			}
			in := insts[s.Family]
			if in.f64 != nil {
				o.ObserveFloat64(in.f64, s.Value, metric.WithAttributes(kv...))
				return
			}
			o.ObserveInt64(in.i64, toInt64(s.Value), metric.WithAttributes(kv...))
		})
		return nil
	}, all...)
}

// toInt64 converts a sample (a uint64 count) to int64, saturating.
func toInt64(v float64) int64 {
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
