package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

var demoSpec = commandSpec{
	name:     "demo",
	synopsis: "[--duration 10s] [--vllm-version latest] [--metrics-addr HOST:PORT]",
	summary:  "the product tour: the references on loopback under attack, counters at the end",
	help: `Starts, on loopback ephemeral ports, a DP coordinator with 2 engines and 1
API front-end, and a NIXL handshake listener with decode clients fetching
metadata in a loop; and the built-in hostile scanner attacking all four bound
ports (coordinator front, back output and back publish; handshake listener)
for the whole duration. Beside them, a KV-cache index (kv-index) follows
two engines' KV-event publishers and must route each prompt to the engine
holding its prefix through a publisher restart and a lost range. A live
one-line status goes to stderr.

At the end it checks that every component still answers, and prints a table
on stdout: messages served per component, drops by reason, handshakes
completed, crashes, and the KV-event and kv-index lines. Exits 0 when every
component still answers, nothing crashed and the index routed correctly.

` + metricsHelp,
}

// demoCounters are the demo's live counters, updated by its helpers.
type demoCounters struct {
	engineMsgs   atomic.Uint64 // messages the engines pushed
	publications atomic.Uint64 // publications the front-end received
	wakes        atomic.Uint64 // wake-ups the front-end sent
	startWaves   atomic.Uint64 // START_DP_WAVE broadcasts the engines received
	fetchOK      atomic.Uint64 // handshakes completed
	fetchFail    atomic.Uint64 // handshakes that failed unexpectedly
	rejected     atomic.Uint64 // requests for an unserved rank, rejected as expected
	probes       atomic.Uint64 // hostile probes delivered
	deaths       atomic.Uint64 // probes after which a target did not answer
	crashes      atomic.Uint64 // components that stopped or panicked
}

const (
	demoEngineID = "demo-prefill-0"
	demoEngines  = 2
	demoTP       = 2
)

// demoFlags are the flags of demo.
type demoFlags struct {
	duration time.Duration
	clients  int
	mo       *metricsOptions
	release  *vllm.Release
}

// demoCmd is the demo command.
var demoCmd = command[demoFlags]{
	spec: demoSpec,
	register: func(fs *flag.FlagSet, fl *demoFlags) {
		fs.DurationVar(&fl.duration, "duration", 10*time.Second, "how long the demo runs")
		fs.IntVar(&fl.clients, "clients", 3, "number of decode clients fetching handshake metadata in a loop (1-8)")
		fl.mo = addMetricsFlags(fs)
		fl.release = releaseFlag(fs)
	},
	run: runDemo,
}

// runDemo is the run function of demo: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runDemo(ctx context.Context, fl *demoFlags, e *env) error {
	if fl.duration <= 0 {
		return badFlag("--duration", fl.duration, "want a positive duration")
	}
	if fl.clients < 1 || fl.clients > 8 {
		return badFlag("--clients", fl.clients, "want 1..8")
	}
	if err := fl.mo.check(); err != nil {
		return err
	}
	return demo(ctx, e, fl.duration, fl.clients, fl.mo, *fl.release)
}

// demo runs the tour and prints the final table.
func demo(ctx context.Context, e *env, duration time.Duration, clients int, mo *metricsOptions, release vllm.Release) error {
	sw := &statusWriter{w: e.stderr, term: e.term, json: strings.EqualFold(e.logFormat, "json")}
	logger, err := newLogger(sw, e.logFormat, e.logLevel, e.term)
	if err != nil {
		return err
	}
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(logger)
	var c demoCounters
	hash := demoHashFor(release)
	start := time.Now()

	// The components run until the final checks are done; the helpers and
	// the scanner until the duration is over (or a signal).
	compCtx, compCancel := context.WithCancel(context.Background())
	defer compCancel()
	runCtx, runCancel := context.WithTimeout(ctx, duration)
	defer runCancel()
	var compWG, helperWG sync.WaitGroup

	// The socket layer logs every refused connection; under a scanner that
	// drowns the loops' rate-limited drop lines, so below debug level only
	// its errors are shown (the counts are all in the final table).
	sockLogger := logger
	if lvl, _ := parseLevel(e.logLevel); lvl > slog.LevelDebug {
		if sockLogger, err = newLogger(sw, e.logFormat, "error", e.term); err != nil {
			return err
		}
	}
	sockOpts := socket.DefaultOptions()
	sockOpts.Logger = sockLogger.With(ratelog.KeyService, "peers")
	coordSock := socket.DefaultOptions()
	coordSock.Logger = sockLogger.With(ratelog.KeyService, "coordinator")
	lisSock := socket.DefaultOptions()
	lisSock.Logger = sockLogger.With(ratelog.KeyService, "handshake")

	coord, err := coordinator.New(coordinator.Config{
		Front:       "tcp://127.0.0.1:0",
		BackOutput:  "tcp://127.0.0.1:0",
		BackPublish: "tcp://127.0.0.1:0",
		Engines:     demoEngines,
		Release:     release,
		Socket:      coordSock,
		Logger:      logger.With(ratelog.KeyService, "coordinator"),
		LogInterval: 5 * time.Second,
	})
	if err != nil {
		return err
	}
	defer coord.Close()
	payloads, err := demoPayloads(demoEngineID, hash, release, 1, demoTP)
	if err != nil {
		return err
	}
	lis, err := handshake.NewListener(handshake.ListenerConfig{
		Endpoint:     "tcp://127.0.0.1:0",
		Payloads:     payloads,
		ErrorReplies: true,
		Socket:       lisSock,
		Logger:       logger.With(ratelog.KeyService, "handshake"),
	})
	if err != nil {
		return err
	}
	defer lis.Close()
	ms, err := startMetrics(mo, logger, func(c *zgprom.Collector) error {
		if err := c.AddCoordinator("", coord); err != nil {
			return err
		}
		return c.AddHandshakeListener("handshake", lis)
	})
	if err != nil {
		return err
	}
	defer ms.Close()
	kv, err := startDemoKV(logger.With(ratelog.KeyService, "kv-events"), sockOpts)
	if err != nil {
		return err
	}
	defer kv.close()
	kvi := startDemoKVIndex(logger.With(ratelog.KeyService, "kv-index"), sockOpts)

	// running reports whether a component's Run/Serve is still going.
	var coordRunning, lisRunning atomic.Bool
	coordRunning.Store(true)
	lisRunning.Store(true)
	component := func(name string, running *atomic.Bool, run func() error) {
		compWG.Go(func() {
			err := guarded(run)
			running.Store(false)
			if compCtx.Err() == nil {
				c.crashes.Add(1)
				logger.Error("component stopped before the end", "component", name, "err", err)
			}
		})
	}
	component("coordinator", &coordRunning, func() error { return coord.Run(compCtx) })
	component("handshake listener", &lisRunning, func() error { return lis.Serve(compCtx) })

	targets := []struct {
		name, ep string
		typ      zmq4.SocketType
	}{
		{"coordinator front (XPUB)", coord.FrontEndpoint(), zmq4.XPub},
		{"coordinator back-output (PULL)", coord.BackOutputEndpoint(), zmq4.Pull},
		{"coordinator back-publish (XPUB)", coord.BackPublishEndpoint(), zmq4.XPub},
		{"handshake listener (ROUTER)", lis.Endpoint(), zmq4.Router},
	}
	logger.Info("demo started", append([]any{"duration", duration,
		"front", targets[0].ep, "back_output", targets[1].ep, "back_publish", targets[2].ep, "handshake", targets[3].ep},
		ms.logAttrs()...)...)

	// Engines and the front-end.
	for i := range demoEngines {
		eng, err := dppeer.DialEngine(dppeer.EngineConfig{
			BackPublish: coord.BackPublishEndpoint(), BackOutput: coord.BackOutputEndpoint(), Socket: sockOpts,
		})
		if err != nil {
			return err
		}
		defer eng.Close()
		helperWG.Go(func() { demoEngine(runCtx, eng, i, release, &c) })
	}
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: coord.FrontEndpoint(), Socket: sockOpts})
	if err != nil {
		return err
	}
	defer fe.Close()
	helperWG.Go(func() { demoFrontEnd(runCtx, fe, &c) })

	// Decode clients.
	clientOpts := handshake.ClientOptions{
		Timeout: 3 * time.Second, ExpectedHash: hash, ExpectedEngineID: demoEngineID, Socket: sockOpts,
	}
	for i := range clients {
		helperWG.Go(func() { demoClient(runCtx, lis.Endpoint(), i, clients, clientOpts, &c, logger) })
	}

	// The scanner, at all four ports.
	eps := make([]string, len(targets))
	for i, t := range targets {
		eps[i] = t.ep
	}
	var scanRep *hostile.Report
	helperWG.Go(func() {
		scanRep, _ = hostile.Scan(runCtx, eps, hostile.ScanConfig{
			Duration: 24 * time.Hour, // until runCtx ends
			Options:  hostile.Options{Hold: 300 * time.Millisecond, Timeout: 5 * time.Second},
			OnProbe: func(ev hostile.Event) {
				c.probes.Add(1)
				if !ev.Alive {
					c.deaths.Add(1)
					logger.Error("a component stopped answering", "target", ev.Target, "probe", ev.Probe.Name, "err", ev.AliveErr)
				}
			},
		})
	})

	helperWG.Go(func() { kv.run(runCtx) })

	// Live status until the duration is over.
	every := time.Second
	if e.term {
		every = 250 * time.Millisecond
	}
	tick := time.NewTicker(every)
	for running := true; running; {
		select {
		case <-runCtx.Done():
			running = false
		case <-tick.C:
			sw.Set(demoStatus(time.Since(start), duration, coord.Stats(), lis.Stats(), &c))
		}
	}
	tick.Stop()
	sw.Set(demoStatus(time.Since(start), duration, coord.Stats(), lis.Stats(), &c))
	sw.Done()
	if ctx.Err() != nil {
		logger.Info("interrupted: stopping early")
	}
	helperWG.Wait()
	elapsed := time.Since(start)

	// Final checks: every port completes a fresh handshake, the listener
	// still serves metadata, and both runtimes are still running.
	answers := make([]bool, len(targets))
	for i, t := range targets {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := hostile.Alive(cctx, t.ep, t.typ, 5*time.Second)
		cancel()
		answers[i] = err == nil
		if err != nil {
			logger.Error("component does not answer at the end", "component", t.name, "err", err)
		}
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, ferr := handshake.Fetch(fctx, lis.Endpoint(), handshake.Request{Variant: handshake.V3, TP: 1}, clientOpts)
	fcancel()
	if ferr != nil {
		logger.Error("the handshake listener does not serve metadata at the end", "err", ferr)
	} else {
		c.fetchOK.Add(1)
	}
	stillRunning := coordRunning.Load() && lisRunning.Load()
	kvOK := kv.check()
	kviOK := kvi.wait()

	cst, lst := coord.Stats(), lis.Stats()
	compCancel()
	compWG.Wait()

	writeDemoTable(e.stdout, elapsed, targets[0].ep, targets[1].ep, targets[2].ep, targets[3].ep, answers, cst, lst, &c, scanRep)
	kv.writeLine(e.stdout, kvOK)
	kvi.writeLine(e.stdout, kviOK)

	ok := ferr == nil && stillRunning && kvOK && kviOK && c.crashes.Load() == 0 && c.deaths.Load() == 0
	for _, a := range answers {
		ok = ok && a
	}
	if !ok {
		return errors.New("a component stopped answering or crashed (see the table and the log)")
	}
	return nil
}
