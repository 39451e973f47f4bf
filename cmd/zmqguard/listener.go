package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"strings"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/vllm"
)

var listenerSpec = commandSpec{
	name:     "handshake-listener",
	synopsis: "--bind ADDR [--allow CIDR,...] --engine-id ID [--pp-size 1] [--tp-size 1] [--compat-hash HEX] [--vllm-version latest] [--debug-addr HOST:PORT] [--metrics-addr HOST:PORT]",
	summary:  "serve demo NIXL handshake metadata until SIGINT/SIGTERM",
	help: `Serves vLLM's NIXL side channel (V1, V2 and V3 requests) on a hardened ROUTER,
answering every (pp, tp) rank in [0, pp-size) x [0, tp-size) with a demo
NixlHandshakePayload: the compatibility hash, and NixlAgentMetadata with
engine_id = ID, device_id = tp, num_blocks = 1000 + pp*100 + tp,
kv_cache_layout "HND", block_size 16. The default hash is that of the demo
factor set (meta-llama/Llama-3.1-8B-Instruct, torch.bfloat16, 8 KV heads,
head size 128, 32 layers, FLASH_ATTN, cache dtype auto, HMA on,
cross_layers_blocks false, no speculative config, transfer mode pull) in the
factor keys and NIXL connector version of the --vllm-version release, with
vllm_version naming the profile (e.g. 0.26.0, latest).
A request for another rank gets an explicit error reply. Bad requests are
dropped and counted; nothing a peer sends stops the listener.

On SIGINT or SIGTERM it exits 0 after printing its counters as one JSON line
on stdout: requests served by variant, error replies, the receive loop's
received, delivered and dropped messages (drops by reason), refused
connections by reason (refused), connects and disconnects, replies
dropped because the client had gone (dropped_unroutable) or because a
client that does not read had its queue full (dropped_hwm), failed accepts
(accept_errors, e.g. EMFILE; only when the socket layer reports them) and
goroutines.

` + debugHelp + "\n\n" + metricsHelp,
}

// listenerReport is the JSON line handshake-listener prints at exit.
type listenerReport struct {
	Endpoint          string             `json:"endpoint"`
	Served            map[string]uint64  `json:"served"`
	ErrorReplies      uint64             `json:"error_replies"`
	Received          uint64             `json:"received"`
	Delivered         uint64             `json:"delivered"`
	Dropped           uint64             `json:"dropped"`
	Drops             decodeguard.Counts `json:"drops"`
	Refused           decodeguard.Counts `json:"refused"`
	Connects          uint64             `json:"connects"`
	Disconnects       uint64             `json:"disconnects"`
	DroppedUnroutable uint64             `json:"dropped_unroutable"`
	// DroppedHWM counts replies dropped because the client's queue was at
	// its high-water mark (a client that sends and never reads).
	DroppedHWM uint64 `json:"dropped_hwm"`
	// AcceptErrors counts failed accepts (each followed by a back-off),
	// e.g. EMFILE.
	AcceptErrors uint64 `json:"accept_errors"`
	// HeartbeatTimeouts counts decode clients disconnected because they went
	// silent past the heartbeat rules.
	HeartbeatTimeouts uint64 `json:"heartbeat_timeouts"`
	// Goroutines is runtime.NumGoroutine() when the report was made: at
	// exit, after the listener and the debug endpoint were closed.
	Goroutines int `json:"goroutines"`
}

// newListenerReport builds the report from the listener's counters; the
// caller sets Goroutines.
func newListenerReport(endpoint string, st handshake.ListenerStats) listenerReport {
	r := listenerReport{
		Endpoint: endpoint,
		Served: map[string]uint64{
			"V1": st.Served[handshake.V1], "V2": st.Served[handshake.V2], "V3": st.Served[handshake.V3],
		},
		ErrorReplies:      st.ErrorReplies,
		Received:          st.Loop.Received,
		Delivered:         st.Loop.Delivered,
		Dropped:           st.Loop.Dropped.Total(),
		Drops:             decodeguard.Counts(st.Loop.Dropped),
		Refused:           decodeguard.Counts(st.Socket.Refused),
		Connects:          st.Socket.Connects,
		Disconnects:       st.Socket.Disconnects,
		DroppedUnroutable: st.Socket.DroppedUnroutable,
		DroppedHWM:        st.Socket.DroppedHWM,
		AcceptErrors:      st.Socket.AcceptErrors,
		HeartbeatTimeouts: st.Socket.HeartbeatTimeouts,
	}
	return r
}

// listenerFlags are the flags of listener.
type listenerFlags struct {
	bind     string
	engineID string
	ppSize   int
	tpSize   int
	compat   string
	release  *vllm.Release
	dbg      *debugOptions
	mo       *metricsOptions
	curve    *curveServerFlags
	allow    *allowFlag
	live     *livenessFlags
}

// listenerCmd is the listener command.
var listenerCmd = command[listenerFlags]{
	spec: listenerSpec,
	register: func(fs *flag.FlagSet, fl *listenerFlags) {
		fs.StringVar(&fl.bind, "bind", "", "endpoint to bind, e.g. tcp://127.0.0.1:5600 (required)")
		fs.StringVar(&fl.engineID, "engine-id", "", "engine_id put in the served metadata (required)")
		fs.IntVar(&fl.ppSize, "pp-size", 1, "number of pipeline-parallel ranks served")
		fs.IntVar(&fl.tpSize, "tp-size", 1, "number of tensor-parallel ranks served")
		fs.StringVar(&fl.compat, "compat-hash", "", "compatibility hash served, 64 hex digits (default: the hash of the --vllm-version release's demo factor set)")
		fl.release = releaseFlag(fs)
		fl.dbg = addDebugFlags(fs)
		fl.mo = addMetricsFlags(fs)
		fl.curve = addCurveServerFlags(fs)
		fl.allow = addAllowFlag(fs)
		fl.live = addLivenessFlags(fs)
	},
	run: runListener,
}

// runListener is the run function of listener: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runListener(ctx context.Context, fl *listenerFlags, e *env) error {
	if fl.bind == "" || fl.engineID == "" {
		return usagef("--bind and --engine-id are required")
	}
	if fl.ppSize < 1 || fl.ppSize > nixlwire.MaxRank {
		return badFlag("--pp-size", fl.ppSize, fmt.Sprintf("want 1..%d", nixlwire.MaxRank))
	}
	if fl.tpSize < 1 || fl.tpSize > nixlwire.MaxRank {
		return badFlag("--tp-size", fl.tpSize, fmt.Sprintf("want 1..%d", nixlwire.MaxRank))
	}
	if fl.ppSize*fl.tpSize > 1<<16 {
		return usagef("--pp-size %d and --tp-size %d: %d ranks, want at most 65536", fl.ppSize, fl.tpSize, fl.ppSize*fl.tpSize)
	}
	hash := strings.ToLower(fl.compat)
	if hash == "" {
		hash = demoHashFor(*fl.release)
	} else if _, err := hex.DecodeString(hash); err != nil || len(hash) != 64 {
		return badFlag("--compat-hash", fl.compat, "want 64 hex digits")
	}
	if err := fl.dbg.check(); err != nil {
		return err
	}
	if err := fl.mo.check(); err != nil {
		return err
	}
	if err := fl.live.check(); err != nil {
		return err
	}
	payloads, err := demoPayloads(fl.engineID, hash, *fl.release, fl.ppSize, fl.tpSize)
	if err != nil {
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
	l, err := handshake.NewListener(handshake.ListenerConfig{
		Endpoint:     fl.bind,
		Payloads:     payloads,
		ErrorReplies: true,
		Logger:       e.logger,
		Socket:       sopts,
	})
	if err != nil {
		return err
	}
	defer l.Close()
	report := func() listenerReport {
		r := newListenerReport(l.Endpoint(), l.Stats())
		r.Goroutines = runtime.NumGoroutine()
		return r
	}
	ds, err := startDebug(fl.dbg, listenerSpec.name, func() any { return report() }, e.logger)
	if err != nil {
		return err
	}
	defer ds.Close()
	ms, err := startMetrics(fl.mo, e.logger, func(c *zgprom.Collector) error { return c.AddHandshakeListener("handshake", l) })
	if err != nil {
		return err
	}
	defer ms.Close()
	e.logger.Info("handshake listener serving", append([]any{"endpoint", l.Endpoint(), "engine_id", logText(fl.engineID),
		"pp_size", fl.ppSize, "tp_size", fl.tpSize, "compatibility_hash", hash, "vllm_version", fl.release.String()}, append(ds.logAttrs(), ms.logAttrs()...)...)...)
	serr := l.Serve(ctx)
	if serr != nil && !errors.Is(serr, handshake.ErrListenerClosed) {
		e.logger.Error("handshake listener stopped", "err", serr)
	} else {
		serr = nil
		e.logger.Info("handshake listener stopping")
	}
	// Close everything first, so that goroutines counts what did not stop.
	l.Close()
	ds.Close()
	ms.Close()
	line, err := json.Marshal(report())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", line)
	return serr
}
