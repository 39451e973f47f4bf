package enginecore

import (
	"math"

	"github.com/tinylib/msgp/msgp"
)

// defaultZeroCopyThreshold is vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD: an
// array of this many bytes or more travels in an aux frame of its own.
const defaultZeroCopyThreshold = 256

// Encoder writes EngineCoreOutputs messages byte for byte as vLLM's engine
// core does (msgspec, its numpy/torch array encoding and aux frames), for
// Go engines, simulators and tests: EngineCoreOutputs as an array of all 8
// fields and each EngineCoreOutput as an array of every field
// (OutputFields), defaults included, because msgspec ignores omit_defaults
// for array_like structs; UtilityOutput as 3 elements; SchedulerStats as a
// map of every dataclass field. The zero
// value is ready to use with vLLM's default threshold.
//
// An Encoder reuses its buffers: the frames Encode returns are valid until
// its next call, and aux frames are the arrays' own Data (not copied).
type Encoder struct {
	// Threshold is the size in bytes from which an array's data goes to an
	// aux frame; 0 means defaultZeroCopyThreshold, a negative value keeps
	// every array inline. Scalars (shape []) are always inline, as in vLLM.
	Threshold int
	// OutputFields is the number of fields each EngineCoreOutput is written
	// with: msgspec writes every field of an array_like struct, so this is
	// the field count of the engine's release. 0 means outputFieldsDefault
	// (14); values are clamped to [outputFieldsDefault, outputFieldsMax].
	// A field after the 14th that is set (MMCacheMissHashes,
	// NewSamplingMask, SpecDecodeMetrics) widens the array to hold it.
	OutputFields int

	buf    []byte
	frames [][]byte
}

// Encode returns m's frames: the msgpack body, then one aux frame per
// out-of-line array. Fields, OutputsLen, FinishedRequests, Frame and the
// other counts a decoder fills are ignored: the slices are what is
// written. m.Timestamp should be set (vLLM never sends 0).
func (e *Encoder) Encode(m *Message) [][]byte {
	e.frames = append(e.frames[:0], nil)
	e.buf = e.appendMessage(e.buf[:0], m)
	e.frames[0] = e.buf
	return e.frames
}

// outputFieldsDefault is the number of fields of vLLM's EngineCoreOutput
// at the commit of zmqguard's golden vectors (vLLM main of 2026-08-07):
// request_id through num_nans_in_logits. outputFieldsMax counts the three
// later fields the decoder also knows (mm_cache_miss_hashes,
// new_sampling_mask, spec_decode_metrics).
const (
	outputFieldsDefault = 14
	outputFieldsMax     = 17
)

func (e *Encoder) outputFields() int {
	if e.OutputFields <= outputFieldsDefault {
		return outputFieldsDefault
	}
	return min(e.OutputFields, outputFieldsMax)
}

func (e *Encoder) threshold() int {
	switch {
	case e.Threshold == 0:
		return defaultZeroCopyThreshold
	case e.Threshold < 0:
		return math.MaxInt
	}
	return e.Threshold
}

// appendHeader appends h as a one-frame EngineCoreOutputs with no request
// outputs, no utility output and no finished requests (the coordinator's
// messages), as vLLM writes it: all 8 fields, defaults included.
// OutputsLen, HasUtilityOutput and FinishedRequests are ignored; Fields too.
func appendHeader(dst []byte, h *Header) []byte {
	var e Encoder
	return e.appendMessage(dst, &Message{Header: headerOnly(h)})
}

func headerOnly(h *Header) Header {
	c := *h
	c.HasUtilityOutput, c.HasFinishedRequests = false, false
	return c
}

func (e *Encoder) appendMessage(dst []byte, m *Message) []byte {
	// msgspec writes an array_like struct with every field, defaults
	// included: omit_defaults does not shorten arrays.
	dst = msgp.AppendArrayHeader(dst, outputsFields)
	dst = appendInt(dst, m.EngineIndex)
	dst = msgp.AppendArrayHeader(dst, uint32(len(m.Outputs)))
	for j := range m.Outputs {
		dst = e.appendOutput(dst, &m.Outputs[j])
	}
	switch {
	case !m.HasStats:
		dst = msgp.AppendNil(dst)
	case m.StatsRaw != nil:
		dst = append(dst, m.StatsRaw...)
	default:
		dst = appendSchedulerStats(dst, &m.Stats)
	}
	dst = msgp.AppendFloat64(dst, m.Timestamp)
	if m.HasUtilityOutput {
		dst = appendUtility(dst, &m.Utility)
	} else {
		dst = msgp.AppendNil(dst)
	}
	if m.HasFinishedRequests {
		dst = msgp.AppendArrayHeader(dst, uint32(len(m.FinishedRequestIDs)))
		for _, id := range m.FinishedRequestIDs {
			dst = msgp.AppendStringFromBytes(dst, id)
		}
	} else {
		dst = msgp.AppendNil(dst)
	}
	dst = appendOptInt(dst, m.WaveComplete, m.HasWaveComplete)
	return appendOptInt(dst, m.StartWave, m.HasStartWave)
}

func (e *Encoder) appendOutput(dst []byte, o *Output) []byte {
	// Every field of the struct, as msgspec writes an array_like struct;
	// the fields after the vectors' commit only when asked for or set.
	n := e.outputFields()
	if o.MMCacheMissHashes != nil {
		n = max(n, 15)
	}
	if o.NewSamplingMask.Present {
		n = max(n, 16)
	}
	if o.SpecDecodeMetrics != nil {
		n = max(n, 17)
	}
	dst = msgp.AppendArrayHeader(dst, uint32(n))
	for i := range n {
		switch i {
		case 0:
			dst = msgp.AppendStringFromBytes(dst, o.RequestID)
		case 1:
			dst = msgp.AppendArrayHeader(dst, uint32(len(o.NewTokenIDs)))
			for _, t := range o.NewTokenIDs {
				dst = appendInt(dst, t)
			}
		case 2:
			dst = e.appendLogprobs(dst, &o.NewLogprobs)
		case 3:
			dst = e.appendLogprobs(dst, &o.NewPromptLogprobs)
		case 4:
			dst = e.appendArray(dst, &o.PoolingOutput)
		case 5:
			dst = appendOptInt(dst, int64(o.FinishReason), o.HasFinishReason)
		case 6:
			switch o.StopReason.Kind {
			case StopInt:
				dst = appendInt(dst, o.StopReason.Int)
			case StopStr:
				dst = msgp.AppendStringFromBytes(dst, o.StopReason.Str)
			default:
				dst = msgp.AppendNil(dst)
			}
		case 7:
			if !o.HasEvents {
				dst = msgp.AppendNil(dst)
				break
			}
			dst = msgp.AppendArrayHeader(dst, uint32(len(o.Events)))
			for _, ev := range o.Events {
				dst = msgp.AppendMapHeader(dst, 2)
				dst = msgp.AppendString(dst, "type")
				dst = appendInt(dst, int64(ev.Type))
				dst = msgp.AppendString(dst, "timestamp")
				dst = msgp.AppendFloat64(dst, ev.Timestamp)
			}
		case 8:
			dst = appendRaw(dst, o.KVTransferParams)
		case 9:
			dst = appendRaw(dst, o.ECTransferParams)
		case 10:
			dst = appendRaw(dst, o.TraceHeaders)
		case 11:
			dst = appendRaw(dst, o.PrefillStats)
		case 12:
			dst = e.appendArray(dst, &o.RoutedExperts)
		case 13:
			dst = appendInt(dst, o.NumNaNsInLogits)
		case 14:
			dst = appendRaw(dst, o.MMCacheMissHashes)
		case 15:
			dst = e.appendSamplingMask(dst, &o.NewSamplingMask)
		case 16:
			dst = appendRaw(dst, o.SpecDecodeMetrics)
		}
	}
	return dst
}

func appendRaw(dst []byte, r []byte) []byte {
	if r == nil {
		return msgp.AppendNil(dst)
	}
	return append(dst, r...)
}

func appendOptInts(dst []byte, has bool, v []int64) []byte {
	if !has {
		return msgp.AppendNil(dst)
	}
	dst = msgp.AppendArrayHeader(dst, uint32(len(v)))
	for _, x := range v {
		dst = appendInt(dst, x)
	}
	return dst
}

func (e *Encoder) appendLogprobs(dst []byte, l *Logprobs) []byte {
	if !l.Present {
		return msgp.AppendNil(dst)
	}
	four := l.Fields >= 4 || l.HasCuNumGenerated
	if four {
		dst = msgp.AppendArrayHeader(dst, 4)
	} else {
		dst = msgp.AppendArrayHeader(dst, 3)
	}
	dst = e.appendArray(dst, &l.TokenIDs)
	dst = e.appendArray(dst, &l.Logprobs)
	dst = e.appendArray(dst, &l.SampledRanks)
	if four {
		dst = appendOptInts(dst, l.HasCuNumGenerated, l.CuNumGenerated)
	}
	return dst
}

func (e *Encoder) appendSamplingMask(dst []byte, s *SamplingMask) []byte {
	if !s.Present {
		return msgp.AppendNil(dst)
	}
	n := 4
	if s.Fields == 3 && s.Logprobs.IsNil() {
		n = 3
	}
	dst = msgp.AppendArrayHeader(dst, uint32(n))
	dst = e.appendArray(dst, &s.TokenIDs)
	dst = e.appendArray(dst, &s.Offsets)
	dst = appendOptInts(dst, s.HasCuNumGenerated, s.CuNumGenerated)
	if n == 4 {
		dst = e.appendArray(dst, &s.Logprobs)
	}
	return dst
}

// appendArray writes a as [dtype, shape, data], data inline as ext 3 below
// the threshold (and for scalars), else as the index of a new aux frame.
func (e *Encoder) appendArray(dst []byte, a *Array) []byte {
	if a.IsNil() {
		return msgp.AppendNil(dst)
	}
	name := a.DType.numpy()
	if a.Torch || name == "" {
		name = a.DType.String()
	}
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendString(dst, name)
	dst = msgp.AppendArrayHeader(dst, uint32(len(a.Shape)))
	for _, d := range a.Shape {
		dst = appendInt(dst, int64(d))
	}
	if len(a.Shape) == 0 || len(a.Data) < e.threshold() {
		return appendExt(dst, extRawView, a.Data)
	}
	dst = appendInt(dst, int64(len(e.frames)))
	e.frames = append(e.frames, a.Data)
	return dst
}

// appendExt writes an ext object with Python msgpack's header choice:
// fixext for 1, 2, 4, 8 and 16 bytes, else ext 8/16/32.
func appendExt(dst []byte, typ int8, data []byte) []byte {
	n := len(data)
	switch {
	case n == 1:
		dst = append(dst, 0xd4)
	case n == 2:
		dst = append(dst, 0xd5)
	case n == 4:
		dst = append(dst, 0xd6)
	case n == 8:
		dst = append(dst, 0xd7)
	case n == 16:
		dst = append(dst, 0xd8)
	case n < 1<<8:
		dst = append(dst, 0xc7, byte(n))
	case n < 1<<16:
		dst = append(dst, 0xc8, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0xc9, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	dst = append(dst, byte(typ))
	return append(dst, data...)
}

func appendUtility(dst []byte, u *UtilityOutput) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	if u.Special < 0 {
		dst = appendInt(dst, u.Special)
	} else {
		dst = msgp.AppendUint64(dst, u.CallID)
	}
	if u.HasFailure {
		dst = msgp.AppendStringFromBytes(dst, u.FailureMessage)
	} else {
		dst = msgp.AppendNil(dst)
	}
	if !u.HasResult {
		return msgp.AppendNil(dst)
	}
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = appendRaw(dst, u.ResultType)
	return appendRaw(dst, u.Result)
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

// statsDefaultsTail is the msgpack of the SchedulerStats fields zmqguard
// does not model, at their dataclass defaults, in vLLM's field order (vLLM
// main of 2026-08-07): iteration_details nil, prefix_cache_stats a
// PrefixCacheStats of zeros, connector_prefix_cache_stats nil,
// kv_cache_eviction_events [], spec_decoding_stats nil, kv_connector_stats
// nil, waiting_lora_adapters {}, running_lora_adapters {}, cudagraph_stats
// nil, perf_stats nil.
var statsDefaultsTail = func() []byte {
	b := msgp.AppendString(nil, "iteration_details")
	b = msgp.AppendNil(b)
	b = msgp.AppendString(b, "prefix_cache_stats")
	b = msgp.AppendMapHeader(b, 7)
	b = msgp.AppendString(b, "reset")
	b = msgp.AppendBool(b, false)
	for _, k := range []string{"requests", "queries", "hits", "preempted_requests", "preempted_queries", "preempted_hits"} {
		b = msgp.AppendString(b, k)
		b = appendInt(b, 0)
	}
	for _, k := range []string{"connector_prefix_cache_stats", "kv_cache_eviction_events", "spec_decoding_stats",
		"kv_connector_stats", "waiting_lora_adapters", "running_lora_adapters", "cudagraph_stats", "perf_stats"} {
		b = msgp.AppendString(b, k)
		switch k {
		case "kv_cache_eviction_events":
			b = msgp.AppendArrayHeader(b, 0)
		case "waiting_lora_adapters", "running_lora_adapters":
			b = msgp.AppendMapHeader(b, 0)
		default:
			b = msgp.AppendNil(b)
		}
	}
	return b
}()

// statsFields is the number of SchedulerStats fields at vLLM main of
// 2026-08-07: the six typed ones and the ten of statsDefaultsTail.
const statsFields = 16

// appendSchedulerStats appends s as vLLM's engine writes its SchedulerStats
// dataclass: a map of every field in declaration order (16 at vLLM main of
// 2026-08-07), the six zmqguard models (num_running_reqs,
// num_waiting_reqs, num_skipped_waiting_reqs, step_counter, current_wave,
// kv_cache_usage) from s and the others (prefix-cache, spec-decoding,
// connector, LoRA, cudagraph and perf stats) at their defaults. It is byte
// for byte what vLLM sends for SchedulerStats() with those six fields set.
// EncoderCacheUsage, a field of older releases only, is written (as a
// 17th key, encoder_cache_usage) only when non-zero.
func appendSchedulerStats(dst []byte, s *SchedulerStats) []byte {
	n := uint32(statsFields)
	if s.EncoderCacheUsage != 0 {
		n++
	}
	dst = msgp.AppendMapHeader(dst, n)
	dst = msgp.AppendString(dst, keyNumRunningReqs)
	dst = appendInt(dst, s.NumRunningReqs)
	dst = msgp.AppendString(dst, keyNumWaitingReqs)
	dst = appendInt(dst, s.NumWaitingReqs)
	dst = msgp.AppendString(dst, keyNumSkippedWaitingReqs)
	dst = appendInt(dst, s.NumSkippedWaitingReqs)
	dst = msgp.AppendString(dst, keyStepCounter)
	dst = appendInt(dst, s.StepCounter)
	dst = msgp.AppendString(dst, keyCurrentWave)
	dst = appendInt(dst, s.CurrentWave)
	dst = msgp.AppendString(dst, keyKVCacheUsage)
	dst = msgp.AppendFloat64(dst, s.KVCacheUsage)
	dst = append(dst, statsDefaultsTail...)
	if s.EncoderCacheUsage != 0 {
		dst = msgp.AppendString(dst, keyEncoderCacheUsage)
		dst = msgp.AppendFloat64(dst, s.EncoderCacheUsage)
	}
	return dst
}
