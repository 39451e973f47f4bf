// Command pullconsumer is a guarded PULL consumer: the receive loop a
// front-end runs on an engine's output socket, where vLLM's client died on a
// scanner's single "\x45" frame. A SafeLoop receives from a hardened PULL,
// decodes each frame as vLLM's EngineCoreOutputs with the guarded decoder, and
// hands only valid messages to the handler; everything else is dropped,
// counted by reason and logged rate-limited, as hex.
//
//	go run ./examples/pullconsumer -demo -messages 8   # feeds itself valid and hostile frames
//	go run ./examples/pullconsumer -bind tcp://127.0.0.1:5570
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "pullconsumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pullconsumer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bind := fs.String("bind", "tcp://127.0.0.1:5570", "PULL endpoint to bind (engines push EngineCoreOutputs to it)")
	withDemo := fs.Bool("demo", false, "also push sample valid and hostile frames to -bind")
	runFor := fs.Duration("for", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	stopAfter := fs.Uint64("messages", 0, "stop after this many messages, valid or dropped (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(tint.NewTextHandler(stderr, &tint.Options{TimeFormat: time.TimeOnly, NoColor: !isTerminal(stderr)}))
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seen atomic.Uint64 // messages handled or dropped, for -messages
	count := func() {
		if n := seen.Add(1); *stopAfter > 0 && n >= *stopAfter {
			cancel()
		}
	}

	opts := socket.DefaultOptions()
	opts.Logger = logger
	pull, err := socket.New("PULL", opts)
	if err != nil {
		return err
	}
	defer pull.Close()
	if err := pull.Bind(*bind); err != nil {
		return err
	}

	// The handler sees only messages that decoded and validated; the loop
	// reuses one EngineCoreOutputs for all of them.
	l, err := loop.New(pull, loop.Config[enginecore.Header]{
		Name:   "engine-outputs",
		Logger: logger,
		Decode: func(frames [][]byte, dst *enginecore.Header) error {
			if len(frames) != 1 {
				return decodeguard.NewError(decodeguard.ReasonEnvelope, "want one frame")
			}
			return enginecore.DecodeHeader(frames[0], nil, dst)
		},
		Handler: func(_ context.Context, d loop.Delivery[enginecore.Header]) error {
			m := d.Value
			if m.HasStats {
				logger.Info("engine stats", "engine", m.EngineIndex, "waiting", m.Stats.NumWaitingReqs,
					"running", m.Stats.NumRunningReqs, "wave", m.Stats.CurrentWave, "peer", d.Msg.Peer)
			}
			count()
			return nil
		},
		OnDrop: func(loop.Drop) { count() },
	})
	if err != nil {
		return err
	}
	if *withDemo {
		var wg sync.WaitGroup
		dctx, cancel := context.WithCancel(ctx)
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { demo(dctx, pull.Endpoint()) })
	}
	logger.Info("consuming EngineCoreOutputs", "endpoint", pull.Endpoint())
	err = l.Run(ctx)
	st := l.Stats()
	fmt.Fprintf(stdout, "received %d, valid %d, dropped %d", st.Received, st.Delivered, st.Dropped.Total())
	for _, r := range decodeguard.Reasons() {
		if st.Dropped[r] > 0 {
			fmt.Fprintf(stdout, " %s=%d", r, st.Dropped[r])
		}
	}
	fmt.Fprintln(stdout)
	if errors.Is(err, loop.ErrLoopClosed) {
		err = nil
	}
	return err
}

// demo pushes, every 200 ms, one valid stats message and the frames that
// killed vLLM's receive loops: a bare int, invalid UTF-8, a map keyed by a
// map, an array claiming 2^32-1 elements.
func demo(ctx context.Context, ep string) {
	opts := socket.DefaultOptions()
	opts.Logger = slog.New(slog.DiscardHandler)
	push, err := socket.New("PUSH", opts)
	if err != nil {
		return
	}
	defer push.Close()
	push.Dial(ep)
	hostile := [][]byte{{0x45}, {0xa3, 0xe0, 0x80, 0x80}, {0x81, 0x80, 0x01}, {0xdd, 0xff, 0xff, 0xff, 0xff}}
	// The Encoder writes EngineCoreOutputs byte for byte as vLLM's engine
	// core does; a stats-only message is one frame.
	var enc enginecore.Encoder
	for step := 1; ctx.Err() == nil; step++ {
		m := enginecore.Message{Header: enginecore.Header{
			EngineIndex: int64(step % 2), HasStats: true, Timestamp: float64(step),
			Stats: enginecore.SchedulerStats{NumWaitingReqs: int64(step % 7), NumRunningReqs: int64(step % 3), StepCounter: int64(step)},
		}}
		push.Send(ctx, enc.Encode(&m)...)
		push.Send(ctx, hostile[step%len(hostile)])
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// isTerminal reports whether w is a terminal, for tint's colours.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
