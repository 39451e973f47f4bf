// Command pullprof is `zmqguard sink` for profiling: the same hardened PULL
// under a SafeLoop (decoding every frame as EngineCoreOutputs, or not), with
// a CPU profile written from the first to the last message and the process's
// CPU time per message in its JSON line, so that the receive path can be
// examined with `go tool pprof` or `perf` and changes compared by CPU cost
// rather than by a noisy machine's wall-clock rate.
//
// Usage:
//
//	pullprof --bind tcp://127.0.0.1:PORT [--count N] [--decode stats|none] [--cpuprofile FILE] [--read-buffer BYTES]
//
// Once bound it writes "bound endpoint=tcp://HOST:PORT" on stderr (the
// port the kernel chose with port 0). Feed it with bench/sender. It exits
// after N valid messages.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"runtime/pprof"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required)")
	count := flag.Uint64("count", 4_000_000, "valid messages to receive")
	decode := flag.String("decode", "stats", "stats (EngineCoreOutputs, guarded) or none")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the first to the last message to this file")
	rbuf := flag.Int("read-buffer", 0, "largest per-connection read buffer (0: the socket default)")
	flag.Parse()
	if *bind == "" || *count < 2 || (*decode != "stats" && *decode != "none") || *rbuf < 0 {
		flag.Usage()
		os.Exit(2)
	}
	opts := socket.DefaultOptions()
	if *rbuf > 0 {
		opts.Guard.ReadBufferSize = *rbuf
	}
	s, err := socket.New("PULL", opts)
	if err != nil {
		load.Fatal(err)
	}
	defer s.Close()
	if err := s.Bind(*bind); err != nil {
		load.Fatal(err)
	}
	load.Bound(s.Endpoint())
	lim := decodeguard.Limits{MaxBytes: 1 << 20}
	stats := *decode == "stats"
	dec := func(frames [][]byte, dst *enginecore.Header) error {
		if len(frames) != 1 {
			return decodeguard.NewError(decodeguard.ReasonEnvelope, "expected one frame")
		}
		if !stats {
			return nil
		}
		return enginecore.DecodeHeader(frames[0], &lim, dst)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var m load.Meter
	var prof *os.File
	l, err := loop.New(s, loop.Config[enginecore.Header]{
		Name:   "pullprof",
		Logger: slog.New(slog.DiscardHandler),
		Decode: dec,
		Handler: func(context.Context, loop.Delivery[enginecore.Header]) error {
			m.Count()
			if m.N() == 1 && *profile != "" {
				if prof, err = os.Create(*profile); err == nil {
					err = pprof.StartCPUProfile(prof)
				}
				if err != nil {
					return err
				}
			}
			if m.N() == *count {
				m.Stop()
				cancel()
			}
			return nil
		},
	})
	if err != nil {
		load.Fatal(err)
	}
	if err := l.Run(ctx); err != nil && !errors.Is(err, loop.ErrLoopClosed) {
		load.Fatal(err)
	}
	if prof != nil {
		pprof.StopCPUProfile()
		prof.Close()
	}
	load.PrintJSON(m.Result("pullprof"))
}
