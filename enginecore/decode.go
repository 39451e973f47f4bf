package enginecore

import (
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// ExtRawView is the msgpack extension type vLLM uses for a buffer's raw
// bytes inline (CUSTOM_TYPE_RAW_VIEW). Types 1 and 2 are pickle and
// cloudpickle, which zmqguard refuses.
const ExtRawView int8 = 3

// DefaultMaxFrames is the default bound on the frames of one message
// (the body and its aux buffers). vLLM sends one aux frame per array of
// 256 bytes or more, so a large batch with logprobs needs hundreds.
const DefaultMaxFrames = 1024

// Limits bounds what [Decode] accepts. The zero value means the defaults.
type Limits struct {
	// MaxFrames bounds the number of frames (body and aux buffers
	// together). 0 means DefaultMaxFrames.
	MaxFrames int
	// Scan are the limits decodeguard.Scan applies to the body (frame 0).
	// Its AllowExt is ignored: the body may hold ext type 3 only.
	Scan decodeguard.Limits
}

var (
	errNoFrames   = decodeguard.NewError(decodeguard.ReasonEnvelope, "EngineCoreOutputs: a message with no frames")
	rawViewOnly   = decodeguard.ExtTypes{}.With(ExtRawView)
	errAuxTwiceAt = "EngineCoreOutputs: aux frame referenced twice: "
)

// Decode decodes one EngineCoreOutputs message, frames[0] the msgpack body
// and frames[1:] the aux buffers its arrays reference, into dst (which it
// resets, keeping its slices' capacity). lim nil means the defaults.
//
// Before anything is allocated or any view built it checks the frame
// count against Limits.MaxFrames (ReasonOversize) and runs decodeguard.Scan
// on the body with ext type 3 as the only extension allowed. Then it
// decodes every field (see [Message]), checking each array as the package
// doc describes, and finally that every aux frame was referenced exactly
// once, and [Message.Validate].
//
// Errors are classified *[decodeguard.Error]s (ReasonOversize, ReasonDecode,
// ReasonValidate, ReasonDecoderPanic) whose detail names the field and never
// carries peer bytes other than escaped dtype names; offsets are into the
// body. On error dst is partly filled and must not be used.
func Decode(frames [][]byte, dst *Message, lim *Limits) error {
	if dst == nil {
		return errNilDestination
	}
	maxFrames, scan := DefaultMaxFrames, decodeguard.Limits{}
	if lim != nil {
		scan = lim.Scan
		if lim.MaxFrames > 0 {
			maxFrames = lim.MaxFrames
		}
	}
	scan.AllowExt = rawViewOnly
	switch {
	case len(frames) == 0:
		return errNoFrames
	case len(frames) > maxFrames:
		return decodeguard.NewError(decodeguard.ReasonOversize,
			"EngineCoreOutputs: "+strconv.Itoa(len(frames))+" frames, over the limit of "+strconv.Itoa(maxFrames))
	}
	if err := decodeguard.Scan(frames[0], &scan); err != nil {
		return err
	}
	words := (len(frames) + 63) / 64
	if cap(dst.used) < words {
		dst.used = make([]uint64, words)
	}
	dst.used = dst.used[:words]
	clear(dst.used)
	if err := decodeFull(frames, dst); err != nil {
		return err
	}
	for i := 1; i < len(frames); i++ {
		if dst.used[i/64]&(1<<(i%64)) == 0 {
			return decodeguard.NewError(decodeguard.ReasonDecode,
				"EngineCoreOutputs: aux frame "+strconv.Itoa(i)+" is not referenced by any array")
		}
	}
	return dst.Validate()
}

func decodeFull(frames [][]byte, dst *Message) (err error) {
	defer recoverPanic(&err)
	d := decoder{m: dst, frames: frames}
	rest, err := dst.Header.unmarshal(frames[0], &d)
	if err == nil && len(rest) != 0 {
		err = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "bytes left after EngineCoreOutputs", Offset: len(frames[0]) - len(rest)}
	}
	if !dst.HasUtilityOutput {
		dst.Utility = UtilityOutput{}
	}
	if !dst.HasFinishedRequests {
		dst.FinishedRequestIDs = dst.FinishedRequestIDs[:0]
	}
	if err == nil && len(dst.Outputs) != dst.OutputsLen {
		dst.Outputs = dst.Outputs[:0]
	}
	return err
}

// Validate checks the values a front-end relies on: [Header.Validate], and
// per output a non-negative finish_reason and num_nans_in_logits.
func (m *Message) Validate() error {
	if err := m.Header.Validate(); err != nil {
		return err
	}
	for i := range m.Outputs {
		o := &m.Outputs[i]
		if o.HasFinishReason && o.FinishReason < 0 {
			return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutput.finish_reason is negative (output "+strconv.Itoa(i)+")")
		}
		if o.NumNaNsInLogits < 0 {
			return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutput.num_nans_in_logits is negative (output "+strconv.Itoa(i)+")")
		}
	}
	return nil
}

// decoder carries the state of one full decode: the message, the frames
// and which aux frames have been referenced (in m.used).
type decoder struct {
	m      *Message
	frames [][]byte
}

// fail classifies an error of the object at `at` (a suffix of orig),
// prefixing detail with what.
func fail(orig, at []byte, detail string, cause error) error {
	return wireError(orig, at, detail, cause)
}

func failf(orig, at []byte, r decodeguard.Reason, detail string) error {
	return &decodeguard.Error{Reason: r, Detail: detail, Offset: len(orig) - len(at)}
}

// outputs decodes k EngineCoreOutputs from b into d.m.Outputs.
func (d *decoder) outputs(orig, b []byte, k int) ([]byte, error) {
	m := d.m
	if cap(m.Outputs) < k {
		grown := make([]Output, k)
		copy(grown, m.Outputs[:cap(m.Outputs)])
		m.Outputs = grown
	}
	m.Outputs = m.Outputs[:k]
	var err error
	for j := range k {
		b, err = d.output(orig, b, &m.Outputs[j])
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// reset clears o for a new decode, keeping its slices' capacity.
func (o *Output) reset() {
	*o = Output{
		NewTokenIDs:       o.NewTokenIDs[:0],
		Events:            o.Events[:0],
		NewLogprobs:       o.NewLogprobs.kept(),
		NewPromptLogprobs: o.NewPromptLogprobs.kept(),
		PoolingOutput:     Array{Shape: o.PoolingOutput.Shape[:0]},
		RoutedExperts:     Array{Shape: o.RoutedExperts.Shape[:0]},
		NewSamplingMask:   o.NewSamplingMask.kept(),
	}
}

func (l *Logprobs) kept() Logprobs {
	return Logprobs{
		TokenIDs:       Array{Shape: l.TokenIDs.Shape[:0]},
		Logprobs:       Array{Shape: l.Logprobs.Shape[:0]},
		SampledRanks:   Array{Shape: l.SampledRanks.Shape[:0]},
		CuNumGenerated: l.CuNumGenerated[:0],
	}
}

func (s *SamplingMask) kept() SamplingMask {
	return SamplingMask{
		TokenIDs:       Array{Shape: s.TokenIDs.Shape[:0]},
		Offsets:        Array{Shape: s.Offsets.Shape[:0]},
		Logprobs:       Array{Shape: s.Logprobs.Shape[:0]},
		CuNumGenerated: s.CuNumGenerated[:0],
	}
}

func (d *decoder) output(orig, b []byte, o *Output) ([]byte, error) {
	o.reset()
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, fail(orig, at, "EngineCoreOutput: want an array", err)
	}
	if n < 2 {
		return b, failf(orig, at, decodeguard.ReasonDecode, "EngineCoreOutput: want at least request_id and new_token_ids, got "+strconv.Itoa(int(n))+" fields")
	}
	o.Fields = int(n)
	for i := uint32(0); i < n; i++ {
		at = b
		var detail string
		switch i {
		case 0:
			detail = "EngineCoreOutput.request_id: want a str"
			o.RequestID, b, err = msgp.ReadStringZC(b)
		case 1:
			detail = "EngineCoreOutput.new_token_ids: want an array of int"
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			for j := uint32(0); err == nil && j < k; j++ {
				var v int64
				v, b, err = readInt(b)
				o.NewTokenIDs = append(o.NewTokenIDs, v)
			}
		case 2:
			b, err = d.logprobs(orig, b, &o.NewLogprobs, &newLogprobsNames)
			if err != nil {
				return b, err
			}
		case 3:
			b, err = d.logprobs(orig, b, &o.NewPromptLogprobs, &promptLogprobsNames)
			if err != nil {
				return b, err
			}
		case 4:
			b, err = d.array(orig, b, &o.PoolingOutput, "EngineCoreOutput.pooling_output")
			if err != nil {
				return b, err
			}
		case 5:
			detail = "EngineCoreOutput.finish_reason: want nil or an int"
			var v int64
			v, o.HasFinishReason, b, err = readOptInt(b)
			o.FinishReason = FinishReason(v)
		case 6:
			detail = "EngineCoreOutput.stop_reason: want nil, an int or a str"
			switch {
			case msgp.IsNil(b):
				b = b[1:]
			case msgp.NextType(b) == msgp.StrType:
				o.StopReason.Kind = StopStr
				o.StopReason.Str, b, err = msgp.ReadStringZC(b)
			default:
				o.StopReason.Kind = StopInt
				o.StopReason.Int, b, err = readInt(b)
			}
		case 7:
			b, err = d.events(orig, b, o)
			if err != nil {
				return b, err
			}
		case 8:
			o.KVTransferParams, b, err = raw(b)
		case 9:
			o.ECTransferParams, b, err = raw(b)
		case 10:
			o.TraceHeaders, b, err = raw(b)
		case 11:
			o.PrefillStats, b, err = raw(b)
		case 12:
			b, err = d.array(orig, b, &o.RoutedExperts, "EngineCoreOutput.routed_experts")
			if err != nil {
				return b, err
			}
		case 13:
			detail = "EngineCoreOutput.num_nans_in_logits: want an int"
			o.NumNaNsInLogits, b, err = readInt(b)
		case 14:
			detail = "EngineCoreOutput.mm_cache_miss_hashes: want nil or an array"
			o.MMCacheMissHashes, b, err = raw(b)
			if err == nil && o.MMCacheMissHashes != nil && msgp.NextType(o.MMCacheMissHashes) != msgp.ArrayType {
				return b, failf(orig, at, decodeguard.ReasonDecode, detail)
			}
		case 15:
			b, err = d.samplingMask(orig, b, &o.NewSamplingMask)
			if err != nil {
				return b, err
			}
		case 16:
			o.SpecDecodeMetrics, b, err = raw(b)
		default:
			_, b, err = raw(b)
		}
		if err != nil {
			if detail == "" {
				detail = "EngineCoreOutput field " + strconv.Itoa(int(i)) + ": malformed"
			}
			return b, fail(orig, at, detail, err)
		}
	}
	return b, nil
}

// raw returns the object at the front of b as a view (nil for msgpack nil).
func raw(b []byte) (Raw, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	rest, err := msgp.Skip(b)
	if err != nil {
		return nil, b, err
	}
	return Raw(b[:len(b)-len(rest)]), rest, nil
}

// logprobsNames names a logprobs field's parts in errors (constants, so
// that the happy path builds no strings).
type logprobsNames struct{ what, ids, lps, ranks, cu, extra string }

var (
	newLogprobsNames = logprobsNames{
		"EngineCoreOutput.new_logprobs: want nil or [token_ids, logprobs, ranks(, cu_num_generated_tokens)]",
		"EngineCoreOutput.new_logprobs.logprob_token_ids",
		"EngineCoreOutput.new_logprobs.logprobs",
		"EngineCoreOutput.new_logprobs.sampled_token_ranks",
		"EngineCoreOutput.new_logprobs.cu_num_generated_tokens: want nil or an array of int",
		"EngineCoreOutput.new_logprobs: malformed extra field",
	}
	promptLogprobsNames = logprobsNames{
		"EngineCoreOutput.new_prompt_logprobs_tensors: want nil or [token_ids, logprobs, ranks]",
		"EngineCoreOutput.new_prompt_logprobs_tensors.logprob_token_ids",
		"EngineCoreOutput.new_prompt_logprobs_tensors.logprobs",
		"EngineCoreOutput.new_prompt_logprobs_tensors.selected_token_ranks",
		"EngineCoreOutput.new_prompt_logprobs_tensors.cu_num_generated_tokens: want nil or an array of int",
		"EngineCoreOutput.new_prompt_logprobs_tensors: malformed extra field",
	}
)

func (d *decoder) logprobs(orig, b []byte, l *Logprobs, names *logprobsNames) ([]byte, error) {
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 3 {
		return b, fail(orig, at, names.what, err)
	}
	l.Present, l.Fields = true, int(n)
	if b, err = d.array(orig, b, &l.TokenIDs, names.ids); err != nil {
		return b, err
	}
	if b, err = d.array(orig, b, &l.Logprobs, names.lps); err != nil {
		return b, err
	}
	if b, err = d.array(orig, b, &l.SampledRanks, names.ranks); err != nil {
		return b, err
	}
	for i := uint32(3); i < n; i++ {
		at = b
		if i == 3 {
			l.HasCuNumGenerated, l.CuNumGenerated, b, err = optInts(b, l.CuNumGenerated)
			if err != nil {
				return b, fail(orig, at, names.cu, err)
			}
			continue
		}
		if _, b, err = raw(b); err != nil {
			return b, fail(orig, at, names.extra, err)
		}
	}
	return b, nil
}

func (d *decoder) samplingMask(orig, b []byte, s *SamplingMask) ([]byte, error) {
	const what = "EngineCoreOutput.new_sampling_mask"
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return b, fail(orig, at, what+": want nil or [token_ids, offsets, cu_num_generated_tokens, logprobs]", err)
	}
	// Constant concatenations below are folded by the compiler.
	s.Present, s.Fields = true, int(n)
	for i := uint32(0); i < n; i++ {
		at = b
		switch i {
		case 0:
			b, err = d.array(orig, b, &s.TokenIDs, what+".token_ids")
		case 1:
			b, err = d.array(orig, b, &s.Offsets, what+".offsets")
		case 2:
			s.HasCuNumGenerated, s.CuNumGenerated, b, err = optInts(b, s.CuNumGenerated)
			if err != nil {
				err = fail(orig, at, what+".cu_num_generated_tokens: want nil or an array of int", err)
			}
		case 3:
			b, err = d.array(orig, b, &s.Logprobs, what+".logprobs")
		default:
			if _, b, err = raw(b); err != nil {
				err = fail(orig, at, what+": malformed extra field", err)
			}
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// optInts reads nil or an array of ints into dst[:0].
func optInts(b []byte, dst []int64) (bool, []int64, []byte, error) {
	dst = dst[:0]
	if msgp.IsNil(b) {
		return false, dst, b[1:], nil
	}
	k, b, err := msgp.ReadArrayHeaderBytes(b)
	for j := uint32(0); err == nil && j < k; j++ {
		var v int64
		v, b, err = readInt(b)
		dst = append(dst, v)
	}
	return err == nil, dst, b, err
}

func (d *decoder) events(orig, b []byte, o *Output) ([]byte, error) {
	const what = "EngineCoreOutput.events"
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	at := b
	k, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, fail(orig, at, what+": want nil or an array", err)
	}
	o.HasEvents = true
	for j := uint32(0); j < k; j++ {
		at = b
		var pairs uint32
		pairs, b, err = msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return b, fail(orig, at, what+": an event is not a map", err)
		}
		var ev Event
		for p := uint32(0); p < pairs; p++ {
			at = b
			var key []byte
			key, b, err = msgp.ReadStringZC(b)
			if err != nil {
				return b, fail(orig, at, what+": event key is not a str", err)
			}
			at = b
			switch string(key) {
			case "type":
				var v int64
				v, b, err = readInt(b)
				ev.Type = EventType(v)
			case "timestamp":
				ev.Timestamp, b, err = readFloat(b)
			default:
				_, b, err = raw(b)
			}
			if err != nil {
				return b, fail(orig, at, what+"."+safeKey(key)+": wrong type", err)
			}
		}
		o.Events = append(o.Events, ev)
	}
	return b, nil
}

// safeKey returns a known key's name, or "?" (peer text never goes into an
// error detail unescaped).
func safeKey(k []byte) string {
	switch string(k) {
	case "type":
		return "type"
	case "timestamp":
		return "timestamp"
	}
	return "?"
}

func (d *decoder) utility(orig, b []byte) ([]byte, error) {
	const what = "EngineCoreOutputs.utility_output"
	u := &d.m.Utility
	*u = UtilityOutput{}
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return b, fail(orig, at, what+": want [call_id, failure_message, result]", err)
	}
	for i := uint32(0); i < n; i++ {
		at = b
		var detail string
		switch i {
		case 0:
			detail = what + ".call_id: want an unsigned int"
			u.CallID, b, err = msgp.ReadUint64Bytes(b)
		case 1:
			detail = what + ".failure_message: want nil or a str"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			u.HasFailure = true
			u.FailureMessage, b, err = msgp.ReadStringZC(b)
		case 2:
			detail = what + ".result: want nil or [type_info, value]"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			if err == nil && k != 2 {
				return b, failf(orig, at, decodeguard.ReasonDecode, detail)
			}
			if err == nil {
				u.HasResult = true
				u.ResultType, b, err = raw(b)
			}
			if err == nil {
				var v Raw
				v, b, err = raw(b)
				if v == nil {
					v = Raw(nilRaw)
				}
				u.Result = v
			}
		default:
			detail = what + ": malformed extra field"
			_, b, err = raw(b)
		}
		if err != nil {
			return b, fail(orig, at, detail, err)
		}
	}
	return b, nil
}

// nilRaw is the msgpack encoding of nil, for a utility result whose value
// is None (Result stays non-nil so that HasResult round-trips).
var nilRaw = []byte{0xc0}

func (d *decoder) skip(orig, b []byte) ([]byte, error) {
	at := b
	_, b, err := raw(b)
	if err != nil {
		return b, fail(orig, at, "EngineCoreOutputs: malformed extra field", err)
	}
	return b, nil
}

// readExt reads an ext object's type and payload.
func readExt(b []byte) (typ int8, data, rest []byte, ok bool) {
	if len(b) < 2 {
		return 0, nil, b, false
	}
	var n, hdr int
	switch b[0] {
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		n, hdr = 1<<(b[0]-0xd4), 1
	case 0xc7:
		n, hdr = int(b[1]), 2
	case 0xc8:
		if len(b) < 3 {
			return 0, nil, b, false
		}
		n, hdr = int(b[1])<<8|int(b[2]), 3
	case 0xc9:
		if len(b) < 5 {
			return 0, nil, b, false
		}
		n, hdr = int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]), 5
	default:
		return 0, nil, b, false
	}
	if len(b)-hdr-1 < n {
		return 0, nil, b, false
	}
	typ = int8(b[hdr])
	return typ, b[hdr+1 : hdr+1+n], b[hdr+1+n:], true
}

// array decodes one array or tensor (or nil) at the front of b into a.
func (d *decoder) array(orig, b []byte, a *Array, what string) ([]byte, error) {
	*a = Array{Shape: a.Shape[:0]}
	if msgp.IsNil(b) {
		return b[1:], nil
	}
	at := b
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 3 {
		return b, fail(orig, at, what+": want nil or [dtype, shape, data]", err)
	}
	dsAt := b
	ds, b, err := msgp.ReadStringZC(b)
	if err != nil {
		return b, fail(orig, dsAt, what+".dtype: want a str", err)
	}
	dt, torch, ok := parseDType(ds)
	if !ok {
		return b, failf(orig, dsAt, decodeguard.ReasonDecode, what+": unknown dtype "+strconv.Quote(decodeguard.EscapeText(string(ds), 32)))
	}
	shAt := b
	k, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, fail(orig, shAt, what+".shape: want an array of int", err)
	}
	if k > MaxDims {
		return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: "+strconv.Itoa(int(k))+" dimensions, over the limit of "+strconv.Itoa(MaxDims))
	}
	shape := a.Shape
	for j := uint32(0); j < k; j++ {
		var v int64
		v, b, err = readInt(b)
		if err != nil {
			return b, fail(orig, shAt, what+".shape: want an array of int", err)
		}
		if int64(int(v)) != v {
			return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: dimension out of range")
		}
		shape = append(shape, int(v))
	}
	dataAt := b
	var data []byte
	frame := 0
	if len(b) == 0 {
		return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: missing")
	}
	// msgp's NextType reports ext 3 as a complex64, so look at the byte.
	t := msgp.NextType(b)
	if c := b[0]; (c >= 0xd4 && c <= 0xd8) || (c >= 0xc7 && c <= 0xc9) {
		t = msgp.ExtensionType
	}
	switch t {
	case msgp.ExtensionType:
		typ, payload, rest, ok := readExt(b)
		if !ok {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: malformed ext")
		}
		if typ != ExtRawView {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: ext type "+strconv.Itoa(int(typ))+", want 3 (raw bytes)")
		}
		data, b = payload, rest
	case msgp.IntType, msgp.UintType:
		var idx int64
		idx, b, err = readInt(b)
		if err != nil || idx < 1 || idx >= int64(len(d.frames)) {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode,
				what+".data: aux frame index out of range [1, "+strconv.Itoa(len(d.frames))+")")
		}
		i := int(idx)
		if d.m.used[i/64]&(1<<(i%64)) != 0 {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, errAuxTwiceAt+strconv.Itoa(i))
		}
		d.m.used[i/64] |= 1 << (i % 64)
		data, frame = d.frames[i], i
	case msgp.BinType:
		data, b, err = msgp.ReadBytesZC(b)
		if err != nil {
			return b, fail(orig, dataAt, what+".data: malformed bin", err)
		}
	default:
		return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: want ext 3 or an aux frame index")
	}
	if e := checkShape(shape, dt.Size(), len(data)); e != nil {
		e.Detail = what + ": " + e.Detail
		e.Offset = len(orig) - len(at)
		return b, e
	}
	*a = Array{DType: dt, Torch: torch, Shape: shape, Data: data, Frame: frame}
	return b, nil
}
