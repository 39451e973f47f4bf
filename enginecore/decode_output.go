package enginecore

import (
	"encoding/binary"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

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
		o := &m.Outputs[j]
		switch p, n, nt, state := d.outputFast(b, o); state {
		case fastWhole:
			b = b[p:]
			continue // o.left is leftNothing
		case fastPrefix:
			b, err = d.outputRest(orig, b, o, p, n, nt)
		default:
			b, err = d.output(orig, b, o)
		}
		if err != nil {
			return b, err
		}
		// An output left clear after new_logprobs has finish_reason unset
		// and num_nans_in_logits 0: only others can fail the checks.
		if o.left == leftUnknown && o.invalid() && d.firstInvalid < 0 {
			d.firstInvalid = j
		}
	}
	return b, nil
}

// reset clears o for a new decode, keeping its slices' capacity. A
// sub-structure that is absent (not Present, nil array) is already clear:
// the decoder only fills one after marking it present, and resets it here
// the next time, so only present ones are cleared (an Output is large).
//
// o.left records what the decoder left set after new_token_ids, so the
// common output, request_id and new_token_ids with the rest nil
// (num_nans_in_logits 0), costs a few stores, and one with new_logprobs
// only clears that. A value built by hand, or one whose decode failed, has
// left unset (leftUnknown) and is cleared in full.
func (o *Output) reset() {
	o.Fields = 0
	o.RequestID = nil
	o.NewTokenIDs = o.NewTokenIDs[:0]
	switch o.left {
	case leftNothing:
	case leftLogprobs:
		o.NewLogprobs.clearKeep()
		o.left = leftNothing
	default:
		o.resetRest()
	}
}

// The values of Output.left.
const (
	leftUnknown  uint8 = iota // clear every field
	leftNothing               // every field after new_token_ids is clear
	leftLogprobs              // only new_logprobs may be set
)

// resetRest is reset's clearing of every field after new_token_ids.
func (o *Output) resetRest() {
	o.left = leftNothing
	if o.NewLogprobs.Present {
		o.NewLogprobs.clearKeep()
	}
	if o.NewPromptLogprobs.Present {
		o.NewPromptLogprobs.clearKeep()
	}
	if !o.PoolingOutput.IsNil() {
		o.PoolingOutput = Array{Shape: o.PoolingOutput.Shape[:0]}
	}
	o.HasFinishReason, o.FinishReason = false, 0
	o.StopReason = StopReason{}
	o.HasEvents, o.Events = false, o.Events[:0]
	o.KVTransferParams, o.ECTransferParams, o.TraceHeaders, o.PrefillStats = nil, nil, nil, nil
	if !o.RoutedExperts.IsNil() {
		o.RoutedExperts = Array{Shape: o.RoutedExperts.Shape[:0]}
	}
	o.NumNaNsInLogits = 0
	o.MMCacheMissHashes = nil
	if o.NewSamplingMask.Present {
		o.NewSamplingMask = o.NewSamplingMask.kept()
	}
	o.SpecDecodeMetrics = nil
}

// clearKeep clears l in place, keeping its slices' capacity (no
// temporary: an Output is large, and this runs per output with logprobs).
func (l *Logprobs) clearKeep() {
	l.Present, l.Fields = false, 0
	l.TokenIDs.clearKeep()
	l.Logprobs.clearKeep()
	l.SampledRanks.clearKeep()
	l.HasCuNumGenerated, l.CuNumGenerated = false, l.CuNumGenerated[:0]
}

// clearKeep clears a in place, keeping its shape's capacity.
func (a *Array) clearKeep() {
	*a = Array{Shape: a.Shape[:0]}
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
	// An output that had new_logprobs only keeps them through reset: a new
	// new_logprobs overwrites every part of them (logprobs), and they are
	// cleared after the loop if this output has none. A failed decode
	// leaves left unknown, so the next reset clears everything.
	staleLP := o.left == leftLogprobs
	if staleLP {
		o.left = leftNothing
	}
	o.reset()
	at := b
	var n uint32
	var err error
	if len(b) > 0 && b[0]&0xf0 == 0x90 { // fixarray, inline
		n, b = uint32(b[0]&0x0f), b[1:]
	} else if n, b, err = readArrayHeader(b); err != nil {
		return b, fail(orig, at, "EngineCoreOutput: want an array", err)
	}
	if n < 2 {
		return b, failf(orig, at, decodeguard.ReasonDecode, "EngineCoreOutput: want at least request_id and new_token_ids, got "+strconv.Itoa(int(n))+" fields")
	}
	o.Fields = int(n)
	o.left = leftUnknown // until the output is whole: a failed decode leaves it to a full reset
	if err := d.take(orig, at, int(n), len(b)); err != nil {
		return b, err
	}
	// dirty records whether a field after new_logprobs was given a value,
	// lp whether new_logprobs was: vLLM writes the full 14-field struct,
	// and in the common output every field after new_token_ids is nil
	// (num_nans_in_logits 0), so those skip the per-field decode and leave
	// little for reset.
	// request_id and new_token_ids, the two fields every output has.
	at = b
	// A fixstr of ASCII, the common request id, inline; anything else
	// through str (the same checks).
	if len(b) > 0 && b[0]&0xe0 == 0xa0 && len(b) > int(b[0]&0x1f) && asciiOnly(b[1:1+int(b[0]&0x1f)]) {
		k := 1 + int(b[0]&0x1f)
		o.RequestID, b = b[1:k], b[k:]
	} else if o.RequestID, b, err = str(orig, b, "EngineCoreOutput.request_id: want a str"); err != nil {
		return b, fail(orig, at, "EngineCoreOutput.request_id: want a str", err)
	}
	at = b
	var k uint32
	if len(b) > 0 && b[0]&0xf0 == 0x90 {
		k, b = uint32(b[0]&0x0f), b[1:]
	} else {
		k, b, err = readArrayHeader(b)
	}
	if err == nil {
		err = d.take(orig, at, int(k), len(b))
	}
	toks := o.NewTokenIDs // emptied by reset; appended in a local, stored once
	for j := uint32(0); err == nil && j < k; j++ {
		var v int64
		switch {
		case len(b) > 0 && b[0] <= 0x7f:
			v, b = int64(b[0]), b[1:]
		case len(b) >= 3 && b[0] == 0xcd: // uint16, most vocabularies' ids
			v, b = int64(binary.BigEndian.Uint16(b[1:3])), b[3:]
		default:
			v, b, err = readInt(b)
		}
		toks = append(toks, v)
	}
	o.NewTokenIDs = toks
	if err != nil {
		return b, fail(orig, at, "EngineCoreOutput.new_token_ids: want an array of int", err)
	}
	return d.fields(orig, b, o, n, staleLP)
}

// fields decodes the fields after new_token_ids of an output of n fields
// whose first two output has decoded (o.left is leftUnknown), and sets
// o.left. staleLP reports that o.NewLogprobs still holds the previous
// decode's logprobs (see output).
func (d *decoder) fields(orig, b []byte, o *Output, n uint32, staleLP bool) ([]byte, error) {
	var at []byte
	var err error
	// dirty records whether a field after new_logprobs was given a value,
	// lp whether new_logprobs was: vLLM writes the full 14-field struct,
	// and in the common output every field after new_token_ids is nil
	// (num_nans_in_logits 0), so those skip the per-field decode and leave
	// little for reset.
	dirty, lp := false, false
	for i := uint32(2); i < n; i++ {
		if i == 3 && n == 14 && len(b) >= 11 && binary.LittleEndian.Uint64(b) == allNil8 &&
			binary.LittleEndian.Uint16(b[8:]) == 0xc0c0 && b[10] == 0 {
			// Fields 3 to 12 nil and num_nans_in_logits 0, as vLLM
			// sends an output with logprobs: the same as the nil run and
			// the fixint case below.
			b = b[11:]
			break
		}
		if i == 2 && n > 12 && len(b) >= 11 && binary.LittleEndian.Uint64(b) == allNil8 &&
			b[8] == 0xc0 && b[9] == 0xc0 && b[10] == 0xc0 {
			// Fields 2 to 12 all nil, as vLLM sends most outputs: the
			// same as eleven turns of the nil case below.
			i, b = 12, b[11:]
			continue
		}
		if i != 13 && len(b) > 0 && b[0] == 0xc0 {
			// nil, which every field after new_token_ids but
			// num_nans_in_logits accepts as "absent", exactly as the
			// cases below do for a nil (they leave the reset field as is);
			// and the nils that follow it, up to num_nans_in_logits.
			end := n
			if i < 13 {
				end = min(n, 13)
			}
			b = b[1:]
			for i+1 < end && len(b) > 0 && b[0] == 0xc0 {
				i, b = i+1, b[1:]
			}
			continue
		}
		lp = lp || i == 2
		dirty = dirty || (i >= 3 && i != 13)
		at = b
		var detail string
		switch i {
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
				o.StopReason.Str, b, err = str(orig, b, detail)
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
			o.KVTransferParams, b, err = d.raw(orig, b)
		case 9:
			o.ECTransferParams, b, err = d.raw(orig, b)
		case 10:
			o.TraceHeaders, b, err = d.raw(orig, b)
		case 11:
			o.PrefillStats, b, err = d.raw(orig, b)
		case 12:
			b, err = d.array(orig, b, &o.RoutedExperts, "EngineCoreOutput.routed_experts")
			if err != nil {
				return b, err
			}
		case 13:
			detail = "EngineCoreOutput.num_nans_in_logits: want an int"
			if len(b) > 0 && b[0] <= 0x7f { // positive fixint (0, the common value), inline
				if b[0] != 0 { // reset left it 0: spare the store (and its cache line)
					o.NumNaNsInLogits = int64(b[0])
				}
				b = b[1:]
			} else {
				o.NumNaNsInLogits, b, err = readInt(b)
			}
			dirty = dirty || o.NumNaNsInLogits != 0
		case 14:
			detail = "EngineCoreOutput.mm_cache_miss_hashes: want nil or an array"
			o.MMCacheMissHashes, b, err = d.raw(orig, b)
			if err == nil && o.MMCacheMissHashes != nil && msgp.NextType(o.MMCacheMissHashes) != msgp.ArrayType {
				return b, failf(orig, at, decodeguard.ReasonDecode, detail)
			}
		case 15:
			b, err = d.samplingMask(orig, b, &o.NewSamplingMask)
			if err != nil {
				return b, err
			}
		case 16:
			o.SpecDecodeMetrics, b, err = d.raw(orig, b)
		default:
			_, b, err = d.raw(orig, b)
		}
		if err != nil {
			if detail == "" {
				detail = "EngineCoreOutput field " + strconv.Itoa(int(i)) + ": malformed"
			}
			return b, fail(orig, at, detail, err)
		}
	}
	if staleLP && !lp {
		o.NewLogprobs.clearKeep()
	}
	switch {
	case dirty:
		o.left = leftUnknown
	case lp:
		o.left = leftLogprobs
	default:
		o.left = leftNothing
	}
	return b, nil
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
	n, b, err := readArrayHeader(b)
	if err != nil || n < 3 {
		return b, fail(orig, at, names.what, err)
	}
	l.Present, l.Fields = true, int(n)
	if n < 4 { // no cu_num_generated_tokens: clear a previous decode's (see output)
		l.HasCuNumGenerated, l.CuNumGenerated = false, l.CuNumGenerated[:0]
	}
	// The three arrays, each through arrayFast when it can (array would
	// call it too, but its own frame costs as much again).
	if u, ok := d.arrayFast(b, &l.TokenIDs); ok {
		b = b[u:]
	} else if b, err = d.array(orig, b, &l.TokenIDs, names.ids); err != nil {
		return b, err
	}
	if u, ok := d.arrayFast(b, &l.Logprobs); ok {
		b = b[u:]
	} else if b, err = d.array(orig, b, &l.Logprobs, names.lps); err != nil {
		return b, err
	}
	if u, ok := d.arrayFast(b, &l.SampledRanks); ok {
		b = b[u:]
	} else if b, err = d.array(orig, b, &l.SampledRanks, names.ranks); err != nil {
		return b, err
	}
	for i := uint32(3); i < n; i++ {
		at = b
		if i == 3 {
			l.HasCuNumGenerated, l.CuNumGenerated, b, err = d.optInts(orig, b, l.CuNumGenerated)
			if err != nil {
				return b, fail(orig, at, names.cu, err)
			}
			continue
		}
		if _, b, err = d.raw(orig, b); err != nil {
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
			s.HasCuNumGenerated, s.CuNumGenerated, b, err = d.optInts(orig, b, s.CuNumGenerated)
			if err != nil {
				err = fail(orig, at, what+".cu_num_generated_tokens: want nil or an array of int", err)
			}
		case 3:
			b, err = d.array(orig, b, &s.Logprobs, what+".logprobs")
		default:
			if _, b, err = d.raw(orig, b); err != nil {
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
func (d *decoder) optInts(orig, b []byte, dst []int64) (bool, []int64, []byte, error) {
	dst = dst[:0]
	if msgp.IsNil(b) {
		return false, dst, b[1:], nil
	}
	at := b
	k, b, err := msgp.ReadArrayHeaderBytes(b)
	if err == nil {
		err = d.take(orig, at, int(k), len(b))
	}
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
	if err := d.take(orig, at, int(k), len(b)); err != nil {
		return b, err
	}
	for j := uint32(0); j < k; j++ {
		at = b
		var pairs uint32
		pairs, b, err = msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return b, fail(orig, at, what+": an event is not a map", err)
		}
		if err = d.take(orig, at, 2*int(pairs), len(b)); err != nil {
			return b, err
		}
		var ev Event
		for p := uint32(0); p < pairs; p++ {
			at = b
			var key []byte
			key, b, err = str(orig, b, what+": event key is not a str")
			if err != nil {
				return b, err
			}
			at = b
			switch string(key) {
			case "type":
				var v int64
				v, b, err = readInt(b)
				ev.Type = EventType(v)
			case "timestamp":
				ev.Timestamp, b, err = msgpscan.ReadFloat(b)
			default:
				_, b, err = d.raw(orig, b)
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
