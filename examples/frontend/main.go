// Command frontend is an API front-end subscribing to a DP coordinator's
// stats: the [waiting, running] queue lengths per engine that vLLM's
// front-ends use for load balancing, the current request wave, and whether
// the engines are running. When the engines are paused it wakes them, as a
// front-end does before it sends a request. Malformed publications are
// reported and skipped; they never end the subscription.
//
// It uses only public packages: a socket.Socket (XSUB) for the front
// publish socket, the msgp runtime for the few msgpack values of the
// coordinator's wire, and, in the demo, enginecore.Encoder for the engines'
// EngineCoreOutputs.
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

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
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
	untilWaves := fs.Int("waves", 0, "stop after this many wave publications and at least one stats publication (0: no limit)")
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

	// A front-end's socket is an XSUB subscribed to everything: it receives
	// the publications and sends wake-ups on the same connection.
	sub, err := socket.New("XSUB", opts)
	if err != nil {
		return err
	}
	defer sub.Close()
	if err := sub.Subscribe(nil); err != nil {
		return err
	}
	if err := sub.Dial(*front); err != nil {
		return fmt.Errorf("dial the coordinator's front publish socket: %w", err)
	}
	logger.Info("subscribed to coordinator stats", "front", *front)
	woken := int64(-1)
	var stats, waves, bad int
	var buf []byte
	for {
		msg, err := sub.Recv(ctx)
		if err != nil {
			break // ctx ended or the socket closed
		}
		var p publication
		if len(msg.Frames) != 1 {
			err = decodeguard.NewError(decodeguard.ReasonEnvelope, "coordinator publication must be a single frame")
		} else {
			p, err = parsePublication(msg.Frames[0])
		}
		if err != nil {
			bad++
			logger.Warn("skipped a malformed publication", "reason", decodeguard.ReasonOf(err), "err", err)
			continue
		}
		if p.hasCounts {
			stats++
			logger.Info("engine loads", "counts", p.counts, "wave", p.wave, "running", p.running)
		} else {
			waves++
			logger.Info("wave changed", "wave", p.wave, "running", p.running)
		}
		if *untilWaves > 0 && waves >= *untilWaves && stats > 0 {
			break
		}
		if *wake && !p.running && p.wave != woken && sub.Stats().Peers > 0 {
			// (engine_to_exclude, wave): nil excludes no engine.
			buf = msgp.AppendArrayHeader(buf[:0], 2)
			buf = msgp.AppendNil(buf)
			buf = msgp.AppendInt64(buf, p.wave)
			if err := sub.Send(ctx, buf); err == nil {
				woken = p.wave
				logger.Info("woke the engines", "wave", p.wave)
			}
		}
	}
	fmt.Fprintf(stdout, "%d stats publications, %d wave publications, %d malformed\n", stats, waves, bad)
	return nil
}

// maxEngines bounds the engine count a publication may claim before
// anything is allocated for it (vLLM names an engine by 2 bytes).
const maxEngines = 1 << 16

// publication is one message of the coordinator's front publish socket:
// (counts, current_wave, engines_running), counts being nil at a wave change
// and otherwise one [waiting, running] (or [waiting, running,
// kv_cache_usage]) entry per engine.
type publication struct {
	hasCounts bool
	counts    [][2]int64 // [waiting, running] per engine
	wave      int64
	running   bool
}

// parsePublication reads b with the msgp runtime's bounds-checked readers;
// anything else than the expected shape is a classified decode error.
func parsePublication(b []byte) (publication, error) {
	var p publication
	bad := func(what string) (publication, error) {
		return publication{}, decodeguard.NewError(decodeguard.ReasonDecode, "publication: "+what)
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 3 {
		return bad("want a 3-element array")
	}
	if msgp.IsNil(rest) {
		rest = rest[1:]
	} else {
		var k uint32
		if k, rest, err = msgp.ReadArrayHeaderBytes(rest); err != nil {
			return bad("counts: want nil or an array")
		}
		if k > maxEngines || int(k) > len(rest) { // each entry takes at least a byte
			return bad(fmt.Sprintf("counts: %d engines", k))
		}
		p.hasCounts = true
		p.counts = make([][2]int64, 0, k)
		for range k {
			var m uint32
			if m, rest, err = msgp.ReadArrayHeaderBytes(rest); err != nil || m < 2 || m > 3 {
				return bad("engine entry: want [waiting, running] or [waiting, running, kv_cache_usage]")
			}
			var c [2]int64
			if c[0], rest, err = msgp.ReadInt64Bytes(rest); err != nil || c[0] < 0 {
				return bad("waiting: want a non-negative int")
			}
			if c[1], rest, err = msgp.ReadInt64Bytes(rest); err != nil || c[1] < 0 {
				return bad("running: want a non-negative int")
			}
			if m == 3 {
				if _, rest, err = msgp.ReadFloat64Bytes(rest); err != nil {
					return bad("kv_cache_usage: want a float")
				}
			}
			p.counts = append(p.counts, c)
		}
	}
	if p.wave, rest, err = msgp.ReadInt64Bytes(rest); err != nil || p.wave < 0 {
		return bad("current_wave: want a non-negative int")
	}
	if p.running, rest, err = msgp.ReadBoolBytes(rest); err != nil {
		return bad("engines_running: want a bool")
	}
	if len(rest) != 0 {
		return bad("bytes left after the 3 elements")
	}
	return p, nil
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
	var socks []*socket.Socket
	stop := func() {
		cancel()
		for _, s := range socks {
			s.Close()
		}
		c.Close()
	}
	for i := range 2 {
		// An engine subscribes to everything on the back publish socket
		// (XSUB) and pushes EngineCoreOutputs to the back output one.
		sub, err := socket.New("XSUB", quiet)
		if err == nil {
			socks = append(socks, sub)
			if err = sub.Subscribe(nil); err == nil {
				err = sub.Dial(c.BackPublishEndpoint())
			}
		}
		var push *socket.Socket
		if err == nil {
			if push, err = socket.New("PUSH", quiet); err == nil {
				socks = append(socks, push)
				err = push.Dial(c.BackOutputEndpoint())
			}
		}
		if err != nil {
			stop()
			return "", nil, err
		}
		wg.Go(func() { runEngine(ctx, i, sub, push) })
	}
	return c.FrontEndpoint(), stop, nil
}

// runEngine plays engine i: it waits for the coordinator's READY, then
// pushes its stats every 100 ms; engine 0 ends the wave a second after it
// started (wave_complete), and every START_DP_WAVE starts the wave it names.
func runEngine(ctx context.Context, i int, sub, push *socket.Socket) {
	ready := make(chan struct{})
	startWave := make(chan int64, 16)
	var recv sync.WaitGroup
	defer recv.Wait() // it ends with ctx, as this function does
	recv.Go(func() {  // the back publish socket: READY, then ("\x02", (wave, exclude))
		for {
			msg, err := sub.Recv(ctx)
			if err != nil {
				return
			}
			f := msg.Frames
			switch {
			case len(f) == 1 && string(f[0]) == "READY":
				select {
				case <-ready:
				default:
					close(ready)
				}
			case len(f) == 2 && string(f[0]) == "\x02":
				if n, rest, err := msgp.ReadArrayHeaderBytes(f[1]); err == nil && n == 2 {
					if w, _, err := msgp.ReadInt64Bytes(rest); err == nil && w >= 0 {
						select {
						case startWave <- w:
						default:
						}
					}
				}
			}
		}
	})
	select {
	case <-ready:
	case <-ctx.Done():
		return
	}
	var enc enginecore.Encoder
	epoch := time.Now()
	send := func(h enginecore.Header) {
		h.EngineIndex = int64(i)
		h.Timestamp = 1000 + time.Since(epoch).Seconds() // vLLM sends time.monotonic()
		push.Send(ctx, enc.Encode(&enginecore.Message{Header: h})...)
	}
	wave, started := int64(0), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for step := int64(1); ; step++ {
		send(enginecore.Header{HasStats: true, Stats: enginecore.SchedulerStats{
			NumWaitingReqs: (step + int64(i)) % 5, NumRunningReqs: 1 + step%3, CurrentWave: wave, StepCounter: step}})
		if i == 0 && time.Since(started) > time.Second {
			send(enginecore.Header{HasWaveComplete: true, WaveComplete: wave})
			started = time.Now().Add(time.Hour) // until the next START_DP_WAVE
		}
		select {
		case <-ctx.Done():
			return
		case w := <-startWave:
			if w > wave {
				wave, started = w, time.Now()
			}
		case <-tick.C:
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
