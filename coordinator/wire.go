package coordinator

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime/debug"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// EngineCoreOutputsFields is the number of fields of vLLM's EngineCoreOutputs
// struct: engine_index, outputs, scheduler_stats, timestamp, utility_output,
// finished_requests, wave_complete, start_wave.
const EngineCoreOutputsFields = 8

// MaxWave is the largest wave number accepted from the wire. A wave_complete
// of w moves the coordinator to wave w+1, so w must leave room for that.
const MaxWave = math.MaxInt64 - 1

// EngineCoreOutputs is the coordinator's view of vLLM's EngineCoreOutputs, the
// message every engine core pushes to the coordinator's back-output socket
// (and, with request outputs in it, to its front-ends).
//
// On the wire it is a msgspec Struct with array_like=True and
// omit_defaults=True: an array in field order,
//
//	[engine_index int = 0, outputs [EngineCoreOutput] = [],
//	 scheduler_stats SchedulerStats|nil = nil, timestamp float = 0.0,
//	 utility_output UtilityOutput|nil = nil, finished_requests [str]|nil = nil,
//	 wave_complete int|nil = nil, start_wave int|nil = nil]
//
// from which trailing fields equal to their defaults are dropped. It keeps
// only what the coordinator needs: the request outputs, the utility output
// and the finished request ids are counted or flagged, not kept.
//
// The zero value is the message with every field at its default. Decoding
// into a reused value allocates nothing.
type EngineCoreOutputs struct {
	// Fields is the number of array elements the frame carried (0 to 8 for
	// the current struct; more from a newer vLLM, whose extra trailing
	// fields are skipped as msgspec does). Encoders ignore it.
	Fields int

	// EngineIndex is the sending engine's data-parallel rank.
	EngineIndex int64
	// OutputsLen is the number of request outputs (EngineCoreOutput). The
	// outputs themselves are skipped; a coordinator message has none.
	OutputsLen int

	// HasStats reports whether scheduler_stats was present (not nil).
	HasStats bool
	// Stats is the decoded scheduler_stats when HasStats is set.
	Stats SchedulerStats

	// Timestamp is the engine's time.monotonic() when it built the message,
	// in seconds.
	Timestamp float64

	// HasUtilityOutput reports whether utility_output was present (not nil).
	// Its contents are skipped; a coordinator message has none.
	HasUtilityOutput bool

	// HasFinishedRequests reports whether finished_requests was present (an
	// array, possibly empty); FinishedRequests is its length. The request
	// ids themselves are checked to be str and skipped.
	HasFinishedRequests bool
	FinishedRequests    int

	// HasWaveComplete reports whether wave_complete was present; rank 0 sends
	// it when the engines have paused at the end of wave WaveComplete.
	HasWaveComplete bool
	WaveComplete    int64

	// HasStartWave reports whether start_wave was present; an engine sends it
	// when it got a request for wave StartWave while paused or behind.
	HasStartWave bool
	StartWave    int64
}

// SchedulerStats is the part of vLLM's SchedulerStats (vllm/v1/metrics/
// stats.py) that the coordinator reads. On the wire it is a Python dataclass,
// which msgspec encodes as a map keyed by field name with every field. It is
// decoded by key: unknown keys are skipped (the field set changes between
// vLLM releases: encoder_cache_usage, connector_prefix_cache_stats,
// kv_cache_eviction_events, spec_decoding_stats, kv_connector_stats,
// waiting_lora_adapters, running_lora_adapters, cudagraph_stats, perf_stats
// and prefix_cache_stats are all skipped without being inspected), missing
// keys keep their zero value (the dataclass defaults), and a repeated key's
// last value wins.
type SchedulerStats struct {
	// NumRunningReqs is num_running_reqs, the length of the running queue.
	NumRunningReqs int64
	// NumWaitingReqs is num_waiting_reqs, the length of the waiting queue.
	NumWaitingReqs int64
	// NumSkippedWaitingReqs is num_skipped_waiting_reqs (newer releases).
	NumSkippedWaitingReqs int64
	// StepCounter is step_counter, the engine's step within its current wave
	// (reset to 0 when the wave ends).
	StepCounter int64
	// CurrentWave is current_wave, the engine's wave when it took the stats.
	CurrentWave int64
	// KVCacheUsage is kv_cache_usage, the fraction of KV cache blocks in use.
	KVCacheUsage float64
	// EncoderCacheUsage is encoder_cache_usage (some releases).
	EncoderCacheUsage float64
}

// The SchedulerStats keys the coordinator reads.
const (
	keyNumRunningReqs        = "num_running_reqs"
	keyNumWaitingReqs        = "num_waiting_reqs"
	keyNumSkippedWaitingReqs = "num_skipped_waiting_reqs"
	keyStepCounter           = "step_counter"
	keyCurrentWave           = "current_wave"
	keyKVCacheUsage          = "kv_cache_usage"
	keyEncoderCacheUsage     = "encoder_cache_usage"
)

// wireError classifies a decode failure of the object starting at `at`, a
// suffix of orig. The reason is ReasonValidate for an integer too large for
// int64 (the shape is right, the value is not) and ReasonDecode otherwise.
// detail names the field, never its bytes; cause is msgp's error, whose
// text names msgpack types only.
func wireError(orig, at []byte, detail string, cause error) error {
	r := decodeguard.ReasonDecode
	if _, ok := cause.(msgp.UintOverflow); ok {
		r = decodeguard.ReasonValidate
		detail += ": integer out of range"
		cause = nil
	}
	return &decodeguard.Error{Reason: r, Detail: detail, Offset: len(orig) - len(at), Err: cause}
}

// rebase moves the offset of a classified error from a sub-decoder, relative
// to at, to be relative to orig.
func rebase(err error, orig, at []byte) error {
	var e *decodeguard.Error
	if errors.As(err, &e) && e.Offset >= 0 {
		e.Offset += len(orig) - len(at)
	}
	return err
}

// readFloat reads a msgpack float64 or float32 or, as msgspec accepts for a
// float field, an integer.
func readFloat(b []byte) (float64, []byte, error) {
	if len(b) >= 9 && b[0] == 0xcb { // float64, what vLLM sends
		return math.Float64frombits(binary.BigEndian.Uint64(b[1:9])), b[9:], nil
	}
	switch msgp.NextType(b) {
	case msgp.Float64Type, msgp.Float32Type:
		return msgp.ReadFloat64Bytes(b)
	case msgp.IntType:
		i, o, err := msgp.ReadInt64Bytes(b)
		return float64(i), o, err
	case msgp.UintType:
		u, o, err := msgp.ReadUint64Bytes(b)
		return float64(u), o, err
	case msgp.InvalidType:
		if len(b) == 0 {
			return 0, b, msgp.ErrShortBytes
		}
	}
	return 0, b, msgp.TypeError{Method: msgp.Float64Type, Encoded: msgp.NextType(b)}
}

// readOptInt reads nil (present=false) or an integer.
func readOptInt(b []byte) (v int64, present bool, o []byte, err error) {
	if msgp.IsNil(b) {
		return 0, false, b[1:], nil
	}
	v, o, err = msgp.ReadInt64Bytes(b)
	return v, err == nil, o, err
}

// UnmarshalMsg decodes one EngineCoreOutputs from the front of b and returns
// the bytes after it. It resets m first, so fields the frame omits read as
// vLLM's defaults rather than the previous message's values.
//
// It accepts an array of any length: missing trailing fields take their
// defaults, and fields beyond the eight it knows are skipped, as msgspec's
// array_like decoding does (so a newer vLLM may append fields). Types are
// checked as msgspec checks them: engine_index, wave_complete and
// start_wave are integers (any msgpack width, not bool, not float);
// timestamp is a float or an integer; outputs is an array (its elements are
// skipped); scheduler_stats is nil or a map decoded by
// [SchedulerStats.UnmarshalMsg]; utility_output is nil or any object
// (skipped); finished_requests is nil or an array of str.
//
// Errors are *[decodeguard.Error]s: ReasonDecode for a wrong shape or type,
// ReasonValidate for an integer beyond int64. Values are not range-checked
// here; see [EngineCoreOutputs.Validate]. UnmarshalMsg does not check str
// contents for valid UTF-8: [DecodeEngineCoreOutputs] runs decodeguard.Scan,
// which does. On error, m is partly filled and the returned slice is b.
func (m *EngineCoreOutputs) UnmarshalMsg(b []byte) ([]byte, error) {
	*m = EngineCoreOutputs{}
	orig := b
	if len(b) > 0 && msgp.NextType(b) != msgp.ArrayType {
		// The common junk frame (a port scanner's int, say): no msgp error
		// value to build.
		return orig, wireError(orig, orig, "EngineCoreOutputs: want an array", nil)
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return orig, wireError(orig, orig, "EngineCoreOutputs: want an array", err)
	}
	m.Fields = int(n)
	for i := uint32(0); i < n; i++ {
		at := b
		var detail string
		switch i {
		case 0:
			detail = "EngineCoreOutputs.engine_index: want an int"
			m.EngineIndex, b, err = msgp.ReadInt64Bytes(b)
		case 1:
			detail = "EngineCoreOutputs.outputs: want an array"
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			for j := uint32(0); err == nil && j < k; j++ {
				b, err = msgp.Skip(b)
			}
			m.OutputsLen = int(k)
		case 2:
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			m.HasStats = true
			b, err = m.Stats.UnmarshalMsg(b)
			if err != nil {
				return orig, rebase(err, orig, at)
			}
		case 3:
			detail = "EngineCoreOutputs.timestamp: want a float"
			m.Timestamp, b, err = readFloat(b)
		case 4:
			detail = "EngineCoreOutputs.utility_output: malformed"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			m.HasUtilityOutput = true
			b, err = msgp.Skip(b)
		case 5:
			detail = "EngineCoreOutputs.finished_requests: want nil or an array of str"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			for j := uint32(0); err == nil && j < k; j++ {
				_, b, err = msgp.ReadStringZC(b)
			}
			m.HasFinishedRequests, m.FinishedRequests = true, int(k)
		case 6:
			detail = "EngineCoreOutputs.wave_complete: want nil or an int"
			m.WaveComplete, m.HasWaveComplete, b, err = readOptInt(b)
		case 7:
			detail = "EngineCoreOutputs.start_wave: want nil or an int"
			m.StartWave, m.HasStartWave, b, err = readOptInt(b)
		default:
			detail = "EngineCoreOutputs: malformed extra field"
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return orig, wireError(orig, at, detail, err)
		}
	}
	return b, nil
}

// UnmarshalMsg decodes one SchedulerStats map from the front of b and returns
// the bytes after it. It resets s first. Keys must be str (msgspec decodes
// a dataclass from str keys only); the counts are integers and the usages
// floats or integers, as msgspec checks them; other keys' values are skipped
// unread. Errors are classified as by [EngineCoreOutputs.UnmarshalMsg], with
// offsets relative to b.
func (s *SchedulerStats) UnmarshalMsg(b []byte) ([]byte, error) {
	*s = SchedulerStats{}
	orig := b
	n, b, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return orig, wireError(orig, orig, "EngineCoreOutputs.scheduler_stats: want nil or a map", err)
	}
	for i := uint32(0); i < n; i++ {
		at := b
		var key []byte
		key, b, err = msgp.ReadStringZC(b)
		if err != nil {
			return orig, wireError(orig, at, "SchedulerStats: key is not a str", err)
		}
		at = b
		var detail string
		switch string(key) {
		case keyNumRunningReqs:
			detail = "SchedulerStats.num_running_reqs: want an int"
			s.NumRunningReqs, b, err = msgp.ReadInt64Bytes(b)
		case keyNumWaitingReqs:
			detail = "SchedulerStats.num_waiting_reqs: want an int"
			s.NumWaitingReqs, b, err = msgp.ReadInt64Bytes(b)
		case keyNumSkippedWaitingReqs:
			detail = "SchedulerStats.num_skipped_waiting_reqs: want an int"
			s.NumSkippedWaitingReqs, b, err = msgp.ReadInt64Bytes(b)
		case keyStepCounter:
			detail = "SchedulerStats.step_counter: want an int"
			s.StepCounter, b, err = msgp.ReadInt64Bytes(b)
		case keyCurrentWave:
			detail = "SchedulerStats.current_wave: want an int"
			s.CurrentWave, b, err = msgp.ReadInt64Bytes(b)
		case keyKVCacheUsage:
			detail = "SchedulerStats.kv_cache_usage: want a float"
			s.KVCacheUsage, b, err = readFloat(b)
		case keyEncoderCacheUsage:
			detail = "SchedulerStats.encoder_cache_usage: want a float"
			s.EncoderCacheUsage, b, err = readFloat(b)
		default:
			detail = "SchedulerStats: malformed value"
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return orig, wireError(orig, at, detail, err)
		}
	}
	return b, nil
}

// Validate checks the values the coordinator relies on and returns a
// ReasonValidate *[decodeguard.Error] for the first one out of range:
// a negative engine_index, a wave_complete or start_wave outside
// [0, MaxWave], or scheduler stats that fail [SchedulerStats.Validate].
// Whether a message belongs on the coordinator's socket at all (no request
// outputs, no utility output) and whether its engine index is known are
// [State.OnEngineOutput]'s checks.
func (m *EngineCoreOutputs) Validate() error {
	switch {
	case m.EngineIndex < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.engine_index is negative")
	case m.HasWaveComplete && (m.WaveComplete < 0 || m.WaveComplete > MaxWave):
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.wave_complete out of range")
	case m.HasStartWave && (m.StartWave < 0 || m.StartWave > MaxWave):
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.start_wave out of range")
	case m.HasStats:
		return m.Stats.Validate()
	}
	return nil
}

// Validate returns a ReasonValidate *[decodeguard.Error] when a count, the
// step counter or the wave is negative, or a cache usage is NaN, infinite or
// negative.
func (s *SchedulerStats) Validate() error {
	switch {
	case s.NumRunningReqs < 0, s.NumWaitingReqs < 0, s.NumSkippedWaitingReqs < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats: negative request count")
	case s.StepCounter < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.step_counter is negative")
	case s.CurrentWave < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.current_wave is negative")
	case !usageOK(s.KVCacheUsage):
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.kv_cache_usage is not a finite non-negative number")
	case !usageOK(s.EncoderCacheUsage):
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.encoder_cache_usage is not a finite non-negative number")
	}
	return nil
}

func usageOK(f float64) bool { return f >= 0 && f <= math.MaxFloat64 }

var errNilDestination = errors.New("coordinator: DecodeEngineCoreOutputs called with a nil destination")

// DecodeEngineCoreOutputs is the guarded decode of one back-output frame into
// dst (which it resets): decodeguard.Scan with the default limits, then
// [EngineCoreOutputs.UnmarshalMsg], then [EngineCoreOutputs.Validate]. It
// returns nil or a classified *[decodeguard.Error]:
//
//   - the Scan error (ReasonDecode: not well-formed msgpack, invalid UTF-8, a
//     composite map key, an ext type, trailing bytes...; ReasonOversize:
//     over 1 MiB, nested deeper than 32, too many objects);
//   - ReasonDecode for a wrong shape or type, ReasonValidate for a value out
//     of range (an integer beyond int64, a negative index, count or wave, a
//     NaN usage);
//   - ReasonDecoderPanic if the decoder panicked (it is not known to; the
//     recover is the frame boundary).
//
// A valid frame into a reused dst allocates nothing. A nil dst is a
// programming error and yields an unclassified error.
func DecodeEngineCoreOutputs(b []byte, dst *EngineCoreOutputs) error {
	return DecodeEngineCoreOutputsLimits(b, nil, dst)
}

// DecodeEngineCoreOutputsLimits is [DecodeEngineCoreOutputs] with Scan limits
// lim (nil means decodeguard's defaults).
func DecodeEngineCoreOutputsLimits(b []byte, lim *decodeguard.Limits, dst *EngineCoreOutputs) error {
	if dst == nil {
		return errNilDestination
	}
	if err := decodeguard.Scan(b, lim); err != nil {
		*dst = EngineCoreOutputs{}
		return err
	}
	if err := unmarshalGuarded(b, dst); err != nil {
		return err
	}
	return dst.Validate()
}

func unmarshalGuarded(b []byte, dst *EngineCoreOutputs) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &decodeguard.Error{
				Reason: decodeguard.ReasonDecoderPanic,
				Detail: "EngineCoreOutputs decoder panicked",
				Offset: -1,
				Err:    &decodeguard.PanicError{Value: r, Stack: debug.Stack()},
			}
		}
	}()
	rest, err := dst.UnmarshalMsg(b)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "bytes left after EngineCoreOutputs", Offset: len(b) - len(rest)}
	}
	return nil
}

// appendInt appends i with the smallest msgpack integer encoding, as
// Python's msgpack and msgspec choose it: positive fixint or uint 8/16/32/64
// for non-negative values, negative fixint or int 8/16/32/64 for negative
// ones. (msgp.AppendInt64 uses signed widths for positive values, which
// decode the same but are not byte-identical to what vLLM sends.)
func appendInt(dst []byte, i int64) []byte {
	if i >= 0 {
		return msgp.AppendUint64(dst, uint64(i))
	}
	return msgp.AppendInt64(dst, i)
}

func appendOptInt(dst []byte, v int64, present bool) []byte {
	if !present {
		return msgp.AppendNil(dst)
	}
	return appendInt(dst, v)
}

// AppendEngineCoreOutputs appends m encoded as vLLM's engine core encodes
// EngineCoreOutputs (msgspec, array_like, omit_defaults): an array of the
// fields up to the last one that differs from its default. Floats are
// float64 and integers take their smallest encoding, so the bytes equal
// vLLM's for the same values.
//
// m is the coordinator's view, which does not keep request outputs, the
// utility output or finished request ids: outputs is written as [] and
// utility_output and finished_requests as nil, whatever OutputsLen,
// HasUtilityOutput and FinishedRequests say. Fields is ignored.
// scheduler_stats is written by [AppendSchedulerStats] when HasStats is set.
// vLLM never sends timestamp 0 (its __post_init__ stamps time.monotonic()),
// so pass a real one to match its bytes.
func AppendEngineCoreOutputs(dst []byte, m *EngineCoreOutputs) []byte {
	n := 0
	if m.EngineIndex != 0 {
		n = 1
	}
	if m.HasStats {
		n = 3
	}
	if m.Timestamp != 0 {
		n = 4
	}
	if m.HasWaveComplete {
		n = 7
	}
	if m.HasStartWave {
		n = 8
	}
	dst = msgp.AppendArrayHeader(dst, uint32(n))
	for i := 0; i < n; i++ {
		switch i {
		case 0:
			dst = appendInt(dst, m.EngineIndex)
		case 1:
			dst = msgp.AppendArrayHeader(dst, 0)
		case 2:
			if m.HasStats {
				dst = AppendSchedulerStats(dst, &m.Stats)
			} else {
				dst = msgp.AppendNil(dst)
			}
		case 3:
			dst = msgp.AppendFloat64(dst, m.Timestamp)
		case 4, 5:
			dst = msgp.AppendNil(dst)
		case 6:
			dst = appendOptInt(dst, m.WaveComplete, m.HasWaveComplete)
		case 7:
			dst = appendOptInt(dst, m.StartWave, m.HasStartWave)
		}
	}
	return dst
}

// AppendSchedulerStats appends s as a map in vLLM's field order. The four
// keys the coordinator needs (num_running_reqs, num_waiting_reqs,
// step_counter, current_wave) are always written; num_skipped_waiting_reqs,
// kv_cache_usage and encoder_cache_usage only when non-zero. vLLM's engine
// writes every dataclass field (prefix_cache_stats and the rest too); any
// SchedulerStats decoder, vLLM's included, fills missing keys with the
// dataclass defaults, so the shorter map means the same.
func AppendSchedulerStats(dst []byte, s *SchedulerStats) []byte {
	n := uint32(4)
	if s.NumSkippedWaitingReqs != 0 {
		n++
	}
	if s.KVCacheUsage != 0 {
		n++
	}
	if s.EncoderCacheUsage != 0 {
		n++
	}
	dst = msgp.AppendMapHeader(dst, n)
	dst = msgp.AppendString(dst, keyNumRunningReqs)
	dst = appendInt(dst, s.NumRunningReqs)
	dst = msgp.AppendString(dst, keyNumWaitingReqs)
	dst = appendInt(dst, s.NumWaitingReqs)
	if s.NumSkippedWaitingReqs != 0 {
		dst = msgp.AppendString(dst, keyNumSkippedWaitingReqs)
		dst = appendInt(dst, s.NumSkippedWaitingReqs)
	}
	dst = msgp.AppendString(dst, keyStepCounter)
	dst = appendInt(dst, s.StepCounter)
	dst = msgp.AppendString(dst, keyCurrentWave)
	dst = appendInt(dst, s.CurrentWave)
	if s.KVCacheUsage != 0 {
		dst = msgp.AppendString(dst, keyKVCacheUsage)
		dst = msgp.AppendFloat64(dst, s.KVCacheUsage)
	}
	if s.EncoderCacheUsage != 0 {
		dst = msgp.AppendString(dst, keyEncoderCacheUsage)
		dst = msgp.AppendFloat64(dst, s.EncoderCacheUsage)
	}
	return dst
}
