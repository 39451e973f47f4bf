package enginecore

import "encoding/binary"

// The fast paths below decode the common forms of an EngineCoreOutput and
// of an array with byte offsets instead of re-slicing, and with little
// else live, so the compiler keeps their state in registers (the general
// decoders are large functions whose state mostly lives on the stack).
//
// Each recognises one form only and refuses anything else before it
// changes the decoder's state (budget, used aux frames) or any field
// [Decode]'s result depends on; the caller then runs the general decoder
// from the same byte, which makes every check and builds every error. So
// they change how fast a message decodes, never what it decodes to or
// why it is refused: FuzzFastPaths decodes every input with and without
// them and requires the same error and the same Message.

// noFastPaths turns the fast paths off (tests only: FuzzFastPaths and
// TestFastPathsSame compare the two ways).
var noFastPaths = false

// What outputFast did.
const (
	fastNo     = iota // nothing: run output
	fastWhole         // decoded the whole output
	fastPrefix        // checked request_id and new_token_ids: run outputRest
)

// outputFast checks the EngineCoreOutput at the front of b when its
// request_id is an ASCII fixstr and its new_token_ids a fixarray of
// unsigned ints of up to 32 bits, with room for them in o.NewTokenIDs
// (which it fills, changing nothing else). When every later field is nil
// but num_nans_in_logits (field 13), which is 0, as vLLM sends nearly
// every output, and o has nothing set after new_token_ids, it decodes the
// whole output (fastWhole, p the bytes used). When only the first two
// fields are in that form it returns fastPrefix (p the offset after
// new_token_ids, n and k the field and token counts) for outputRest. It
// calls nothing, so its state stays in registers.
func (d *decoder) outputFast(b []byte, o *Output) (p, n, k int, state uint8) {
	if noFastPaths || len(b) < 4 || b[0]&0xf0 != 0x90 || b[1]&0xe0 != 0xa0 {
		return 0, 0, 0, fastNo
	}
	n = int(b[0] & 0x0f)
	idEnd := 2 + int(b[1]&0x1f)
	if n < 2 || n >= len(b) || idEnd >= len(b) || !asciiOnly(b[2:idEnd]) || b[idEnd]&0xf0 != 0x90 {
		return 0, 0, 0, fastNo
	}
	k = int(b[idEnd] & 0x0f)
	if d.budget-n-k < 0 || cap(o.NewTokenIDs) < k { // output says which budget error; output grows the slice
		return 0, 0, 0, fastNo
	}
	p = idEnd + 1
	toks := o.NewTokenIDs[:k]
	for j := range toks {
		if p >= len(b) {
			return 0, 0, 0, fastNo
		}
		switch c := b[p]; {
		case c <= 0x7f:
			toks[j] = int64(c)
			p++
		case c == 0xcd && p+3 <= len(b):
			toks[j] = int64(binary.BigEndian.Uint16(b[p+1:]))
			p += 3
		case c == 0xce && p+5 <= len(b):
			toks[j] = int64(binary.BigEndian.Uint32(b[p+1:]))
			p += 5
		case c == 0xcc && p+2 <= len(b):
			toks[j] = int64(b[p+1])
			p += 2
		default:
			return 0, 0, 0, fastNo
		}
	}
	if n == 14 && o.left == leftNothing && p+12 <= len(b) && binary.LittleEndian.Uint64(b[p:]) == allNil8 &&
		binary.LittleEndian.Uint32(b[p+8:]) == 0x00c0c0c0 {
		// vLLM's 14 fields, eleven nils and num_nans_in_logits 0, into
		// an output with nothing set after new_token_ids (reset would
		// only clear what is set here).
		o.Fields = n
		o.RequestID = b[2:idEnd]
		o.NewTokenIDs = toks
		d.budget -= n + k
		return p + 12, n, k, fastWhole
	}
	return p, n, k, fastPrefix
}

// outputRest decodes the output outputFast returned fastPrefix for: it
// sets o as output does after new_token_ids and decodes the other fields
// with fields.
func (d *decoder) outputRest(orig, b []byte, o *Output, p, n, k int) ([]byte, error) {
	staleLP := o.left == leftLogprobs
	if staleLP {
		o.left = leftNothing
	}
	o.reset()
	idEnd := 2 + int(b[1]&0x1f)
	o.Fields = n
	o.left = leftUnknown
	o.RequestID = b[2:idEnd]
	o.NewTokenIDs = o.NewTokenIDs[:k] // filled by outputFast
	d.budget -= n + k
	return d.fields(orig, b[p:], o, uint32(n), staleLP)
}

// arrayFast decodes, at the front of b, an array in the form vLLM writes
// for logprobs: [numpy dtype "<i4", "<f4" or "<i8", fixarray of positive fixint dims, data], the data an
// aux frame index (a positive fixint or a uint8) or an ext 3 of up to 255 bytes, with at
// least one element, and room for the dims in a.Shape. It returns the
// bytes it used, or ok false having changed nothing.
func (d *decoder) arrayFast(b []byte, a *Array) (used int, ok bool) {
	if noFastPaths || len(b) < 8 || b[0] != 0x93 || b[1]&0xe0 != 0xa0 {
		return 0, false
	}
	p := 2 + int(b[1]&0x1f)
	if p >= len(b) {
		return 0, false
	}
	var dt DType
	switch binary.LittleEndian.Uint32(b[1:]) { // numpy's names of vLLM's logprobs dtypes, inline
	case 0xa3 | '<'<<8 | 'i'<<16 | '4'<<24:
		dt = dtInt32
	case 0xa3 | '<'<<8 | 'f'<<16 | '4'<<24:
		dt = dtFloat32
	case 0xa3 | '<'<<8 | 'i'<<16 | '8'<<24:
		dt = dtInt64
	default: // array parses the others
		return 0, false
	}
	if b[p]&0xf0 != 0x90 {
		return 0, false
	}
	k := int(b[p] & 0x0f)
	p++
	if k > maxDims || p+k >= len(b) || d.budget-4-k < 0 || cap(a.Shape) < k {
		return 0, false
	}
	// At most 8 dims of at most 127 and an item size of at most 8: the
	// product cannot overflow.
	dims := b[p : p+k]
	total := dt.size()
	for _, c := range dims {
		if c > 0x7f {
			return 0, false
		}
		total *= int(c)
	}
	if total == 0 { // checkShape's bound on empty arrays: array checks it
		return 0, false
	}
	p += k
	var data []byte
	frame := 0
	switch c := b[p]; {
	case c <= 0x7f || (c == 0xcc && p+1 < len(b)):
		i := int(c)
		if c == 0xcc { // uint8: frames 128 to 255
			i = int(b[p+1])
			p++
		}
		if i < 1 || i >= len(d.frames) || d.m.used[i/64]&(1<<(i%64)) != 0 || len(d.frames[i]) != total {
			return 0, false
		}
		d.m.used[i/64] |= 1 << (i % 64)
		data, frame = d.frames[i], i
		p++
	case c == 0xc7 && p+3 <= len(b) && b[p+2] == byte(extRawView): // ext 8
		end := p + 3 + int(b[p+1])
		if end > len(b) || end-p-3 != total {
			return 0, false
		}
		data, p = b[p+3:end], end
	case c >= 0xd4 && c <= 0xd8 && p+2 <= len(b) && b[p+1] == byte(extRawView): // fixext
		end := p + 2 + 1<<(c-0xd4)
		if end > len(b) || end-p-2 != total {
			return 0, false
		}
		data, p = b[p+2:end], end
	default:
		return 0, false
	}
	shape := a.Shape[:k]
	for j, c := range dims {
		shape[j] = int(c)
	}
	d.budget -= 4 + k
	a.DType, a.Torch, a.Shape, a.Data, a.Frame = dt, false, shape, data, frame
	return p, true
}
