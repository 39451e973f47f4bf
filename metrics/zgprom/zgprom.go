// Package zgprom exposes zmqguard's counters as a Prometheus collector
// (github.com/prometheus/client_golang).
//
//	c := zgprom.NewCollector(nil)
//	c.AddLoop("jobs", l)          // a loop.Loop[T]
//	c.AddSocket("jobs", pull)     // its socket.Socket
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(c)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// A [Collector] is a [metrics.Set]: add components to it, register it, and
// every scrape reads their Stats snapshots (nothing is counted twice,
// nothing runs on the hot path).
//
// The metric names, units and labels are those of package metrics
// (zmqguard_loop_messages_dropped_total{loop,reason} and so on).
package zgprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmqguard/zmqguard/metrics"
)

// Collector is a prometheus.Collector over a [metrics.Set]. Its Add methods
// (AddLoop, AddSocket, AddSources and the others) are the Set's. It is safe
// for concurrent use.
type Collector struct {
	*metrics.Set
	descs map[*metrics.Family]*prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a Collector over set, which may be shared with other
// adapters (zgotel); nil means a new, empty Set.
func NewCollector(set *metrics.Set) *Collector {
	if set == nil {
		set = metrics.NewSet()
	}
	c := &Collector{Set: set, descs: map[*metrics.Family]*prometheus.Desc{}}
	for _, f := range metrics.Families() {
		c.descs[f] = prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)
	}
	return c
}

// Describe sends the descriptor of every family.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range metrics.Families() {
		ch <- c.descs[f]
	}
}

// Collect reads every component's Stats and sends one metric per sample.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.Set.Collect(func(s metrics.Sample) {
		desc := c.descs[s.Family]
		typ := prometheus.CounterValue
		if s.Family.Kind == metrics.Gauge {
			typ = prometheus.GaugeValue
		}
		m, err := prometheus.NewConstMetric(desc, typ, s.Value, s.Labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	})
}
