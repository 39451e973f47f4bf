package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

var sinkSpec = commandSpec{
	name:     "sink",
	synopsis: "--bind ADDR [--allow CIDR,...] [--decode none|stats] [--count N] [--metrics-addr HOST:PORT]",
	summary:  "a guarded PULL that counts valid messages, for measuring a machine",
	help: `Binds a hardened PULL socket under a SafeLoop and counts valid messages:
with --decode none every message is valid; with --decode stats a message is
valid when it decodes as vLLM's EngineCoreOutputs (one frame, guarded
decode), and anything else is dropped and counted by reason, never counted
as valid.

It exits 0 after --count valid messages (or, with --count 0, on SIGINT or
SIGTERM) and prints one JSON line on stdout: valid messages, seconds from
the first to the last valid one, messages per second, heap allocations and
bytes per message over that span, drops by reason and refused connections
by reason. A human summary goes to stderr.

` + metricsHelp,
}

// sinkReport is the JSON line sink prints.
type sinkReport struct {
	Endpoint     string             `json:"endpoint"`
	Decode       string             `json:"decode"`
	Messages     uint64             `json:"messages"`
	Seconds      float64            `json:"seconds"`
	MsgsPerSec   float64            `json:"msgs_per_sec"`
	AllocsPerMsg float64            `json:"allocs_per_msg"`
	BytesPerMsg  float64            `json:"bytes_per_msg"`
	Received     uint64             `json:"received"`
	Dropped      uint64             `json:"dropped"`
	Drops        decodeguard.Counts `json:"drops"`
	Refused      decodeguard.Counts `json:"refused"`
}

// sinkCounter counts valid messages in the loop's goroutine (no atomics:
// only the handler touches it while the loop runs).
type sinkCounter struct {
	n, target    uint64
	first, last  time.Time
	m0, m1       runtime.MemStats
	cancel       context.CancelFunc
	lastMeasured bool
}

func (c *sinkCounter) valid() {
	c.n++
	if c.n == 1 {
		c.first = time.Now()
		runtime.ReadMemStats(&c.m0)
	}
	if c.n == c.target {
		c.last = time.Now()
		runtime.ReadMemStats(&c.m1)
		c.lastMeasured = true
		c.cancel()
	}
}

// sinkFlags are the flags of sink.
type sinkFlags struct {
	bind   string
	decode string
	count  uint64
	maxMsg sizeValue
	hwm    int
	mo     *metricsOptions
	curve  *curveServerFlags
	allow  *allowFlag
}

// sinkCmd is the sink command.
var sinkCmd = command[sinkFlags]{
	spec: sinkSpec,
	register: func(fs *flag.FlagSet, fl *sinkFlags) {
		fs.StringVar(&fl.bind, "bind", "", "endpoint to bind, e.g. tcp://127.0.0.1:5700 (required)")
		fs.StringVar(&fl.decode, "decode", "none", "none (every message is valid) or stats (valid = decodes as EngineCoreOutputs)")
		fs.Uint64Var(&fl.count, "count", 0, "exit after this many valid messages (0: on SIGINT/SIGTERM)")
		fl.maxMsg = sizeValue(1 << 20)
		fs.Var(&fl.maxMsg, "max-message-size", "largest message accepted, a `size` such as 1048576, 1MiB or 64KiB")
		fs.IntVar(&fl.hwm, "hwm", 0, "per-peer queue bound in messages (0: the socket default)")
		fl.mo = addMetricsFlags(fs)
		fl.curve = addCurveServerFlags(fs)
		fl.allow = addAllowFlag(fs)
	},
	run: runSink,
}

// runSink is the run function of sink: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runSink(ctx context.Context, fl *sinkFlags, e *env) error {
	if fl.bind == "" {
		return usagef("--bind is required")
	}
	if fl.decode != "none" && fl.decode != "stats" {
		return usagef("--decode %q: want none or stats", fl.decode)
	}
	if fl.maxMsg < 64 {
		return badFlag("--max-message-size", shown(formatSize(int64(fl.maxMsg))), "want at least 64 bytes")
	}
	if fl.hwm < 0 {
		return badFlag("--hwm", fl.hwm, "must not be negative")
	}
	if err := fl.mo.check(); err != nil {
		return err
	}
	opts := socket.DefaultOptions()
	opts.Guard.MaxMessageSize = int64(fl.maxMsg)
	if fl.hwm > 0 {
		opts.HWM = fl.hwm
	}
	opts.Logger = e.logger
	cc, stopCurve, err := fl.curve.config(ctx, e.logger)
	if err != nil {
		return err
	}
	defer stopCurve()
	opts.Guard.Curve = cc
	fl.allow.apply(&opts.Guard)
	s, err := socket.New("PULL", opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Bind(fl.bind); err != nil {
		return err
	}
	ms, err := startMetrics(fl.mo, e.logger, func(c *zgprom.Collector) error { return c.AddSocket("sink", s) })
	if err != nil {
		return err
	}
	defer ms.Close()
	e.logger.Info("sink receiving", append([]any{"endpoint", s.Endpoint(), "decode", fl.decode, "count", fl.count}, ms.logAttrs()...)...)

	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := &sinkCounter{target: fl.count, cancel: cancel}
	var st loop.Stats
	if fl.decode == "none" {
		st, err = sinkLoop(lctx, e, s, c, ms, loop.RawDecoder)
	} else {
		lim := decodeguard.Limits{MaxBytes: int(fl.maxMsg)}
		st, err = sinkLoop(lctx, e, s, c, ms, func(frames [][]byte, dst *enginecore.Header) error {
			if len(frames) != 1 {
				return decodeguard.NewError(decodeguard.ReasonEnvelope, "expected one frame")
			}
			return enginecore.DecodeHeader(frames[0], &lim, dst)
		})
	}
	stop := time.Now()
	if err != nil {
		return err
	}
	if !c.lastMeasured {
		c.last = stop
		runtime.ReadMemStats(&c.m1)
	}
	rep := sinkReport{
		Endpoint: s.Endpoint(),
		Decode:   fl.decode,
		Messages: c.n,
		Received: st.Received,
		Dropped:  st.Dropped.Total(),
		Drops:    decodeguard.Counts(st.Dropped),
		Refused:  decodeguard.Counts(s.Stats().Refused),
	}
	if c.n > 1 {
		span := c.last.Sub(c.first)
		rep.Seconds = span.Seconds()
		if span > 0 {
			rep.MsgsPerSec = float64(c.n-1) / span.Seconds()
		}
		rep.AllocsPerMsg = float64(c.m1.Mallocs-c.m0.Mallocs) / float64(c.n-1)
		rep.BytesPerMsg = float64(c.m1.TotalAlloc-c.m0.TotalAlloc) / float64(c.n-1)
	}
	line, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s\n", line)
	fmt.Fprintf(e.stderr, "sink: %d valid messages in %.3fs: %.0f msg/s, %.2f allocs/msg, %.0f B/msg; %d dropped, %d connections refused\n",
		rep.Messages, rep.Seconds, rep.MsgsPerSec, rep.AllocsPerMsg, rep.BytesPerMsg, rep.Dropped, rep.Refused.Total())
	if fl.count > 0 && c.n < fl.count {
		return fmt.Errorf("interrupted after %d of %d valid messages", c.n, fl.count)
	}
	return nil
}

// sinkLoop runs a SafeLoop over s with decoder dec until ctx ends, counting
// valid messages in c.
func sinkLoop[T any](ctx context.Context, e *env, s *socket.Socket, c *sinkCounter, ms *metricsServer, dec loop.Decoder[T]) (loop.Stats, error) {
	l, err := loop.New(s, loop.Config[T]{
		Name:   "sink",
		Logger: e.logger,
		Decode: dec,
		Handler: func(context.Context, loop.Delivery[T]) error {
			c.valid()
			return nil
		},
	})
	if err != nil {
		return loop.Stats{}, err
	}
	if err := ms.addLoop("sink", l); err != nil {
		return loop.Stats{}, err
	}
	err = l.Run(ctx)
	if errors.Is(err, loop.ErrLoopClosed) {
		err = nil
	}
	return l.Stats(), err
}
