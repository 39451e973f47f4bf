package zgprom_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

// A guarded PULL and its loop as Prometheus metrics. In a program, serve the
// registry with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) on /metrics.
func Example() {
	pull, _ := socket.New("PULL", socket.DefaultOptions())
	defer pull.Close()
	l, _ := loop.New(pull, loop.Config[any]{
		Name:    "jobs",
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(context.Context, loop.Delivery[any]) error { return nil },
	})
	c := zgprom.NewCollector(nil)
	if err := c.AddLoop("jobs", l); err != nil {
		panic(err)
	}
	if err := c.AddSocket("jobs", pull); err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "zmqguard_loop_") {
			fmt.Println(mf.GetName(), mf.GetType(), len(mf.Metric), "series")
		}
	}
	// Output:
	// zmqguard_loop_handler_errors_total COUNTER 1 series
	// zmqguard_loop_last_drop_timestamp_seconds GAUGE 1 series
	// zmqguard_loop_messages_delivered_total COUNTER 1 series
	// zmqguard_loop_messages_dropped_total COUNTER 11 series
	// zmqguard_loop_messages_received_total COUNTER 1 series
}
