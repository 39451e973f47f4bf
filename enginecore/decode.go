package enginecore

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/msgpscan"
	"github.com/zmqguard/zmqguard/internal/ratelog"
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
	// Scan are the limits msgpscan.Scan applies to the body (frame 0).
	// Its AllowExt is ignored: the body may hold ext type 3 only.
	Scan decodeguard.Limits
}

var (
	errNoFrames   = decodeguard.NewError(decodeguard.ReasonEnvelope, "EngineCoreOutputs: a message with no frames")
	rawViewOnly   = []int8{ExtRawView}
	errAuxTwiceAt = "EngineCoreOutputs: aux frame referenced twice: "
)

// Decode decodes one EngineCoreOutputs message, frames[0] the msgpack body
// and frames[1:] the aux buffers its arrays reference, into dst (which it
// resets, keeping its slices' capacity). lim nil means the defaults.
//
// It checks the frame count against Limits.MaxFrames and the body's size
// against Limits.Scan.MaxBytes first (ReasonOversize). Then it decodes
// every field (see [Message]) in one pass that makes msgpscan.Scan's
// checks as it goes rather than in a pass of its own: every str it reads
// must be valid UTF-8; every uninterpreted sub-object (kv_transfer_params,
// a utility result, unknown stats keys' values, unknown trailing fields)
// is checked by msgpscan.Scan, with ext type 3 as the only extension
// allowed and MaxDepth reduced by the depth of its position; a container
// header's count is checked against the bytes left before any slice grows
// for it; and the element counts of all containers plus the byte length
// of every uninterpreted sub-object are charged to one MaxElements budget
// (an upper bound on what Scan counts). Arrays are checked as the package
// doc describes. Finally every aux frame must have been referenced exactly
// once, and [Message.Validate] must pass.
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
	if maxBytes := scanMaxBytes(&scan); len(frames[0]) > maxBytes {
		return decodeguard.NewError(decodeguard.ReasonOversize,
			"EngineCoreOutputs: body of "+strconv.Itoa(len(frames[0]))+" bytes, over the limit of "+strconv.Itoa(maxBytes))
	}
	if len(frames[0]) == 0 {
		return decodeguard.NewError(decodeguard.ReasonDecode, "EngineCoreOutputs: empty body frame")
	}
	words := (len(frames) + 63) / 64
	if cap(dst.used) < words {
		dst.used = make([]uint64, words)
	}
	dst.used = dst.used[:words]
	clear(dst.used)
	firstInvalid, err := decodeFull(frames, dst, &scan)
	if err != nil {
		return err
	}
	for i := 1; i < len(frames); i++ {
		if dst.used[i/64]&(1<<(i%64)) == 0 {
			return decodeguard.NewError(decodeguard.ReasonDecode,
				"EngineCoreOutputs: aux frame "+strconv.Itoa(i)+" is not referenced by any array")
		}
	}
	// dst.Validate(), with the per-output checks made while decoding: the
	// first output that fails them, if any, is firstInvalid.
	if err := dst.Header.Validate(); err != nil {
		return err
	}
	if firstInvalid >= 0 {
		return dst.Outputs[firstInvalid].validate(firstInvalid)
	}
	return nil
}

func scanMaxBytes(l *decodeguard.Limits) int {
	if l.MaxBytes > 0 {
		return l.MaxBytes
	}
	return msgpscan.DefaultMaxBytes
}

// typedDepth is the deepest a typed field nests (EngineCoreOutputs >
// outputs > EngineCoreOutput > new_logprobs > array > shape); an
// uninterpreted sub-object may nest MaxDepth minus this.
const typedDepth = 6

func decodeFull(frames [][]byte, dst *Message, scan *decodeguard.Limits) (firstInvalid int, err error) {
	defer recoverPanic(&err)
	d := decoder{m: dst, frames: frames, rawLim: *scan, firstInvalid: -1}
	defer func() { firstInvalid = d.firstInvalid }()
	d.budget = scan.MaxElements
	if d.budget <= 0 {
		d.budget = msgpscan.DefaultMaxElements
	}
	if d.rawLim.MaxDepth <= 0 {
		d.rawLim.MaxDepth = msgpscan.DefaultMaxDepth
	}
	d.rawLim.MaxDepth = max(d.rawLim.MaxDepth-typedDepth, 1)
	rest, err := dst.Header.unmarshal(frames[0], &d)
	if err == nil && len(rest) != 0 {
		err = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "bytes left after EngineCoreOutputs", Offset: len(frames[0]) - len(rest)}
	}
	if !dst.HasUtilityOutput {
		dst.Utility = UtilityOutput{}
	}
	if !dst.HasStats {
		dst.StatsRaw = nil
	}
	if !dst.HasFinishedRequests {
		dst.FinishedRequestIDs = dst.FinishedRequestIDs[:0]
	}
	if err == nil && len(dst.Outputs) != dst.OutputsLen {
		dst.Outputs = dst.Outputs[:0]
	}
	return d.firstInvalid, err
}

// Validate checks the values a front-end relies on: [Header.Validate], and
// per output a non-negative finish_reason and num_nans_in_logits.
func (m *Message) Validate() error {
	if err := m.Header.Validate(); err != nil {
		return err
	}
	for i := range m.Outputs {
		if o := &m.Outputs[i]; o.invalid() {
			return o.validate(i)
		}
	}
	return nil
}

// invalid reports whether o fails Validate's per-output checks.
func (o *Output) invalid() bool {
	return (o.HasFinishReason && o.FinishReason < 0) || o.NumNaNsInLogits < 0
}

// validate returns Validate's error for o, output i (nil if it passes).
func (o *Output) validate(i int) error {
	if o.HasFinishReason && o.FinishReason < 0 {
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutput.finish_reason is negative (output "+strconv.Itoa(i)+")")
	}
	if o.NumNaNsInLogits < 0 {
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutput.num_nans_in_logits is negative (output "+strconv.Itoa(i)+")")
	}
	return nil
}

// decoder carries the state of one full decode: the message, the frames
// and which aux frames have been referenced (in m.used).
type decoder struct {
	m      *Message
	frames [][]byte
	rawLim decodeguard.Limits // for uninterpreted sub-objects
	budget int                // MaxElements left

	// exact is DecodeHeader's one pass: m is nil (outputs, the utility
	// output and finished request ids are checked, not kept), budget counts
	// objects exactly as msgpscan.Scan does, uninterpreted sub-objects
	// are checked by sub at the depth of their position, and rawLim holds
	// the caller's limits with MaxDepth resolved.
	exact bool

	// firstInvalid is the index of the first output that fails
	// Message.Validate's per-output checks, -1 if none (full decode).
	firstInvalid int
}

// sub checks the uninterpreted object at the front of b, at nesting depth
// `depth` of the frame, with msgpscan.ScanPrefix under the caller's
// limits (exact mode), charges the objects inside it to the budget, and
// returns the bytes after it.
func (d *decoder) sub(orig, b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return b, failf(orig, b, decodeguard.ReasonDecode, "EngineCoreOutputs: truncated: input ends where an object should start")
	}
	lim := d.rawLim
	lim.MaxElements = d.budget + 1 // the object itself is charged already
	if lim.MaxDepth -= depth - 1; lim.MaxDepth < 1 {
		if c := b[0]; c&0xe0 == 0x80 || (c >= 0xdc && c <= 0xdf) { // a container
			return b, failf(orig, b, decodeguard.ReasonOversize, "EngineCoreOutputs: nesting deeper than MaxDepth")
		}
		lim.MaxDepth = 1
	}
	n, objs, err := msgpscan.ScanPrefix(b, &lim)
	if err != nil {
		c := decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "malformed sub-object", Offset: len(orig) - len(b)}
		if e, ok := err.(*decodeguard.Error); ok {
			c.Reason, c.Detail = e.Reason, e.Detail
			if n >= 0 {
				c.Offset += n
			}
		}
		return b, &c
	}
	d.budget -= objs - 1
	return b[n:], nil
}

// nested is exact mode's depth check for a typed container at depth 2.
func (d *decoder) nested(orig, at []byte) error {
	if d.exact && d.rawLim.MaxDepth < 2 {
		return failf(orig, at, decodeguard.ReasonOversize, "EngineCoreOutputs: nesting deeper than MaxDepth")
	}
	return nil
}

// fail classifies an error of the object at `at` (a suffix of orig) with
// detail, unless cause is already classified.
func fail(orig, at []byte, detail string, cause error) error {
	if e, ok := cause.(*decodeguard.Error); ok {
		return e
	}
	return wireError(orig, at, detail, cause)
}

var errBudget = "EngineCoreOutputs: more objects than MaxElements"

// take charges k elements of a container at `at` with left bytes after
// its header: each element needs at least one byte, and the total is
// bounded by MaxElements.
func (d *decoder) take(orig, at []byte, k, left int) error {
	if k > left {
		return failf(orig, at, decodeguard.ReasonDecode, "EngineCoreOutputs: container length exceeds the bytes left")
	}
	if d.budget -= k; d.budget < 0 {
		return failf(orig, at, decodeguard.ReasonOversize, errBudget)
	}
	return nil
}

// str reads a str that must be valid UTF-8.
func str(orig, b []byte, detail string) ([]byte, []byte, error) {
	at := b
	s, b, err := readStr(b)
	if err != nil {
		return nil, at, wireError(orig, at, detail, err)
	}
	if !utf8.Valid(s) {
		return nil, at, failf(orig, at, decodeguard.ReasonDecode, detail+" (not valid UTF-8)")
	}
	return s, b, nil
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
		o := &m.Outputs[j]
		b, err = d.output(orig, b, o)
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
	// dirty records whether a field after new_logprobs was given a value,
	// lp whether new_logprobs was: vLLM writes the full 14-field struct,
	// and in the common output every field after new_token_ids is nil
	// (num_nans_in_logits 0), so those skip the per-field decode and leave
	// little for reset.
	dirty, lp := false, false
	for i := uint32(2); i < n; i++ {
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

// allNil8 is eight msgpack nils read as a little-endian word.
const allNil8 = 0xc0c0c0c0c0c0c0c0

// asciiOnly reports whether s is all ASCII (and so valid UTF-8), eight
// bytes at a time.
func asciiOnly(s []byte) bool {
	for len(s) >= 8 {
		if binary.LittleEndian.Uint64(s)&0x8080808080808080 != 0 {
			return false
		}
		s = s[8:]
	}
	for _, c := range s {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// trailingDetail is msgpscan.Scan's detail for bytes after an object:
// scanning a suffix of the body, it marks the end of the first object.
const trailingDetail = "trailing bytes after the top-level object"

// raw returns the object at the front of b, checked by msgpscan.Scan
// under d.rawLim, as a view (nil for msgpack nil), and charges its length
// to the element budget.
func (d *decoder) raw(orig, b []byte) (Raw, []byte, error) {
	if msgp.IsNil(b) {
		return nil, b[1:], nil
	}
	if len(b) == 0 {
		return nil, b, failf(orig, b, decodeguard.ReasonDecode, "EngineCoreOutputs: truncated: input ends where an object should start")
	}
	n := len(b)
	off, err := msgpscan.ScanOffset(b, &d.rawLim)
	if err != nil {
		e, ok := err.(*decodeguard.Error)
		if !ok || e.Detail != trailingDetail {
			c := decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "malformed sub-object", Offset: len(orig) - len(b)}
			if ok {
				c.Reason, c.Detail = e.Reason, e.Detail
				if off >= 0 {
					c.Offset += off
				}
			}
			return nil, b, &c
		}
		n = off
	}
	if d.budget -= n; d.budget < 0 {
		return nil, b, failf(orig, b, decodeguard.ReasonOversize, errBudget)
	}
	return Raw(b[:n]), b[n:], nil
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
				ev.Timestamp, b, err = readFloat(b)
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
			detail = what + ".call_id: want an int"
			if len(b) > 0 && (b[0] >= 0xe0 || (b[0] >= 0xd0 && b[0] <= 0xd3)) {
				// A negative call id (a signed msgpack int): vLLM's
				// notifications. A signed width holding a non-negative
				// value is an ordinary id.
				var v int64
				if v, b, err = msgp.ReadInt64Bytes(b); err == nil {
					if v < 0 {
						u.Special = v
					} else {
						u.CallID = uint64(v)
					}
				}
				break
			}
			u.CallID, b, err = msgp.ReadUint64Bytes(b)
		case 1:
			detail = what + ".failure_message: want nil or a str"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			u.HasFailure = true
			u.FailureMessage, b, err = str(orig, b, detail)
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
				u.ResultType, b, err = d.raw(orig, b)
			}
			if err == nil {
				var v Raw
				v, b, err = d.raw(orig, b)
				if v == nil {
					v = Raw(nilRaw)
				}
				u.Result = v
			}
		default:
			detail = what + ": malformed extra field"
			_, b, err = d.raw(orig, b)
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
	_, b, err := d.raw(orig, b)
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

// readArrayHeader reads an array header, fixarray inline.
func readArrayHeader(b []byte) (uint32, []byte, error) {
	if len(b) > 0 && b[0]&0xf0 == 0x90 {
		return uint32(b[0] & 0x0f), b[1:], nil
	}
	return msgp.ReadArrayHeaderBytes(b)
}

// readStr reads a str without copying, fixstr inline.
func readStr(b []byte) ([]byte, []byte, error) {
	if len(b) > 0 && b[0]&0xe0 == 0xa0 {
		if n := int(b[0] & 0x1f); len(b) > n {
			return b[1 : 1+n], b[1+n:], nil
		}
	}
	return msgp.ReadStringZC(b)
}

// array decodes one array or tensor (or nil) at the front of b into a.
func (d *decoder) array(orig, b []byte, a *Array, what string) ([]byte, error) {
	if msgp.IsNil(b) {
		if a.DType != DTypeNone {
			*a = Array{Shape: a.Shape[:0]}
		}
		return b[1:], nil
	}
	at := b
	var n uint32
	var err error
	if len(b) > 0 && b[0] == 0x93 { // fixarray of 3, inline
		n, b = 3, b[1:]
	} else {
		n, b, err = readArrayHeader(b)
	}
	if err != nil || n != 3 {
		return b, fail(orig, at, what+": want nil or [dtype, shape, data]", err)
	}
	dsAt := b
	var ds []byte
	if len(b) > 0 && b[0]&0xe0 == 0xa0 && len(b) > int(b[0]&0x1f) { // fixstr, inline
		k := 1 + int(b[0]&0x1f)
		ds, b = b[1:k], b[k:]
	} else if ds, b, err = readStr(b); err != nil {
		return b, fail(orig, dsAt, what+".dtype: want a str", err)
	}
	dt, torch, ok := parseDType(ds)
	if !ok {
		return b, failf(orig, dsAt, decodeguard.ReasonDecode, what+": unknown dtype "+strconv.Quote(ratelog.Escape(string(ds), 32)))
	}
	shAt := b
	var k uint32
	if len(b) > 0 && b[0]&0xf0 == 0x90 { // fixarray, inline
		k, b = uint32(b[0]&0x0f), b[1:]
	} else {
		k, b, err = readArrayHeader(b)
	}
	if err != nil {
		return b, fail(orig, shAt, what+".shape: want an array of int", err)
	}
	if k > MaxDims {
		return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: "+strconv.Itoa(int(k))+" dimensions, over the limit of "+strconv.Itoa(MaxDims))
	}
	if d.budget -= 4 + int(k); d.budget < 0 { // the array, its three parts, the dims
		return b, failf(orig, at, decodeguard.ReasonOversize, errBudget)
	}
	shape := a.Shape[:0]
	for j := uint32(0); j < k; j++ {
		var v int64
		if len(b) > 0 && b[0] <= 0x7f { // positive fixint, inline
			v, b = int64(b[0]), b[1:]
		} else if v, b, err = readInt(b); err != nil {
			return b, fail(orig, shAt, what+".shape: want an array of int", err)
		}
		if int64(int(v)) != v {
			return b, failf(orig, shAt, decodeguard.ReasonOversize, what+".shape: dimension out of range")
		}
		shape = append(shape, int(v))
	}
	dataAt := b
	if len(b) == 0 {
		return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: missing")
	}
	var data []byte
	frame := 0
	switch c := b[0]; {
	case c <= 0x7f || c == 0xcc || c == 0xcd || c == 0xce || c == 0xcf || c >= 0xe0 ||
		c == 0xd0 || c == 0xd1 || c == 0xd2 || c == 0xd3: // an int: an aux frame index
		var idx int64
		if c <= 0x7f { // positive fixint, inline
			idx, b = int64(c), b[1:]
		} else {
			idx, b, err = readInt(b)
		}
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
	case (c >= 0xd4 && c <= 0xd8) || (c >= 0xc7 && c <= 0xc9): // ext
		typ, payload, rest, ok := readExt(b)
		if !ok {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: malformed ext")
		}
		if typ != ExtRawView {
			return b, failf(orig, dataAt, decodeguard.ReasonDecode, what+".data: ext type "+strconv.Itoa(int(typ))+", want 3 (raw bytes)")
		}
		data, b = payload, rest
	case c == 0xc4 || c == 0xc5 || c == 0xc6: // bin, as older releases sent
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
	a.DType, a.Torch, a.Shape, a.Data, a.Frame = dt, torch, shape, data, frame
	return b, nil
}
