package enginecore

import (
	"math"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/dpwire"
)

// DefaultZeroCopyThreshold is vLLM's VLLM_MSGPACK_ZERO_COPY_THRESHOLD: an
// array of this many bytes or more travels in an aux frame of its own.
const DefaultZeroCopyThreshold = 256

// Encoder writes EngineCoreOutputs messages as vLLM's engine core does
// (msgspec with array_like and omit_defaults, its numpy/torch array
// encoding and aux frames), for Go engines, simulators and tests. The zero
// value is ready to use with vLLM's default threshold.
//
// An Encoder reuses its buffers: the frames Encode returns are valid until
// its next call, and aux frames are the arrays' own Data (not copied).
type Encoder struct {
	// Threshold is the size in bytes from which an array's data goes to an
	// aux frame; 0 means DefaultZeroCopyThreshold, a negative value keeps
	// every array inline. Scalars (shape []) are always inline, as in vLLM.
	Threshold int

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

func (e *Encoder) threshold() int {
	switch {
	case e.Threshold == 0:
		return DefaultZeroCopyThreshold
	case e.Threshold < 0:
		return math.MaxInt
	}
	return e.Threshold
}

// AppendHeader appends h as a one-frame EngineCoreOutputs with no request
// outputs, no utility output and no finished requests (the coordinator's
// messages): fields up to the last one that differs from its default.
// OutputsLen, HasUtilityOutput and FinishedRequests are ignored; Fields too.
func AppendHeader(dst []byte, h *Header) []byte {
	var e Encoder
	return e.appendMessage(dst, &Message{Header: headerOnly(h)})
}

func headerOnly(h *Header) Header {
	c := *h
	c.HasUtilityOutput, c.HasFinishedRequests = false, false
	return c
}

func (e *Encoder) appendMessage(dst []byte, m *Message) []byte {
	n := 0
	if m.EngineIndex != 0 {
		n = 1
	}
	if len(m.Outputs) > 0 {
		n = 2
	}
	if m.HasStats {
		n = 3
	}
	if m.Timestamp != 0 {
		n = 4
	}
	if m.HasUtilityOutput {
		n = 5
	}
	if m.HasFinishedRequests {
		n = 6
	}
	if m.HasWaveComplete {
		n = 7
	}
	if m.HasStartWave {
		n = 8
	}
	dst = msgp.AppendArrayHeader(dst, uint32(n))
	for i := range n {
		switch i {
		case 0:
			dst = appendInt(dst, m.EngineIndex)
		case 1:
			dst = msgp.AppendArrayHeader(dst, uint32(len(m.Outputs)))
			for j := range m.Outputs {
				dst = e.appendOutput(dst, &m.Outputs[j])
			}
		case 2:
			if m.HasStats {
				dst = AppendSchedulerStats(dst, &m.Stats)
			} else {
				dst = msgp.AppendNil(dst)
			}
		case 3:
			dst = msgp.AppendFloat64(dst, m.Timestamp)
		case 4:
			if m.HasUtilityOutput {
				dst = appendUtility(dst, &m.Utility)
			} else {
				dst = msgp.AppendNil(dst)
			}
		case 5:
			if m.HasFinishedRequests {
				dst = msgp.AppendArrayHeader(dst, uint32(len(m.FinishedRequestIDs)))
				for _, id := range m.FinishedRequestIDs {
					dst = msgp.AppendStringFromBytes(dst, id)
				}
			} else {
				dst = msgp.AppendNil(dst)
			}
		case 6:
			dst = appendOptInt(dst, m.WaveComplete, m.HasWaveComplete)
		case 7:
			dst = appendOptInt(dst, m.StartWave, m.HasStartWave)
		}
	}
	return dst
}

func (e *Encoder) appendOutput(dst []byte, o *Output) []byte {
	n := 2
	set := func(present bool, field int) {
		if present {
			n = field + 1
		}
	}
	set(o.NewLogprobs.Present, 2)
	set(o.NewPromptLogprobs.Present, 3)
	set(!o.PoolingOutput.IsNil(), 4)
	set(o.HasFinishReason, 5)
	set(o.StopReason.Kind != StopNone, 6)
	set(o.HasEvents, 7)
	set(o.KVTransferParams != nil, 8)
	set(o.ECTransferParams != nil, 9)
	set(o.TraceHeaders != nil, 10)
	set(o.PrefillStats != nil, 11)
	set(!o.RoutedExperts.IsNil(), 12)
	set(o.NumNaNsInLogits != 0, 13)
	set(o.MMCacheMissHashes != nil, 14)
	set(o.NewSamplingMask.Present, 15)
	set(o.SpecDecodeMetrics != nil, 16)
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

func appendRaw(dst []byte, r Raw) []byte {
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
	name := a.DType.Numpy()
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
		return appendExt(dst, ExtRawView, a.Data)
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
	dst = msgp.AppendUint64(dst, u.CallID)
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
func appendInt(dst []byte, i int64) []byte { return dpwire.AppendInt(dst, i) }

func appendOptInt(dst []byte, v int64, present bool) []byte {
	return dpwire.AppendOptInt(dst, v, present)
}

// AppendSchedulerStats appends s as a map in vLLM's field order. The four
// keys the coordinator needs (num_running_reqs, num_waiting_reqs,
// step_counter, current_wave) are always written; num_skipped_waiting_reqs,
// kv_cache_usage and encoder_cache_usage only when non-zero. vLLM's engine
// writes every dataclass field; any SchedulerStats decoder, vLLM's
// included, fills missing keys with the dataclass defaults, so the shorter
// map means the same.
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
