package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

var outputsSpec = commandSpec{
	name:     "outputs",
	synopsis: "--bind ADDR [--allow CIDR,...] [--any-peer] [--count N] [--engines N] [--vllm-version latest] [--max-message-size 64MiB] [--max-frames 4096] [--heartbeat-interval 2s] [--heartbeat-timeout 6s] [--metrics-addr HOST:PORT] [--curve-secret-key-file F --curve-allow PATH]",
	summary:  "a front-end's guarded output socket: engines' EngineCoreOutputs as JSON lines",
	help: `Binds a guarded PULL socket where vLLM engine cores (or any engine speaking
their output wire) connect and push EngineCoreOutputs, decodes each message
in full (arrays inline and in aux frames) and prints one JSON line per
request output on stdout:

  {"engine": E, "request_id": S, "new_token_ids": [...], "finish_reason": N|null,
   "stop_reason": N|S|null, "new_logprobs": {"logprob_token_ids": [[...]],
   "logprobs": [[...]], "sampled_token_ranks": [...]}|null,
   "new_prompt_logprobs": {...}|null, "pooling_output": {"dtype": D,
   "shape": [...], "data": [...]}|null, "routed_experts": {...}|null,
   "events": [{"type": T, "timestamp": F}]|null, "num_nans_in_logits": N,
   "kv_transfer_params": ...|null}

Arrays are nested JSON lists following their shape (NaN and infinities as
null). An engine index belongs to the first connection that sends a valid
message claiming it (until that connection disconnects); another
connection's messages claiming it are dropped and counted
(claims_refused). An engine's ENGINE_CORE_DEAD prints {"engine": E,
"type": "engine_dead"} and the receiver goes on; a sentinel from a
connection that holds no engine index prints nothing and is counted
(unattributed_dead). Junk is dropped and counted by reason, per engine.
Since the first connection owns an index, --bind on an address other than
loopback needs --allow or the CURVE flags, so that only engines can
connect; --any-peer serves anyone there anyway. An index taken over, after
its connection left, by a connection from another host is logged at WARN
naming both peers (counted as takeovers).

--curve-secret-key-file and --curve-allow serve CURVE only: engines must
present a listed client key (vLLM's engines speak NULL; use CURVE where
the engines' side is a zmqguard or libzmq peer configured for it). After --count request outputs (or, with --count 0, on SIGINT or
SIGTERM) the last line is {"counters": {...}} and the exit code is 0.

Each engine connection is handled by its own worker: one engine's lines
keep its order, different engines' lines may interleave, and an engine
sending huge messages delays only its own lines (its connection is held
once 64 MiB of its messages, or two messages over 1 MiB, wait).

The limits default to one step of a large engine (max_num_seqs 1024, each
sequence with logprobs, pooling output or routed experts in aux frames):
4096 frames and 64 MiB per message; a larger message is refused and
counted, the receiver goes on.`,
}

// outputsHeapSlack is what the outputs command allows its heap beyond the
// queues and the socket's budget: workers' decoded messages and rendered
// lines, the small messages' recycled copies (at most 16 MiB), the runtime
// and the metrics endpoint.
const outputsHeapSlack = 64 << 20

// outputsFlags are the flags of outputs.
type outputsFlags struct {
	bind      string
	count     uint64
	engines   int
	release   *vllm.Release
	live      *livenessFlags
	mo        *metricsOptions
	allow     *allowFlag
	maxMsg    sizeValue
	maxFrames int
	curve     *curveServerFlags
	anyPeer   bool
}

// outputsCmd is the outputs command.
var outputsCmd = command[outputsFlags]{
	spec: outputsSpec,
	register: func(fs *flag.FlagSet, fl *outputsFlags) {
		fs.StringVar(&fl.bind, "bind", "", "endpoint to bind, e.g. tcp://127.0.0.1:5700 (required)")
		fs.Uint64Var(&fl.count, "count", 0, "exit after this many request outputs (0: on SIGINT/SIGTERM)")
		fs.IntVar(&fl.engines, "engines", 0, "number of engines; a larger engine_index is dropped (0: any)")
		fl.release = releaseFlag(fs)
		fl.live = addLivenessFlags(fs)
		fl.mo = addMetricsFlags(fs)
		fl.allow = addAllowFlag(fs)
		fl.maxMsg = sizeValue(64 << 20)
		fs.Var(&fl.maxMsg, "max-message-size", "largest message accepted, a `size` such as 1048576, 64MiB or 64KiB")
		fs.IntVar(&fl.maxFrames, "max-frames", 4096, "most frames in one message (the body and its aux arrays)")
		fl.curve = addCurveServerFlags(fs)
		fs.BoolVar(&fl.anyPeer, "any-peer", false, "serve a --bind address other than loopback without --allow or CURVE: any host that connects first may claim an engine index")
	},
	run: runOutputs,
}

// runOutputs is the run function of outputs: it checks the flags, then does the
// work (positional arguments are refused before it runs: its spec takes
// none).
func runOutputs(ctx context.Context, fl *outputsFlags, e *env) error {
	if fl.bind == "" {
		return usagef("--bind is required")
	}
	if fl.engines < 0 {
		return badFlag("--engines", fl.engines, "must not be negative")
	}
	if fl.maxMsg < 64 {
		return badFlag("--max-message-size", shown(formatSize(int64(fl.maxMsg))), "want at least 64 bytes")
	}
	if fl.maxFrames < 1 {
		return badFlag("--max-frames", fl.maxFrames, "want at least 1")
	}
	if rest, ok := strings.CutPrefix(fl.bind, "tcp://"); ok && !fl.anyPeer && len(fl.allow.prefixes) == 0 &&
		*fl.curve.secretFile == "" && !isLoopbackHost(strings.Trim(hostOf(rest), "[]")) {
		return usagef("--bind %s is not a loopback address: pass --allow CIDR,... or the CURVE flags so that only engines can connect (the first connection owns an engine index), or --any-peer to serve anyone", fl.bind)
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
	rel := *fl.release
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &outputsWriter{w: e.stdout, limit: fl.count}
	so := socket.Options{}
	so.Guard.MaxMessageSize = int64(fl.maxMsg)
	so.Guard.MaxFrames = fl.maxFrames
	fl.allow.apply(&so.Guard)
	so.Logger = e.logger
	lo := fl.live.options()
	so.HeartbeatInterval, so.HeartbeatTimeout = lo.HeartbeatInterval, lo.HeartbeatTimeout
	so.Guard.Curve = cc
	// The handler runs in one goroutine per engine connection (see
	// outputs.Handler): each renders its lines into a buffer of its
	// own and only the write of a finished line is serialized, so an
	// engine's huge outputs do not hold the others' lines up.
	bufs := sync.Pool{New: func() any { return new([]byte) }}
	r, err := outputs.New(outputs.Config{
		Name: "outputs", Logger: e.logger, Release: rel, Socket: so, Engines: fl.engines, AnyPeer: fl.anyPeer,
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			bp := bufs.Get().(*[]byte)
			defer func() {
				if cap(*bp) <= 1<<20 {
					bufs.Put(bp)
				}
			}()
			for i := range m.Outputs {
				*bp = appendOutput((*bp)[:0], m.EngineIndex, &m.Outputs[i])
				reached, err := w.emit(*bp, true)
				if err != nil {
					return err
				}
				if reached {
					cancel()
					break
				}
			}
			return nil
		},
		OnEngineDead: func(d outputs.EngineDeadError) {
			w.emit(appendDead(nil, d.Engine), false)
		},
	})
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Bind(fl.bind); err != nil {
		return err
	}
	ms, err := startMetrics(fl.mo, e.logger, func(c *zgprom.Collector) error { return c.AddOutputs("outputs", r) })
	if err != nil {
		return err
	}
	defer ms.Close()
	// The heap's bound: the queues (QueueBytes, four messages), the
	// socket's receive budget (two) and outputsHeapSlack for the rest.
	// Without a limit the garbage collector lets the heap grow to twice
	// what is live (1.7 GiB measured under issue 37's six heavy engines);
	// with it, it collects sooner. GOMEMLIMIT, when set, wins.
	memLimit, restore := setMemoryLimit(6*int64(fl.maxMsg) + outputsHeapSlack)
	defer restore()
	e.logger.Info("outputs receiving", append([]any{"endpoint", r.Endpoint(), "count", fl.count, "vllm_version", rel.String(),
		"memory_limit", memLimit}, ms.logAttrs()...)...)
	err = r.Run(lctx)
	if errors.Is(err, loop.ErrLoopClosed) {
		err = nil
	}
	if err != nil {
		return err
	}
	if w.err != nil {
		return w.err
	}
	line, err := json.Marshal(struct {
		Counters outputs.Stats `json:"counters"`
	}{r.Stats()})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(e.stdout, "%s\n", line); err != nil {
		return err
	}
	if n := w.written(); fl.count > 0 && n < fl.count {
		e.logger.Info("outputs interrupted", "outputs", n, "count", fl.count)
	}
	return nil
}

// outputsWriter writes finished JSON lines, one at a time, and counts the
// request outputs among them against limit (0: no limit). It is safe for
// concurrent use.
type outputsWriter struct {
	mu    sync.Mutex
	w     io.Writer
	err   error
	n     uint64
	limit uint64
}

// emit writes line (a request output when output is set). It reports
// whether the limit is reached: then a request output beyond it is not
// written.
func (w *outputsWriter) emit(line []byte, output bool) (reached bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if output && w.limit > 0 && w.n >= w.limit {
		return true, w.err
	}
	if w.err == nil {
		_, w.err = w.w.Write(line)
	}
	if output && w.err == nil {
		w.n++
	}
	return output && w.limit > 0 && w.n >= w.limit, w.err
}

// written returns the request outputs written.
func (w *outputsWriter) written() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func appendDead(b []byte, engine int64) []byte {
	b = append(b, `{"engine":`...)
	if engine < 0 {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, engine, 10)
	}
	return append(b, ",\"type\":\"engine_dead\"}\n"...)
}

// appendOutput appends the JSON line of one request output.
func appendOutput(b []byte, engine int64, o *enginecore.Output) []byte {
	b = append(b, `{"engine":`...)
	b = strconv.AppendInt(b, engine, 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, o.RequestID)
	b = append(b, `,"new_token_ids":[`...)
	for i, t := range o.NewTokenIDs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, t, 10)
	}
	b = append(b, `],"finish_reason":`...)
	if o.HasFinishReason {
		b = strconv.AppendInt(b, int64(o.FinishReason), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"stop_reason":`...)
	switch o.StopReason.Kind {
	case enginecore.StopInt:
		b = strconv.AppendInt(b, o.StopReason.Int, 10)
	case enginecore.StopStr:
		b = appendJSONString(b, o.StopReason.Str)
	default:
		b = append(b, "null"...)
	}
	b = append(b, `,"new_logprobs":`...)
	b = appendJSONLogprobs(b, &o.NewLogprobs)
	b = append(b, `,"new_prompt_logprobs":`...)
	b = appendJSONLogprobs(b, &o.NewPromptLogprobs)
	b = append(b, `,"pooling_output":`...)
	b = appendJSONArrayObject(b, &o.PoolingOutput)
	b = append(b, `,"routed_experts":`...)
	b = appendJSONArrayObject(b, &o.RoutedExperts)
	b = append(b, `,"events":`...)
	if o.HasEvents {
		b = append(b, '[')
		for i, ev := range o.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = strconv.AppendInt(b, int64(ev.Type), 10)
			b = append(b, `,"timestamp":`...)
			b = appendJSONFloat(b, ev.Timestamp, 64)
			b = append(b, '}')
		}
		b = append(b, ']')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"num_nans_in_logits":`...)
	b = strconv.AppendInt(b, o.NumNaNsInLogits, 10)
	b = append(b, `,"kv_transfer_params":`...)
	b = appendJSONRaw(b, o.KVTransferParams)
	return append(b, "}\n"...)
}

func appendJSONFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

// appendJSONRaw renders an uninterpreted msgpack sub-object as JSON, or as
// {"msgpack_hex": ...} when it has no JSON form.
func appendJSONRaw(b []byte, r []byte) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	v, _, err := msgp.ReadIntfBytes(r)
	if err == nil {
		if j, err := json.Marshal(v); err == nil {
			return append(b, j...)
		}
	}
	b = append(b, `{"msgpack_hex":"`...)
	b = append(b, ratelog.Render(r)...)
	return append(b, `"}`...)
}

func appendJSONLogprobs(b []byte, l *enginecore.Logprobs) []byte {
	if !l.Present {
		return append(b, "null"...)
	}
	b = append(b, `{"logprob_token_ids":`...)
	b = appendJSONNested(b, &l.TokenIDs)
	b = append(b, `,"logprobs":`...)
	b = appendJSONNested(b, &l.Logprobs)
	b = append(b, `,"sampled_token_ranks":`...)
	b = appendJSONNested(b, &l.SampledRanks)
	return append(b, '}')
}

func appendJSONArrayObject(b []byte, a *enginecore.Array) []byte {
	if a.IsNil() {
		return append(b, "null"...)
	}
	name := numpyNames[a.DType.String()]
	if a.Torch || name == "" {
		name = a.DType.String()
	}
	b = append(b, `{"dtype":"`...)
	b = append(b, name...)
	b = append(b, `","shape":[`...)
	for i, d := range a.Shape {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(d), 10)
	}
	b = append(b, `],"data":`...)
	b = appendJSONNested(b, a)
	return append(b, '}')
}

// appendJSONNested writes a's elements as nested lists following its shape
// (a scalar as a bare number; a nil array as null).
func appendJSONNested(b []byte, a *enginecore.Array) []byte {
	if a.IsNil() {
		return append(b, "null"...)
	}
	i := 0
	return appendDims(b, a, a.Shape, &i)
}

func appendDims(b []byte, a *enginecore.Array, shape []int, i *int) []byte {
	if len(shape) == 0 {
		switch {
		case a.DType == enginecore.DTypeOf("bool"):
			b = strconv.AppendBool(b, a.Int(*i) != 0)
		case strings.HasPrefix(a.DType.String(), "float") || a.DType.String() == "bfloat16":
			bits := 64
			if a.DType != enginecore.DTypeOf("float64") {
				bits = 32
			}
			b = appendJSONFloat(b, a.Float(*i), bits)
		case a.DType == enginecore.DTypeOf("uint64"):
			b = strconv.AppendUint(b, uint64(a.Int(*i)), 10)
		default:
			b = strconv.AppendInt(b, a.Int(*i), 10)
		}
		*i++
		return b
	}
	b = append(b, '[')
	for j := 0; j < shape[0]; j++ {
		if j > 0 {
			b = append(b, ',')
		}
		b = appendDims(b, a, shape[1:], i)
	}
	return append(b, ']')
}

// numpyNames maps a dtype's torch-style name to numpy's dtype.str, the
// spelling vLLM uses for numpy arrays (bfloat16 has none: torch only).
var numpyNames = map[string]string{
	"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
	"int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
	"float16": "<f2", "float32": "<f4", "float64": "<f8",
}
