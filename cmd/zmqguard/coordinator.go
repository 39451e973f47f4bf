package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/internal/dpwire"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
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

func runCoordinator(ctx context.Context, e *env, args []string) int {
	spec := coordinatorSpec
	fs := newFlagSet(e, spec)
	front := fs.String("front", "", "front publish (XPUB) endpoint to bind, for API front-ends (required)")
	backOut := fs.String("back-output", "", "back output (PULL) endpoint to bind, for engine outputs (required)")
	backPub := fs.String("back-publish", "", "back publish (XPUB) endpoint to bind, for READY and START_DP_WAVE (required)")
	engines := fs.Int("engines", 0, "data-parallel size: the number of engines (required)")
	statsInterval := fs.Duration("stats-interval", 100*time.Millisecond, "stats publication period while stats change")
	idleInterval := fs.Duration("idle-interval", 5*time.Second, "stats publication period when nothing changes")
	maxMsg := sizeValue(1 << 20)
	fs.Var(&maxMsg, "max-message-size", "largest message accepted on any socket, a `size` such as 1048576, 1MiB or 64KiB")
	startup := fs.Duration("startup-deadline", 0, "give up if the engines have not all subscribed by then (0: wait for ever, as vLLM)")
	release := releaseFlag(fs)
	readyInterval := fs.Duration("ready-interval", 100*time.Millisecond, "shortest time between two READY broadcasts after start-up (negative: one READY per subscription, as vLLM)")
	maxEngines := fs.Int("max-engines", 0, "largest engine count SCALE_ELASTIC_EP may set (0: 4 x --engines, at least 8)")
	scaleFrom := fs.String("scale-from", "", "comma-separated IP addresses of the only front-ends allowed to send SCALE_ELASTIC_EP (default: any)")
	dbg := addDebugFlags(fs)
	mo := addMetricsFlags(fs)
	curve := addCurveServerFlags(fs)
	allow := addAllowFlag(fs)
	live := addLivenessFlags(fs)
	pos, code, done := parseCommand(e, fs, spec, args)
	if done {
		return code
	}
	err := func() error {
		if len(pos) > 0 {
			return usagef("unexpected argument %q", pos[0])
		}
		if *front == "" || *backOut == "" || *backPub == "" {
			return usagef("--front, --back-output and --back-publish are required")
		}
		if *engines < 1 || *engines > maxStartEngines {
			return usagef("--engines must be in [1, %d]", maxStartEngines)
		}
		if *statsInterval <= 0 || *idleInterval <= 0 || *startup < 0 {
			return usagef("intervals must be positive")
		}
		if maxMsg < 64 {
			return usagef("--max-message-size must be at least 64 bytes")
		}
		if *maxEngines != 0 && (*maxEngines < *engines || *maxEngines > dpwire.MaxEngines) {
			return usagef("--max-engines must be in [--engines, %d]", dpwire.MaxEngines)
		}
		var scaleHosts []string
		for _, h := range strings.Split(*scaleFrom, ",") {
			if h = strings.TrimSpace(h); h == "" {
				continue
			}
			if _, err := netip.ParseAddr(h); err != nil {
				return usagef("--scale-from: %q is not an IP address", h)
			}
			scaleHosts = append(scaleHosts, h)
		}
		if err := dbg.check(); err != nil {
			return err
		}
		if err := live.check(); err != nil {
			return err
		}
		if err := mo.check(); err != nil {
			return err
		}
		cc, stopCurve, err := curve.config(ctx, e.logger)
		if err != nil {
			return err
		}
		defer stopCurve()
		sopts := live.options()
		sopts.Guard.Curve = cc
		sopts.Guard.Allow = allow.prefixes
		c, err := coordinator.New(coordinator.Config{
			Socket:          sopts,
			MaxEngines:      *maxEngines,
			ReadyInterval:   *readyInterval,
			ScaleFrom:       scaleHosts,
			Front:           *front,
			BackOutput:      *backOut,
			BackPublish:     *backPub,
			Engines:         *engines,
			StatsInterval:   *statsInterval,
			IdleInterval:    *idleInterval,
			StartupDeadline: *startup,
			MaxMessageSize:  int64(maxMsg),
			Release:         *release,
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
		ds, err := startDebug(dbg, spec.name, func() any { return report() }, e.logger)
		if err != nil {
			return err
		}
		defer ds.Close()
		ms, err := startMetrics(mo, e.logger, func(col *zgprom.Collector) error { return col.AddCoordinator("", c) })
		if err != nil {
			return err
		}
		defer ms.Close()
		e.logger.Info("coordinator running", append([]any{"front", c.FrontEndpoint(), "back_output", c.BackOutputEndpoint(),
			"back_publish", c.BackPublishEndpoint(), "engines", *engines, "vllm_version", release.String()}, append(ds.logAttrs(), ms.logAttrs()...)...)...)
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
	}()
	return finish(e, fs, spec, err)
}

// maxStartEngines is the largest --engines the coordinator accepts when
// --max-engines is not set (coordinator.Config.MaxEngines' zero value).
const maxStartEngines = 4096
