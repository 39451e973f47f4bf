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
//	kvrx --sources 1000 --endpoints FILE --count N
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// --cpuprofile FILE writes a CPU profile of the run and --memprofile FILE
// its allocations (go tool pprof).
//
// Feed it with `bench/sender --kvevents`. With --sources (the fleet case: a
// router following many engines) it binds that many sources, each on a port
// the kernel picks on 127.0.0.1, writes their endpoints to FILE (one a
// line, the file renamed into place once complete) for `bench/sender
// --kvevents --connect-file FILE`, and counts batches over all of them.
// It exits after N batches and
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
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/kvevents"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required without --sources)")
	count := flag.Uint64("count", 200_000, "batches to receive")
	sources := flag.Int("sources", 1, "sources to follow, each bound on 127.0.0.1 at a port the kernel picks (with --endpoints)")
	endpoints := flag.String("endpoints", "", "with --sources: the file to write the sources' endpoints to")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memprof := flag.String("memprofile", "", "write a heap profile (allocations sampled every 4 KiB) at the end to this file")
	flag.Parse()
	if *memprof != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			f, err := os.Create(*memprof)
			if err != nil {
				load.Fatal(err)
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				load.Fatal(err)
			}
		}()
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			load.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			load.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *count < 2 || *sources < 1 || (*sources == 1 && *bind == "") || (*sources > 1 && *endpoints == "") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		m   load.Meter
		mu  sync.Mutex // sources deliver from their own goroutines
		bad error
	)
	sub, err := kvevents.NewSubscriber(kvevents.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler: func(_ context.Context, u kvevents.Update) error {
			if *sources > 1 {
				mu.Lock()
				defer mu.Unlock()
			}
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
	if *sources == 1 {
		if err := sub.Add(kvevents.Source{Name: "bench", Live: *bind, Bind: true}); err != nil {
			load.Fatal(err)
		}
		load.Bound(sub.Endpoint("bench"))
	} else {
		var eps strings.Builder
		for i := range *sources {
			name := fmt.Sprintf("engine-%04d", i)
			if err := sub.Add(kvevents.Source{Name: name, Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
				load.Fatal(err)
			}
			eps.WriteString(sub.Endpoint(name) + "\n")
		}
		if err := os.WriteFile(*endpoints+".tmp", []byte(eps.String()), 0o644); err != nil {
			load.Fatal(err)
		}
		if err := os.Rename(*endpoints+".tmp", *endpoints); err != nil {
			load.Fatal(err)
		}
	}
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
