package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// The value readers of the one-pass decoder. Each checks a header against
// the bytes present before it reads or allocates what the header describes.
// A reader returns errMalformed for a value that breaks a structural rule,
// and otherwise, for a value of the wrong kind, the error text msgp's
// readers give for it (the checked decoder's, now the tests' oracle): the
// caller checks the enclosing object's structure before it uses the text.

// maxDepth is the nesting msgpscan allows a payload.
const maxDepth = msgpscan.DefaultMaxDepth

// Absolute depths (a container at the top level is at depth 1) of the
// objects the decoder skips with skipAt.
const (
	depthBatchField = 2 // an element of the batch array or a batch map value
	depthEvent      = 3 // an event
	depthEventField = 4 // a field value of an event
	depthExtraKey   = 5 // one extra_keys entry
)

// skipAt checks the object at p[i:], which stands at absolute depth d, as
// msgpscan checks a payload, and returns the index after it.
func skipAt(p []byte, i, d int) (int, bool) {
	lim := decodeguard.Limits{MaxDepth: maxDepth + 1 - d, MaxElements: math.MaxInt}
	n, _, err := msgpscan.ScanPrefix(p[i:], &lim)
	return i + n, err == nil
}

func isArray(c byte) bool { return c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd }
func isMap(c byte) bool   { return c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf }

// typeAt is the msgpack type of the value at p[i:], for error texts.
func typeAt(p []byte, i int) msgp.Type { return msgp.NextType(p[min(i, len(p)):]) }

// wrongType is msgp's error for a value of type typeAt(p, i) read as want.
func wrongType(want msgp.Type, p []byte, i int) error {
	return msgp.TypeError{Method: want, Encoded: typeAt(p, i)}
}

// arrayAt reads the array header at p[i:]: its element count and the index
// after the header. ok is false for anything else, and for a count larger
// than the bytes left (every element takes at least one).
func arrayAt(p []byte, i int) (n, j int, ok bool) {
	if i >= len(p) {
		return 0, i, false
	}
	switch c := p[i]; {
	case c >= 0x90 && c <= 0x9f:
		n, j = int(c&0x0f), i+1
	case c == 0xdc && i+3 <= len(p):
		n, j = int(binary.BigEndian.Uint16(p[i+1:])), i+3
	case c == 0xdd && i+5 <= len(p):
		n, j = int(binary.BigEndian.Uint32(p[i+1:])), i+5
	default:
		return 0, i, false
	}
	return n, j, n <= len(p)-j
}

// mapAt reads the map header at p[i:] like arrayAt (n pairs, 2n objects).
func mapAt(p []byte, i int) (n, j int, ok bool) {
	if i >= len(p) {
		return 0, i, false
	}
	switch c := p[i]; {
	case c >= 0x80 && c <= 0x8f:
		n, j = int(c&0x0f), i+1
	case c == 0xde && i+3 <= len(p):
		n, j = int(binary.BigEndian.Uint16(p[i+1:])), i+3
	case c == 0xdf && i+5 <= len(p):
		n, j = int(binary.BigEndian.Uint32(p[i+1:])), i+5
	default:
		return 0, i, false
	}
	return n, j, n <= (len(p)-j)/2
}

// strAt reads the str at p[i:] (its bytes, not yet checked for UTF-8).
func strAt(p []byte, i int) (s []byte, j int, ok bool) {
	if i >= len(p) {
		return nil, i, false
	}
	var l int
	switch c := p[i]; {
	case c >= 0xa0 && c <= 0xbf:
		l, j = int(c&0x1f), i+1
	case c == 0xd9 && i+2 <= len(p):
		l, j = int(p[i+1]), i+2
	case c == 0xda && i+3 <= len(p):
		l, j = int(binary.BigEndian.Uint16(p[i+1:])), i+3
	case c == 0xdb && i+5 <= len(p):
		l, j = int(binary.BigEndian.Uint32(p[i+1:])), i+5
	default:
		return nil, i, false
	}
	if l > len(p)-j {
		return nil, i, false
	}
	return p[j : j+l], j + l, true
}

// binAt reads the bin at p[i:] like strAt.
func binAt(p []byte, i int) (s []byte, j int, ok bool) {
	if i >= len(p) {
		return nil, i, false
	}
	var l int
	switch c := p[i]; {
	case c == 0xc4 && i+2 <= len(p):
		l, j = int(p[i+1]), i+2
	case c == 0xc5 && i+3 <= len(p):
		l, j = int(binary.BigEndian.Uint16(p[i+1:])), i+3
	case c == 0xc6 && i+5 <= len(p):
		l, j = int(binary.BigEndian.Uint32(p[i+1:])), i+5
	default:
		return nil, i, false
	}
	if l > len(p)-j {
		return nil, i, false
	}
	return p[j : j+l], j + l, true
}

// keyAt reads a map key: a str or a bin, as msgp's ReadMapKeyZC takes
// them; any other scalar is a value error. A str key is not yet checked for
// UTF-8: the caller checks one it does not know with checkKey.
func keyAt(p []byte, i int) ([]byte, int, error) {
	if i < len(p) && p[i] >= 0xc4 && p[i] <= 0xc6 {
		s, j, ok := binAt(p, i)
		if !ok {
			return nil, i, errMalformed
		}
		return s, j, nil
	}
	s, j, ok := strAt(p, i)
	if !ok {
		return nil, i, wrongType(msgp.StrType, p, i)
	}
	return s, j, nil
}

// checkKey reports whether a key keyAt read and the caller found unknown
// is valid: a str must be UTF-8 (a known name is), a bin may be anything.
func checkKey(p []byte, i int, key []byte) bool {
	return p[i] >= 0xc4 && p[i] <= 0xc6 || utf8.Valid(key)
}

// uintAt reads a non-negative integer in msgpack's positive fixint or
// unsigned encodings.
func uintAt(p []byte, i int) (v uint64, j int, ok bool) {
	if i >= len(p) {
		return 0, i, false
	}
	switch c := p[i]; {
	case c <= 0x7f:
		return uint64(c), i + 1, true
	case c == 0xcc && i+2 <= len(p):
		return uint64(p[i+1]), i + 2, true
	case c == 0xcd && i+3 <= len(p):
		return uint64(binary.BigEndian.Uint16(p[i+1:])), i + 3, true
	case c == 0xce && i+5 <= len(p):
		return uint64(binary.BigEndian.Uint32(p[i+1:])), i + 5, true
	case c == 0xcf && i+9 <= len(p):
		return binary.BigEndian.Uint64(p[i+1:]), i + 9, true
	}
	return 0, i, false
}

// sintAt reads an integer in msgpack's negative fixint or signed encodings
// (any value, non-negative ones included).
func sintAt(p []byte, i int) (v int64, j int, ok bool) {
	if i >= len(p) {
		return 0, i, false
	}
	switch c := p[i]; {
	case c >= 0xe0:
		return int64(int8(c)), i + 1, true
	case c == 0xd0 && i+2 <= len(p):
		return int64(int8(p[i+1])), i + 2, true
	case c == 0xd1 && i+3 <= len(p):
		return int64(int16(binary.BigEndian.Uint16(p[i+1:]))), i + 3, true
	case c == 0xd2 && i+5 <= len(p):
		return int64(int32(binary.BigEndian.Uint32(p[i+1:]))), i + 5, true
	case c == 0xd3 && i+9 <= len(p):
		return int64(binary.BigEndian.Uint64(p[i+1:])), i + 9, true
	}
	return 0, i, false
}

// intAt reads an int64: any signed encoding, or an unsigned one up to
// math.MaxInt64.
func intAt(p []byte, i int) (int64, int, error) {
	if v, j, ok := uintAt(p, i); ok {
		if v > math.MaxInt64 {
			return 0, i, fmt.Errorf("integer %d out of range", v)
		}
		return int64(v), j, nil
	}
	if v, j, ok := sintAt(p, i); ok {
		return v, j, nil
	}
	return 0, i, fmt.Errorf("a %s, not an integer", typeAt(p, i))
}

func optIntAt(p []byte, i int) (Opt[int64], int, error) {
	if i < len(p) && p[i] == 0xc0 {
		return Opt[int64]{}, i + 1, nil
	}
	v, j, err := intAt(p, i)
	return Opt[int64]{V: v, Valid: err == nil}, j, err
}

// numberAt reads the batch ts: a float64, a float32, or an integer.
func numberAt(p []byte, i int) (float64, int, error) {
	if i+9 <= len(p) && p[i] == 0xcb {
		return math.Float64frombits(binary.BigEndian.Uint64(p[i+1:])), i + 9, nil
	}
	if i+5 <= len(p) && p[i] == 0xca {
		return float64(math.Float32frombits(binary.BigEndian.Uint32(p[i+1:]))), i + 5, nil
	}
	if v, j, ok := uintAt(p, i); ok {
		return float64(v), j, nil
	}
	if v, j, ok := sintAt(p, i); ok {
		return float64(v), j, nil
	}
	return 0, i, fmt.Errorf("a %s, not a number", typeAt(p, i))
}

// hashAt reads a block hash: an unsigned or signed integer, or a bin of 1
// to maxHashBytes bytes.
func hashAt(p []byte, i int) (Hash, int, error) {
	if v, j, ok := uintAt(p, i); ok {
		return Hash{u: v}, j, nil
	}
	if v, j, ok := sintAt(p, i); ok {
		// Taken as its two's-complement bits; a negative one is
		// remembered as signed (SGLang sends int64 hashes, see Hash).
		return Hash{u: uint64(v), neg: v < 0}, j, nil
	}
	if s, j, ok := binAt(p, i); ok {
		h, ok := BytesHash(s)
		if !ok {
			return Hash{}, i, fmt.Errorf("bin hash of %d bytes (want 1 to %d)", len(s), maxHashBytes)
		}
		return h, j, nil
	}
	return Hash{}, i, fmt.Errorf("a %s, not an int or bin hash", typeAt(p, i))
}

// constString returns, without allocating, the strings vLLM sends in
// medium, kv_cache_spec_kind, locality and the like.
func constString(s []byte) (string, bool) {
	switch string(s) {
	case "GPU":
		return "GPU", true
	case "CPU":
		return "CPU", true
	case "CPU_PINNED":
		return "CPU_PINNED", true
	case "DISK":
		return "DISK", true
	case "EXTERNAL":
		return "EXTERNAL", true
	case "full_attention":
		return "full_attention", true
	case "sliding_window":
		return "sliding_window", true
	case "LOCAL":
		return "LOCAL", true
	case "REMOTE":
		return "REMOTE", true
	case "":
		return "", true
	}
	return "", false
}

// str returns s as a string: a constant, one of the batch's recent strings
// (a source keeps sending the same LoRA names), or a new string once s is
// checked to be UTF-8.
func (b *Batch) str(s []byte) (string, bool) {
	if v, ok := constString(s); ok {
		return v, true
	}
	for k := range b.strs {
		if b.strs[k] == string(s) {
			return b.strs[k], true
		}
	}
	if !utf8.Valid(s) {
		return "", false
	}
	v := string(s)
	b.strs[b.strNext%stringCache] = v
	b.strNext++
	return v, true
}

func (b *Batch) optStrAt(p []byte, i int) (Opt[string], int, error) {
	if i < len(p) && p[i] == 0xc0 {
		return Opt[string]{}, i + 1, nil
	}
	s, j, ok := strAt(p, i)
	if !ok {
		return Opt[string]{}, i, wrongType(msgp.StrType, p, i)
	}
	v, ok := b.str(s)
	if !ok {
		return Opt[string]{}, i, errMalformed
	}
	return Opt[string]{V: v, Valid: true}, j, nil
}

// tokenCode describes, for each msgpack type byte, how tokensAt reads a
// non-negative integer that starts with it from the 8 bytes there
// (big-endian): the encoding's size in bits 0-7 (0: not an encoding read
// this way), the right shift that brings the value to the low bits in bits
// 8-15, the shift of the mask that keeps only the value in bits 16-23, and
// in bits 24-31 where the size's entry sits in a word of four candidate
// sizes (8 × the index of 1, 2, 3, 5). uint64 (9 bytes) is left to the
// careful loop.
var tokenCode = func() (t [256]uint32) {
	code := func(size, shift, width, slot int) uint32 {
		return uint32(size) | uint32(shift)<<8 | uint32(64-width)<<16 | uint32(8*slot)<<24
	}
	for c := 0; c <= 0x7f; c++ {
		t[c] = code(1, 56, 8, 0)
	}
	t[0xcc] = code(2, 48, 8, 1)
	t[0xcd] = code(3, 40, 16, 2)
	t[0xce] = code(5, 24, 32, 3)
	return t
}()

// tokenSize is tokenCode's size alone.
var tokenSize = func() (t [256]uint32) {
	for c, v := range tokenCode {
		t[c] = v & 0xff
	}
	return t
}()

// tokensAt reads token ids sent as non-negative integers from p[i:] into
// dst, up to len(dst) of them, and returns the index after the last one
// read and how many it read: it stops early at any other encoding (signed,
// over math.MaxInt64, not an integer, cut short), left to the caller.
//
// Token ids mix positive fixint, uint16 and uint32 at random (a vocabulary
// of 150k ids), so a branch on each one's encoding mispredicts, and
// without branches each token's start waits on the previous one's type
// byte: load it, look up its size, add. tokensAt shortens that chain by
// reading tokens two at a time while 16 bytes are left: the second token
// starts 1, 2, 3 or 5 bytes after the first, all within the first's 8-byte
// load, so the sizes of those four candidates are looked up alongside the
// first's, and the first's size only picks one of them.
func tokensAt(p []byte, i int, dst []int64) (int, int) {
	k := 0
	for k+2 <= len(dst) && i <= len(p)-16 {
		// A run of four ids of one width (uint16 or uint32): their type
		// bytes sit at a fixed stride, so the four reads do not wait on
		// each other.
		if c := p[i]; c == 0xcd || c == 0xce {
			if s := int(tokenSize[c]); k+4 <= len(dst) && i+4*s <= len(p) &&
				p[i+s] == c && p[i+2*s] == c && p[i+3*s] == c {
				if c == 0xcd {
					dst[k] = int64(binary.BigEndian.Uint16(p[i+1:]))
					dst[k+1] = int64(binary.BigEndian.Uint16(p[i+4:]))
					dst[k+2] = int64(binary.BigEndian.Uint16(p[i+7:]))
					dst[k+3] = int64(binary.BigEndian.Uint16(p[i+10:]))
				} else {
					dst[k] = int64(binary.BigEndian.Uint32(p[i+1:]))
					dst[k+1] = int64(binary.BigEndian.Uint32(p[i+6:]))
					dst[k+2] = int64(binary.BigEndian.Uint32(p[i+11:]))
					dst[k+3] = int64(binary.BigEndian.Uint32(p[i+16:]))
				}
				i += 4 * s
				k += 4
				continue
			}
		}
		w := binary.BigEndian.Uint64(p[i:])
		c1 := tokenCode[w>>56]
		cand := tokenSize[byte(w>>48)] | tokenSize[byte(w>>40)]<<8 | tokenSize[byte(w>>32)]<<16 | tokenSize[byte(w>>16)]<<24
		s2 := cand >> (c1 >> 24) & 0xff
		if c1&0xff == 0 || s2 == 0 {
			break
		}
		j := i + int(c1&0xff)
		w2 := binary.BigEndian.Uint64(p[j:])
		c2 := tokenCode[w2>>56]
		dst[k] = int64(w >> (c1 >> 8 & 0xff) & (^uint64(0) >> (c1 >> 16 & 0xff)))
		dst[k+1] = int64(w2 >> (c2 >> 8 & 0xff) & (^uint64(0) >> (c2 >> 16 & 0xff)))
		i = j + int(s2)
		k += 2
	}
	for ; k < len(dst); k++ {
		v, j, ok := uintAt(p, i)
		if !ok || v > math.MaxInt64 {
			return i, k
		}
		dst[k] = int64(v)
		i = j
	}
	return i, k
}
