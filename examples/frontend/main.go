// Command frontend is an API front-end subscribing to a DP coordinator's
// stats: the [waiting, running] queue lengths per engine that vLLM's
// front-ends use for load balancing, the current request wave, and whether
// the engines are running. When the engines are paused it wakes them, as a
// front-end does before it sends a request. Malformed publications are
// reported and skipped; they never end the subscription.
//
//	go run ./examples/frontend -demo      # runs its own coordinator and two engines
//	zmqguard coordinator --front tcp://127.0.0.1:5570 --back-output tcp://127.0.0.1:5571 \
//	    --back-publish tcp://127.0.0.1:5572 --engines 2 &
//	go run ./examples/frontend -front tcp://127.0.0.1:5570
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/dppeer"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "frontend:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	front := fs.String("front", "tcp://127.0.0.1:5570", "the coordinator's front publish endpoint")
	wake := fs.Bool("wake", true, "wake the engines whenever a publication says they are paused")
	withDemo := fs.Bool("demo", false, "run an in-process coordinator with two engines and subscribe to it")
	runFor := fs.Duration("for", 0, "stop after this long (0: until SIGINT/SIGTERM)")
	untilWaves := fs.Int("waves", 0, "stop after this many wave publications (0: no limit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(tint.NewTextHandler(stderr, &tint.Options{TimeFormat: time.TimeOnly, NoColor: !isTerminal(stderr)}))
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	opts := socket.DefaultOptions()
	opts.Logger = logger

	var wg sync.WaitGroup
	defer wg.Wait()
	if *withDemo {
		ep, stop, err := demo(ctx, &wg, logger)
		if err != nil {
			return err
		}
		defer stop()
		*front = ep
	}

	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: *front, Socket: opts})
	if err != nil {
		return err
	}
	defer fe.Close()
	logger.Info("subscribed to coordinator stats", "front", *front)
	woken := int64(-1)
	var stats, waves, bad int
	for {
		p, err := fe.Next(ctx)
		if err != nil {
			if decodeguard.IsBadInput(err) && ctx.Err() == nil {
				bad++
				logger.Warn("skipped a malformed publication", "reason", decodeguard.ReasonOf(err), "err", err)
				continue
			}
			break // ctx ended or the socket closed
		}
		if p.HasCounts {
			stats++
			logger.Info("engine loads", "counts", p.Counts(), "wave", p.Wave, "running", p.Running)
		} else {
			waves++
			logger.Info("wave changed", "wave", p.Wave, "running", p.Running)
			if *untilWaves > 0 && waves >= *untilWaves {
				break
			}
		}
		if *wake && !p.Running && p.Wave != woken {
			if err := fe.Wake(ctx, nil, int(p.Wave)); err == nil {
				woken = p.Wave
				logger.Info("woke the engines", "wave", p.Wave)
			}
		}
	}
	fmt.Fprintf(stdout, "%d stats publications, %d wave publications, %d malformed\n", stats, waves, bad)
	return nil
}

// demo starts a coordinator on loopback with two engines that push stats
// every 100 ms, engine 0 ending each wave after a second. It returns the
// coordinator's front endpoint and a function that stops everything.
func demo(ctx context.Context, wg *sync.WaitGroup, logger *slog.Logger) (string, func(), error) {
	quiet := socket.DefaultOptions()
	quiet.Logger = slog.New(slog.DiscardHandler)
	c, err := coordinator.New(coordinator.Config{
		Front: "tcp://127.0.0.1:0", BackOutput: "tcp://127.0.0.1:0", BackPublish: "tcp://127.0.0.1:0",
		Engines: 2, Logger: logger.With("service", "coordinator"), Socket: quiet,
	})
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { c.Run(ctx) })
	var engines []*dppeer.Engine
	stop := func() {
		cancel()
		for _, e := range engines {
			e.Close()
		}
		c.Close()
	}
	for i := range 2 {
		e, err := dppeer.DialEngine(dppeer.EngineConfig{
			BackPublish: c.BackPublishEndpoint(), BackOutput: c.BackOutputEndpoint(), Socket: quiet,
		})
		if err != nil {
			stop()
			return "", nil, err
		}
		engines = append(engines, e)
		wg.Go(func() {
			if e.WaitReady(ctx) != nil {
				return
			}
			var waveMu sync.Mutex
			wave, started := 0, time.Now()
			wg.Go(func() { // follow START_DP_WAVE
				for {
					w, _, err := e.NextStartWave(ctx)
					if err != nil && !decodeguard.IsBadInput(err) {
						return
					}
					waveMu.Lock()
					if err == nil && w > wave {
						wave, started = w, time.Now()
					}
					waveMu.Unlock()
				}
			})
			for step := 1; ctx.Err() == nil; step++ {
				waveMu.Lock()
				w, since := wave, time.Since(started)
				waveMu.Unlock()
				e.SendStats(ctx, i, (step+i)%5, 1+step%3, w, step)
				if i == 0 && since > time.Second {
					e.SendWaveComplete(ctx, 0, w)
					waveMu.Lock()
					started = time.Now().Add(time.Hour) // until the next START_DP_WAVE
					waveMu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	return c.FrontEndpoint(), stop, nil
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
