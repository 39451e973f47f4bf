package enginecore

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// extRawView is the msgpack extension type vLLM uses for a buffer's raw
// bytes inline (CUSTOM_TYPE_RAW_VIEW). Types 1 and 2 are pickle and
// cloudpickle, which zmqguard refuses.
const extRawView int8 = 3

// defaultMaxFrames is the default bound on the frames of one message
// (the body and its aux buffers). vLLM sends one aux frame per array of
// 256 bytes or more, so a large batch with logprobs needs hundreds.
const defaultMaxFrames = 1024

// Limits bounds what [Decode] accepts. The zero value means the defaults.
type Limits struct {
	// MaxFrames bounds the number of frames (body and aux buffers
	// together). Zero means 1024.
	MaxFrames int
	// Scan are the limits of the structural pre-scan of the body (frame 0).
	// Its AllowExt is ignored: the body may hold ext type 3 only.
	Scan decodeguard.Limits
}

var (
	errNoFrames   = decodeguard.NewError(decodeguard.ReasonEnvelope, "EngineCoreOutputs: a message with no frames")
	rawViewOnly   = []int8{extRawView}
	errAuxTwiceAt = "EngineCoreOutputs: aux frame referenced twice: "
)

// Decode decodes one EngineCoreOutputs message, frames[0] the msgpack body
// and frames[1:] the aux buffers its arrays reference, into dst (which it
// resets, keeping its slices' capacity). lim nil means the defaults.
//
// It checks the frame count against Limits.MaxFrames and the body's size
// against Limits.Scan.MaxBytes first (ReasonOversize). Then it decodes
// every field (see [Message]) in one pass that makes the structural pre-scan's
// checks as it goes rather than in a pass of its own: every str it reads
// must be valid UTF-8; every uninterpreted sub-object (kv_transfer_params,
// a utility result, unknown stats keys' values, unknown trailing fields)
// is checked by the pre-scan, with ext type 3 as the only extension
// allowed and MaxDepth reduced by the depth of its position; a container
// header's count is checked against the bytes left before any slice grows
// for it; and the element counts of all containers plus the byte length
// of every uninterpreted sub-object are charged to one MaxElements budget
// (an upper bound on what Scan counts). Arrays are checked as the package
// doc describes. Finally every aux frame must have been referenced exactly
// once, and the checks of [Header.Validate] and of each output must pass.
//
// Errors are classified *[decodeguard.Error]s (ReasonOversize, ReasonDecode,
// ReasonValidate, ReasonDecoderPanic) whose detail names the field and never
// carries peer bytes other than escaped dtype names; offsets are into the
// body. On error dst is partly filled and must not be used.
func Decode(frames [][]byte, dst *Message, lim *Limits) error {
	if dst == nil {
		return errNilDestination
	}
	maxFrames, scan := defaultMaxFrames, decodeguard.Limits{}
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

// allNil8 is eight msgpack nils read as a little-endian word.
const allNil8 = 0xc0c0c0c0c0c0c0c0

// asciiOnly reports whether s is all ASCII (and so valid UTF-8), eight
// bytes at a time.
func asciiOnly(s []byte) bool {
	if n := len(s); n >= 8 && n <= 16 { // a request id: two words, overlapping
		return (binary.LittleEndian.Uint64(s)|binary.LittleEndian.Uint64(s[n-8:]))&0x8080808080808080 == 0
	}
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
func (d *decoder) raw(orig, b []byte) ([]byte, []byte, error) {
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
	return b[:n], b[n:], nil
}

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
