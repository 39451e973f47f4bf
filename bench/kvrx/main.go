// Command kvrx is zmqguard's KV-event subscriber under load: a
// kvevents.Subscriber with one source (its SUB bound, the publisher
// connecting, as vLLM's publisher does when its endpoint names a host)
// whose handler only counts, for bench/run.sh's kvevents comparison. Every
// batch goes through the subscriber's whole path: guarded SUB, SafeLoop,
// the [topic, seq, payload] envelope, sequence tracking and the guarded
// decode of every event.
//
// Usage:
//
//	kvrx --bind tcp://127.0.0.1:0 --count N
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// Feed it with `bench/sender --kvevents`. It exits after N batches and
// prints one JSON line (msgs/s, CPU ns and allocations per batch from the
// first to the last batch); each batch is checked to hold
// load.KVBatchEvents events, and a lost range or a reset is an error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/kvevents"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required)")
	count := flag.Uint64("count", 200_000, "batches to receive")
	flag.Parse()
	if *bind == "" || *count < 2 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var m load.Meter
	var bad error
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind != kvevents.UpdateBatch || len(u.Batch.Events) != load.KVBatchEvents {
				bad = fmt.Errorf("update %d: %s with %d events, want a batch of %d", m.N(), u.Kind, eventsOf(u), load.KVBatchEvents)
				cancel()
				return nil
			}
			m.Count()
			if m.N() >= *count {
				m.Stop()
				cancel()
			}
			return nil
		},
	})
	if err != nil {
		load.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Add(kvevents.Source{Name: "bench", Live: *bind, Bind: true}); err != nil {
		load.Fatal(err)
	}
	load.Bound(sub.Endpoint("bench"))
	if err := sub.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		load.Fatal(err)
	}
	if bad != nil {
		load.Fatal(bad)
	}
	load.PrintJSON(m.Result("kvrx"))
}

func eventsOf(u kvevents.Update) int {
	if u.Batch == nil {
		return 0
	}
	return len(u.Batch.Events)
}
