package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/hostile"
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

// runDemo is the run function of demo: it checks the flags and
// the arguments (e.args), then does the work.
func runDemo(ctx context.Context, fl *demoFlags, e *env) error {
	if len(e.args) > 0 {
		return usagef("unexpected argument %q", e.args[0])
	}
	if fl.duration <= 0 {
		return usagef("--duration must be positive")
	}
	if fl.clients < 1 || fl.clients > 8 {
		return usagef("--clients must be in [1, 8]")
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
	sockOpts.Logger = sockLogger.With("component", "peers")
	coordSock := socket.DefaultOptions()
	coordSock.Logger = sockLogger.With("component", "coordinator")
	lisSock := socket.DefaultOptions()
	lisSock.Logger = sockLogger.With("component", "handshake")

	coord, err := coordinator.New(coordinator.Config{
		Front:       "tcp://127.0.0.1:0",
		BackOutput:  "tcp://127.0.0.1:0",
		BackPublish: "tcp://127.0.0.1:0",
		Engines:     demoEngines,
		Release:     release,
		Socket:      coordSock,
		Logger:      logger.With("component", "coordinator"),
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
		Logger:       logger.With("component", "handshake"),
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
	kv, err := startDemoKV(logger.With("component", "kv-events"), sockOpts)
	if err != nil {
		return err
	}
	defer kv.close()
	kvi := startDemoKVIndex(logger.With("component", "kv-index"), sockOpts)

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
		eng, err := coordinator.DialEngine(coordinator.EngineConfig{
			BackPublish: coord.BackPublishEndpoint(), BackOutput: coord.BackOutputEndpoint(), Socket: sockOpts,
		})
		if err != nil {
			return err
		}
		defer eng.Close()
		helperWG.Go(func() { demoEngine(runCtx, eng, i, release, &c) })
	}
	fe, err := coordinator.DialFrontEnd(coordinator.FrontEndConfig{Front: coord.FrontEndpoint(), Socket: sockOpts})
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

// guarded runs f, turning a panic into an error (with the stack logged), so
// that a crashing component is counted rather than taking the demo down
// without its table.
func guarded(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			slog.Error("component panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// demoEngine plays one DP engine: it waits for READY, pushes stats every
// 20 ms, follows START_DP_WAVE broadcasts, and (engine 0) reports the end of
// each wave a second after it started, so the front-end wakes the next one.
// Under releases where a wake no longer sets running (vLLM PR #51481),
// engine 0 also reports each wave's start with start_wave, as DP rank 0
// does.
func demoEngine(ctx context.Context, eng *coordinator.Engine, idx int, release vllm.Release, c *demoCounters) {
	reportStart := idx == 0 && !release.Rules().WakeSetsRunning
	reported := int64(-1)
	if err := eng.WaitReady(ctx); err != nil {
		return
	}
	var wave atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			w, _, err := eng.NextStartWave(ctx)
			if err != nil {
				if decodeguard.IsBadInput(err) && ctx.Err() == nil {
					continue
				}
				return
			}
			c.startWaves.Add(1)
			if int64(w) > wave.Load() {
				wave.Store(int64(w))
			}
			if reportStart && int64(w) > reported && eng.SendStartWave(ctx, 0, w) == nil {
				reported = int64(w)
				c.engineMsgs.Add(1)
			}
		}
	})
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	cur, step, completed := wave.Load(), 0, int64(-1)
	waveStart := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w := wave.Load(); w != cur {
			cur, step, waveStart = w, 0, time.Now()
		}
		step++
		waiting, running := (step*7+idx*3)%11, (step+idx)%5+1
		if eng.SendStats(ctx, idx, waiting, running, int(cur), step) == nil {
			c.engineMsgs.Add(1)
		}
		if idx == 0 && completed < cur && time.Since(waveStart) > time.Second {
			if eng.SendWaveComplete(ctx, 0, int(cur)) == nil {
				c.engineMsgs.Add(1)
				completed = cur
			}
		}
	}
}

// demoFrontEnd plays the API front-end: it reads every publication and wakes
// the engines whenever they are paused.
func demoFrontEnd(ctx context.Context, fe *coordinator.FrontEnd, c *demoCounters) {
	woken := int64(-1)
	for {
		p, err := fe.Next(ctx)
		if err != nil {
			if decodeguard.IsBadInput(err) && ctx.Err() == nil {
				continue
			}
			return
		}
		c.publications.Add(1)
		if !p.Running && p.Wave != woken {
			if fe.Wake(ctx, nil, int(p.Wave)) == nil {
				woken = p.Wave
				c.wakes.Add(1)
			}
		}
	}
}

// demoClient plays one decode worker fetching metadata in a loop: V3 for
// tp rank i%2 (the third client asks in the V2 form); the last client asks
// every tenth time for a rank the listener does not serve and expects the
// explicit rejection.
func demoClient(ctx context.Context, ep string, i, n int, opts handshake.ClientOptions, c *demoCounters, logger *slog.Logger) {
	for k := 1; ctx.Err() == nil; k++ {
		req := handshake.Request{Variant: handshake.V3, TP: i % demoTP}
		if i == 2 {
			req.Variant = handshake.V2
		}
		unserved := i == n-1 && k%10 == 0
		if unserved {
			req.TP = 7
		}
		_, err := handshake.Fetch(ctx, ep, req, opts)
		if ctx.Err() != nil {
			return
		}
		switch {
		case unserved && errors.Is(err, handshake.ErrRejected):
			c.rejected.Add(1)
		case !unserved && err == nil:
			c.fetchOK.Add(1)
		default:
			c.fetchFail.Add(1)
			logger.Warn("handshake failed", "client", i, "rank", handshake.Rank{PP: req.PP, TP: req.TP}, "err", err)
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// demoStatus renders the live one-line status.
func demoStatus(elapsed, total time.Duration, cs coordinator.Stats, ls handshake.ListenerStats, c *demoCounters) string {
	lsViol := coordinator.Drops(ls.Socket.Violations)
	drops := cs.Dropped + cs.Violations.Total() + ls.Loop.TotalDropped() + lsViol.Total()
	return fmt.Sprintf("demo %s/%s | coordinator %d outputs, %d pubs, wave %d | handshakes %d | scanner %d probes, %d deaths | drops %d | crashes %d",
		elapsed.Truncate(time.Second), total, cs.BackOutput.Accepted, cs.StatsPublished+cs.WavePublished, cs.Wave,
		c.fetchOK.Load(), c.probes.Load(), c.deaths.Load(), drops, c.crashes.Load())
}

// writeDemoTable prints the final table.
func writeDemoTable(w io.Writer, elapsed time.Duration, front, backOut, backPub, hs string, answers []bool,
	cs coordinator.Stats, ls handshake.ListenerStats, c *demoCounters, rep *hostile.Report) {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "NO"
	}
	probes := c.probes.Load()
	fmt.Fprintf(w, "zmqguard demo: %s on loopback; the built-in scanner sent %d hostile probes at 4 ports\n\n",
		elapsed.Round(100*time.Millisecond), probes)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMPONENT\tENDPOINT\tMESSAGES SERVED\tSENT\tMSGS DROPPED\tCONNS REFUSED\tANSWERS AT END")
	row := func(name, ep string, served, sent, dropped, refused uint64, ans bool) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", name, ep, served, sent, dropped, refused, yes(ans))
	}
	lsViol := coordinator.Drops(ls.Socket.Violations)
	row("coordinator front (XPUB)", front, cs.Front.Accepted, cs.Front.Sent, cs.Front.Dropped, cs.Front.Violations.Total(), answers[0])
	row("coordinator back-output (PULL)", backOut, cs.BackOutput.Accepted, cs.BackOutput.Sent, cs.BackOutput.Dropped, cs.BackOutput.Violations.Total(), answers[1])
	row("coordinator back-publish (XPUB)", backPub, cs.BackPublish.Accepted, cs.BackPublish.Sent, cs.BackPublish.Dropped, cs.BackPublish.Violations.Total(), answers[2])
	row("handshake listener (ROUTER)", hs, ls.TotalServed(), ls.Socket.Sent, ls.Loop.TotalDropped(), lsViol.Total(), answers[3])
	tw.Flush()

	fmt.Fprintln(w, "\nDrops by reason (messages dropped + connections refused):")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REASON\tFRONT\tBACK-OUTPUT\tBACK-PUBLISH\tHANDSHAKE\tTOTAL")
	cols := []coordinator.Drops{
		sumDrops(cs.Front.Drops, cs.Front.Violations),
		sumDrops(cs.BackOutput.Drops, cs.BackOutput.Violations),
		sumDrops(cs.BackPublish.Drops, cs.BackPublish.Violations),
		sumDrops(coordinator.Drops(ls.Loop.Dropped), lsViol),
	}
	var grand uint64
	for _, r := range decodeguard.Reasons() {
		var total uint64
		for _, col := range cols {
			total += col[r]
		}
		if total == 0 {
			continue
		}
		grand += total
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", r, cols[0][r], cols[1][r], cols[2][r], cols[3][r], total)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\n", cols[0].Total(), cols[1].Total(), cols[2].Total(), cols[3].Total(), grand)
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "coordinator:\t%d engine outputs taken, %d stats and %d wave publications, %d READY and %d START_DP_WAVE sent, wave %d\n",
		cs.StatsApplied, cs.StatsPublished, cs.WavePublished, cs.ReadySent, cs.StartWaveSent, cs.Wave)
	fmt.Fprintf(tw, "front-end:\t%d publications received, %d wake-ups sent\n", c.publications.Load(), c.wakes.Load())
	fmt.Fprintf(tw, "engines:\t%d messages pushed, %d START_DP_WAVE received\n", c.engineMsgs.Load(), c.startWaves.Load())
	fmt.Fprintf(tw, "handshakes completed:\t%d (V1 %d, V2 %d, V3 %d served); %d unserved-rank requests rejected as expected; %d failed\n",
		c.fetchOK.Load(), ls.Served[handshake.V1], ls.Served[handshake.V2], ls.Served[handshake.V3], c.rejected.Load(), c.fetchFail.Load())
	passes := 0
	if rep != nil && len(rep.Passes) > 0 {
		passes = rep.Passes[0]
		for _, p := range rep.Passes {
			passes = min(passes, p)
		}
	}
	fmt.Fprintf(tw, "hostile probes:\t%d sent (%d complete pass(es) over the corpus per port); %s\n",
		probes, passes, deathsText(c.deaths.Load()))
	fmt.Fprintf(tw, "crashes:\t%d\n", c.crashes.Load())
	tw.Flush()
	if rep != nil && !rep.OK() {
		fmt.Fprintln(w, "\nProbes after which a port stopped answering:")
		var b strings.Builder
		for _, r := range rep.Results {
			if !r.Alive() {
				fmt.Fprintf(&b, "  %s %s: %s\n", r.Target, r.Probe, r.LastError)
			}
		}
		io.WriteString(w, b.String())
	}
}

func sumDrops(a, b coordinator.Drops) coordinator.Drops {
	for i := range a {
		a[i] += b[i]
	}
	return a
}
