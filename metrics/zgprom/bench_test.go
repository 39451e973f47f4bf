package zgprom_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

// BenchmarkGather is one full scrape through a registry: a loop, its
// socket and a source set of 1,000 sources (cap 100).
func BenchmarkGather(b *testing.B) {
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer pull.Close()
	l, err := loop.New(pull, loop.Config[any]{
		Name:    "jobs",
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(context.Context, loop.Delivery[any]) error { return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	list := make([]metrics.Source, 1000)
	for i := range list {
		list[i] = metrics.Source{Name: fmt.Sprintf("tcp://10.0.%d.%d:5557", i/256, i%256), Received: uint64(i)}
	}
	c := zgprom.NewCollector(nil)
	for _, err := range []error{c.AddLoop("jobs", l), c.AddSocket("jobs", pull),
		c.AddSources("kv", 0, func() []metrics.Source { return list })} {
		if err != nil {
			b.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	b.ReportAllocs()
	for b.Loop() {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) == 0 {
			b.Fatal(err)
		}
	}
}
