// Command outputsrx is zmqguard's engine output receiver under load: an
// outputs.Receiver (guarded PULL, SafeLoop, the full one-pass
// EngineCoreOutputs decode with arrays in aux frames) whose handler only
// counts, for bench/run.sh's outputs comparison.
//
// Usage:
//
//	outputsrx --bind tcp://127.0.0.1:0 --count N
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// It exits after N messages and prints one JSON line (msgs/s, CPU ns and
// allocations per message from the first to the last message); the
// request outputs decoded are checked to be 256 per message.
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
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required)")
	count := flag.Uint64("count", 20_000, "messages to receive")
	flag.Parse()
	if *bind == "" || *count < 2 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var m load.Meter
	var bad error
	r, err := outputs.New(outputs.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Socket: socket.Options{},
		Handler: func(_ context.Context, msg *enginecore.Message, _ *socket.Peer) error {
			if len(msg.Outputs) != 256 {
				bad = fmt.Errorf("message %d: %d outputs, want 256", m.N(), len(msg.Outputs))
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
	defer r.Close()
	if err := r.Bind(*bind); err != nil {
		load.Fatal(err)
	}
	load.Bound(r.Endpoint())
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		load.Fatal(err)
	}
	if bad != nil {
		load.Fatal(bad)
	}
	load.PrintJSON(m.Result("outputsrx"))
}
