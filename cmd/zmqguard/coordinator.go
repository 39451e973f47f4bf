package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/vllm"
)

var coordinatorSpec = commandSpec{
	name: "coordinator",
	synopsis: "--front ADDR --back-output ADDR --back-publish ADDR --engines N [--allow CIDR,...] " +
		"[--stats-interval 100ms] [--idle-interval 5s] [--max-message-size 1MiB] [--vllm-version latest] " +
		"[--max-engines N] [--scale-from IP,...] [--ready-interval 100ms] [--debug-addr HOST:PORT] [--metrics-addr HOST:PORT]",
	summary: "run a vLLM-compatible DP coordinator until SIGINT/SIGTERM",
	help: `Binds the three sockets of vLLM's data-parallel coordinator (front publish XPUB
for the API front-ends, back output PULL and back publish XPUB for the engines),
waits for one subscription per engine, sends READY, then collects the engines'
stats, publishes them to the front-ends and keeps the request waves in step.
Bad input on any socket is dropped and counted; nothing a peer sends stops it.

On SIGINT or SIGTERM it exits 0 after printing its counters (drops by reason
included) as one JSON line on stdout: the totals, the same figures per socket
(front, back_output, back_publish, each with dropped_hwm: publications
dropped for a subscriber whose queue was full), failed accepts summed over
the three sockets (accept_errors, e.g. EMFILE), engines that went silent
(silent_engines: heartbeat disconnects per engine_index on back_output and
back_publish, [] when none; silent_unknown: those not tied to one engine)
and goroutines.

` + debugHelp + "\n\n" + metricsHelp,
}

// coordinatorReport is the JSON line coordinator prints at exit: the
// library's counters with their own field names, plus what the process adds.
type coordinatorReport struct {
	coordinator.Stats
	// AcceptErrors counts failed accepts on the three sockets (each followed
	// by a back-off), e.g. EMFILE.
	AcceptErrors uint64 `json:"accept_errors"`
	// HeartbeatTimeouts counts peers (engines, front-ends) disconnected
	// because they went silent past the heartbeat rules, in total and by
	// socket (front, back_output, back_publish).
	HeartbeatTimeouts         uint64            `json:"heartbeat_timeouts"`
	HeartbeatTimeoutsBySocket map[string]uint64 `json:"heartbeat_timeouts_by_socket"`
	// SilentEngines is Stats.SilentEngines, always present in the line
	// ([] when no engine went silent) so that a reader can tell "none"
	// from a binary that does not report it; it shadows the embedded
	// field, which is omitted when empty.
	SilentEngines []coordinator.EngineSilence `json:"silent_engines"`
	// Goroutines is runtime.NumGoroutine() when the report was made: at
	// exit, after the coordinator and the debug endpoint were closed.
	Goroutines int `json:"goroutines"`
}

// newCoordinatorReport wraps st; the caller sets Goroutines.
func newCoordinatorReport(st coordinator.Stats) coordinatorReport {
	silent := st.SilentEngines
	if silent == nil {
		silent = []coordinator.EngineSilence{}
	}
	return coordinatorReport{
		Stats:         st,
		SilentEngines: silent,
		AcceptErrors:  st.Front.Socket.AcceptErrors + st.BackOutput.Socket.AcceptErrors + st.BackPublish.Socket.AcceptErrors,
		HeartbeatTimeouts: st.Front.Socket.HeartbeatTimeouts + st.BackOutput.Socket.HeartbeatTimeouts +
			st.BackPublish.Socket.HeartbeatTimeouts,
		HeartbeatTimeoutsBySocket: map[string]uint64{
			"front":        st.Front.Socket.HeartbeatTimeouts,
			"back_output":  st.BackOutput.Socket.HeartbeatTimeouts,
			"back_publish": st.BackPublish.Socket.HeartbeatTimeouts,
		},
	}
}

// coordinatorFlags are the flags of coordinator.
type coordinatorFlags struct {
	front         string
	backOut       string
	backPub       string
	engines       int
	statsInterval time.Duration
	idleInterval  time.Duration
	maxMsg        sizeValue
	startup       time.Duration
	release       *vllm.Release
	readyInterval time.Duration
	maxEngines    int
	scaleFrom     string
	dbg           *debugOptions
	mo            *metricsOptions
	curve         *curveServerFlags
	allow         *allowFlag
	live          *livenessFlags
}

// coordinatorCmd is the coordinator command.
var coordinatorCmd = command[coordinatorFlags]{
	spec: coordinatorSpec,
	register: func(fs *flag.FlagSet, fl *coordinatorFlags) {
		fs.StringVar(&fl.front, "front", "", "front publish (XPUB) endpoint to bind, for API front-ends (required)")
		fs.StringVar(&fl.backOut, "back-output", "", "back output (PULL) endpoint to bind, for engine outputs (required)")
		fs.StringVar(&fl.backPub, "back-publish", "", "back publish (XPUB) endpoint to bind, for READY and START_DP_WAVE (required)")
		fs.IntVar(&fl.engines, "engines", 0, "data-parallel size: the number of engines (required)")
		fs.DurationVar(&fl.statsInterval, "stats-interval", 100*time.Millisecond, "stats publication period while stats change")
		fs.DurationVar(&fl.idleInterval, "idle-interval", 5*time.Second, "stats publication period when nothing changes")
		fl.maxMsg = sizeValue(1 << 20)
		fs.Var(&fl.maxMsg, "max-message-size", "largest message accepted on any socket, a `size` such as 1048576, 1MiB or 64KiB")
		fs.DurationVar(&fl.startup, "startup-deadline", 0, "give up if the engines have not all subscribed by then (0: wait for ever, as vLLM)")
		fl.release = releaseFlag(fs)
		fs.DurationVar(&fl.readyInterval, "ready-interval", 100*time.Millisecond, "shortest time between two READY broadcasts after start-up (negative: one READY per subscription, as vLLM)")
		fs.IntVar(&fl.maxEngines, "max-engines", 0, "largest engine count SCALE_ELASTIC_EP may set (0: 4 x --engines, at least 8)")
		fs.StringVar(&fl.scaleFrom, "scale-from", "", "comma-separated IP addresses of the only front-ends allowed to send SCALE_ELASTIC_EP (default: any)")
		fl.dbg = addDebugFlags(fs)
		fl.mo = addMetricsFlags(fs)
		fl.curve = addCurveServerFlags(fs)
		fl.allow = addAllowFlag(fs)
		fl.live = addLivenessFlags(fs)
	},
	run: runCoordinator,
}

// runCoordinator is the run function of coordinator: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runCoordinator(ctx context.Context, fl *coordinatorFlags, e *env) error {
	if fl.front == "" || fl.backOut == "" || fl.backPub == "" {
		return usagef("--front, --back-output and --back-publish are required")
	}
	if fl.engines < 1 || fl.engines > maxStartEngines {
		return badFlag("--engines", fl.engines, fmt.Sprintf("want 1..%d", maxStartEngines))
	}
	if fl.statsInterval <= 0 {
		return badFlag("--stats-interval", fl.statsInterval, "want a positive duration")
	}
	if fl.idleInterval <= 0 {
		return badFlag("--idle-interval", fl.idleInterval, "want a positive duration")
	}
	if fl.startup < 0 {
		return badFlag("--startup-deadline", fl.startup, "must not be negative")
	}
	if fl.maxMsg < 64 {
		return badFlag("--max-message-size", shown(formatSize(int64(fl.maxMsg))), "want at least 64 bytes")
	}
	if fl.maxEngines != 0 && (fl.maxEngines < fl.engines || fl.maxEngines > dpwire.MaxEngines) {
		return badFlag("--max-engines", fl.maxEngines, fmt.Sprintf("want --engines (%d)..%d", fl.engines, dpwire.MaxEngines))
	}
	var scaleHosts []string
	for _, h := range strings.Split(fl.scaleFrom, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, err := netip.ParseAddr(h); err != nil {
			return usagef("--scale-from: %q is not an IP address", h)
		}
		scaleHosts = append(scaleHosts, h)
	}
	if err := fl.dbg.check(); err != nil {
		return err
	}
	if err := fl.live.check(); err != nil {
		return err
	}
	if err := fl.mo.check(); err != nil {
		return err
	}
	cc, stopCurve, err := fl.curve.config(ctx, e.logger)
	if err != nil {
		return err
	}
	defer stopCurve()
	sopts := fl.live.options()
	sopts.Guard.Curve = cc
	fl.allow.apply(&sopts.Guard)
	c, err := coordinator.New(coordinator.Config{
		Socket:          sopts,
		MaxEngines:      fl.maxEngines,
		ReadyInterval:   fl.readyInterval,
		ScaleFrom:       scaleHosts,
		Front:           fl.front,
		BackOutput:      fl.backOut,
		BackPublish:     fl.backPub,
		Engines:         fl.engines,
		StatsInterval:   fl.statsInterval,
		IdleInterval:    fl.idleInterval,
		StartupDeadline: fl.startup,
		MaxMessageSize:  int64(fl.maxMsg),
		Release:         *fl.release,
		Logger:          e.logger,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	report := func() coordinatorReport {
		r := newCoordinatorReport(c.Stats())
		r.Goroutines = runtime.NumGoroutine()
		return r
	}
	ds, err := startDebug(fl.dbg, coordinatorSpec.name, func() any { return report() }, e.logger)
	if err != nil {
		return err
	}
	defer ds.Close()
	ms, err := startMetrics(fl.mo, e.logger, func(col *zgprom.Collector) error { return col.AddCoordinator("", c) })
	if err != nil {
		return err
	}
	defer ms.Close()
	e.logger.Info("coordinator running", append([]any{"front", c.FrontEndpoint(), "back_output", c.BackOutputEndpoint(),
		"back_publish", c.BackPublishEndpoint(), "engines", fl.engines, "vllm_version", fl.release.String()}, append(ds.logAttrs(), ms.logAttrs()...)...)...)
	start := time.Now()
	rerr := c.Run(ctx)
	if rerr == nil || errors.Is(rerr, coordinator.ErrClosed) {
		rerr = nil
		e.logger.Info("coordinator stopping", "uptime", time.Since(start).Round(time.Millisecond))
	} else {
		e.logger.Error("coordinator stopped", "err", rerr)
	}
	// Close everything first, so that goroutines counts what did not stop.
	c.Close()
	ds.Close()
	ms.Close()
	line, err := json.Marshal(report())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", line)
	return rerr
}

// maxStartEngines is the largest --engines the coordinator accepts when
// --max-engines is not set (coordinator.Config.MaxEngines' zero value).
const maxStartEngines = 4096
