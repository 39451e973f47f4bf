package msgpscan

import (
	"encoding/binary"
	"unicode/utf8"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Default limits used by [Scan] for every [decodeguard.Limits] field left at zero.
const (
	// DefaultMaxDepth is the deepest nesting of arrays and maps accepted:
	// a top-level array is at depth 1. vLLM's deepest message nests four
	// levels.
	DefaultMaxDepth = 32
	// DefaultMaxElements bounds the number of msgpack objects in one frame
	// (the top-level object, every array element, every map key and value).
	// Every object takes at least one byte, so only a limit below MaxBytes
	// means anything: a quarter of DefaultMaxBytes keeps what an untyped
	// decode can build from one frame (16 bytes per interface value plus map
	// overhead) to a few MiB.
	DefaultMaxElements = 1 << 18
	// DefaultMaxBytes is the longest frame accepted, matching zmqguard's
	// default maximum message size.
	DefaultMaxBytes = 1 << 20
)

// ExtTimestamp is the msgpack extension type of the standard timestamp.
const ExtTimestamp int8 = -1

// AllExtTypes returns all 256 extension types, for Limits.AllowExt.
func AllExtTypes() []int8 {
	all := make([]int8, 256)
	for i := range all {
		all[i] = int8(i - 128)
	}
	return all
}

// extSet is a set of extension types, a 256-bit set indexed by the type
// byte, built once per scan from Limits.AllowExt.
type extSet [4]uint64

func newExtSet(types []int8) (s extSet) {
	for _, t := range types {
		u := uint8(t)
		s[u>>6] |= 1 << (u & 63)
	}
	return s
}

// has reports whether t is in s.
func (s *extSet) has(t int8) bool {
	u := uint8(t)
	return s[u>>6]&(1<<(u&63)) != 0
}

// DefaultLimits returns the default limits with every field spelled out.
// Scanning with it is the same as scanning with nil or decodeguard.Limits{}.
func DefaultLimits() decodeguard.Limits {
	return decodeguard.Limits{
		MaxDepth:    DefaultMaxDepth,
		MaxElements: DefaultMaxElements,
		MaxBytes:    DefaultMaxBytes,
	}
}

// The shared, read-only errors ScanOffset returns. Scan returns copies with
// Offset set. Details never contain input bytes.
var (
	errEmpty        = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "empty frame", Offset: -1}
	errTruncated    = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "truncated: input ends inside an object", Offset: -1}
	errTrailing     = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "trailing bytes after the top-level object", Offset: -1}
	errInvalidByte  = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "invalid type byte 0xc1", Offset: -1}
	errBadUTF8      = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "str is not valid UTF-8", Offset: -1}
	errStrLen       = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "str length exceeds the bytes left", Offset: -1}
	errBinLen       = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "bin length exceeds the bytes left", Offset: -1}
	errExtLen       = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "ext length exceeds the bytes left", Offset: -1}
	errArrayLen     = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "array length exceeds the bytes left", Offset: -1}
	errMapLen       = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "map length exceeds the bytes left", Offset: -1}
	errCompositeKey = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "map key is a map or an array", Offset: -1}
	errExtType      = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "ext type not allowed", Offset: -1}
	errDepth        = &decodeguard.Error{Reason: decodeguard.ReasonOversize, Detail: "nesting deeper than MaxDepth", Offset: -1}
	errElements     = &decodeguard.Error{Reason: decodeguard.ReasonOversize, Detail: "more objects than MaxElements", Offset: -1}
	errTooLong      = &decodeguard.Error{Reason: decodeguard.ReasonOversize, Detail: "frame longer than MaxBytes", Offset: -1}
)

// Scan checks that b holds exactly one well-formed msgpack object within
// lim (nil means the defaults), without decoding or allocating anything it
// describes. It walks the bytes once, iteratively (no recursion), with a
// fixed-size stack of open containers, and refuses:
//
//   - with [decodeguard.ReasonOversize]: a frame longer than MaxBytes, nesting deeper
//     than MaxDepth, more objects than MaxElements;
//   - with [decodeguard.ReasonDecode]: an empty frame, truncated input, bytes after the
//     top-level object, the never-used type byte 0xc1, a str, bin or ext
//     length longer than the bytes left, an array of N elements or a map of N
//     pairs with fewer than N (2N) bytes left after the objects already
//     pending, a str that is not valid UTF-8, a map or array used as a map
//     key (unless CompositeKeys), an ext type not in AllowExt.
//
// Structural problems are checked before limits on the same header, so a
// header that both lies about the bytes present and exceeds a limit is a
// decodeguard.ReasonDecode.
//
// A non-nil error is an *[Error] whose Offset is the offset of the object at
// fault (its type byte), len(b) when the input ends where an object should
// start, the first trailing byte, or -1 for a frame over MaxBytes. Scan
// allocates nothing when it accepts (see MaxDepth for the one exception) and
// exactly one small *decodeguard.Error when it refuses; see [ScanOffset] for a variant
// that does not allocate on refusal either.
func Scan(b []byte, lim *decodeguard.Limits) error {
	off, _, e := scan(b, lim, false)
	if e == nil {
		return nil
	}
	c := *e
	c.Offset = off
	return &c
}

// ScanOffset is [Scan] without any allocation, for receive loops that count
// floods of bad frames: it returns the offset separately and, on failure, a
// shared *[Error] per (decodeguard.Reason, Detail) whose Offset is -1. The returned error
// must be treated as read-only. On success it returns (0, nil).
func ScanOffset(b []byte, lim *decodeguard.Limits) (int, error) {
	off, _, e := scan(b, lim, false)
	if e == nil {
		return 0, nil
	}
	return off, e
}

// ScanPrefix checks the one msgpack object at the front of b exactly as
// [Scan] checks a whole frame under lim (nil means the defaults), except
// that bytes after the object are allowed and MaxBytes is not applied. It is
// for one-pass decoders that read the fields they know themselves and hand
// every sub-object they do not interpret to ScanPrefix: the object's depth
// counts from 1 (pass MaxDepth reduced by the depth of its position) and its
// objects, itself included, are counted against MaxElements.
//
// On success it returns the object's length n and the number of msgpack
// objects it holds, itself included (what Scan would charge to MaxElements
// for it). On failure it returns, like [ScanOffset], the offset of the
// fault in b and a shared read-only *[Error] (Offset -1); it allocates
// nothing either way (see decodeguard.Limits.MaxDepth for the one exception).
func ScanPrefix(b []byte, lim *decodeguard.Limits) (n, objects int, err error) {
	off, objs, e := scan(b, lim, true)
	if e != nil {
		return off, 0, e
	}
	return off, objs, nil
}

// scan is the pre-scan proper: one loop, one switch on the type byte. The
// state is:
//
//	cur   the current container: rem<<1 | keyBit, where rem is the number of
//	      objects left to read in it (a map of N pairs counts 2N; the top
//	      level is a pseudo-container of 1) and keyBit says it is a map whose
//	      keys must be scalars (so an even rem means a key is next);
//	stack one cur per enclosing container, depth of them;
//	outer the sum of the enclosing containers' rem: objects still owed to
//	      them, each needing at least one byte;
//	room  how many more objects MaxElements allows.
//
// Only pos and cur change on the path of a scalar, which keeps the loop's
// hot state in registers. Fixed-size types advance pos by a constant picked
// by a predictable branch, not by a size loaded from a table, so the next
// type byte's address does not wait on a load.
//
// With prefix set, bytes after the top-level object are allowed and MaxBytes
// is not applied; on success scan then returns the object's length and its
// object count (otherwise 0 and the count).
func scan(b []byte, lim *decodeguard.Limits, prefix bool) (int, int, *decodeguard.Error) {
	maxDepth, maxElems, maxBytes := DefaultMaxDepth, DefaultMaxElements, DefaultMaxBytes
	var keyBit uint64 = 1 // map keys must be scalars
	var allow extSet
	if lim != nil {
		if lim.MaxDepth > 0 {
			maxDepth = lim.MaxDepth
		}
		if lim.MaxElements > 0 {
			maxElems = lim.MaxElements
		}
		if lim.MaxBytes > 0 {
			maxBytes = lim.MaxBytes
		}
		if lim.CompositeKeys {
			keyBit = 0
		}
		allow = newExtSet(lim.AllowExt)
	}

	if len(b) == 0 {
		return 0, 0, errEmpty
	}
	if len(b) > maxBytes && !prefix {
		return -1, 0, errTooLong
	}

	var stackBuf [DefaultMaxDepth]uint64
	stack := stackBuf[:]
	pos, depth, outer, room := 0, 0, 0, maxElems-1
	cur := uint64(1) << 1

	for {
		if pos >= len(b) {
			return len(b), 0, errTruncated
		}
		c := b[pos]
		var (
			items uint64 // container: objects it holds
			start int    // str/bin/ext/container: first byte after the header
			l     uint64 // str/bin/ext: payload length
			flag  uint64 // container: keyBit for a map, 0 for an array
		)
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0: // fixint, nil
			pos++
			goto done
		case c >= 0xa0 && c <= 0xbf: // fixstr
			start, l = pos+1, uint64(c&0x1f)
			// Inline fast path for an ASCII key or value of 8 to 16 bytes
			// (two overlapping words).
			if end := start + int(l); l >= 8 && l <= 16 && end <= len(b) &&
				(binary.LittleEndian.Uint64(b[start:])|binary.LittleEndian.Uint64(b[end-8:]))&0x8080808080808080 == 0 {
				pos = end
				goto done
			}
			goto str
		case c <= 0x8f: // fixmap
			start, items, flag = pos+1, 2*uint64(c&0x0f), keyBit
			goto container
		case c <= 0x9f: // fixarray
			start, items = pos+1, uint64(c&0x0f)
			goto container
		}
		switch c {
		case 0xc2, 0xc3: // false, true
			pos++
			goto done
		case 0xcc, 0xd0: // uint8, int8
			pos += 2
			goto fixed
		case 0xcd, 0xd1: // uint16, int16
			pos += 3
			goto fixed
		case 0xca, 0xce, 0xd2: // float32, uint32, int32
			pos += 5
			goto fixed
		case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
			pos += 9
			goto fixed
		case 0xd9: // str8
			start = pos + 2
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(b[pos+1])
			goto str
		case 0xda: // str16
			start = pos + 3
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint16(b[pos+1:]))
			goto str
		case 0xdb: // str32
			start = pos + 5
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint32(b[pos+1:]))
			goto str
		case 0xc4: // bin8
			start = pos + 2
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(b[pos+1])
			goto bin
		case 0xc5: // bin16
			start = pos + 3
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint16(b[pos+1:]))
			goto bin
		case 0xc6: // bin32
			start = pos + 5
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint32(b[pos+1:]))
			goto bin
		case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16
			start, l = pos+2, 1<<(c-0xd4)
			goto ext
		case 0xc7: // ext8
			start = pos + 3
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(b[pos+1])
			goto ext
		case 0xc8: // ext16
			start = pos + 4
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint16(b[pos+1:]))
			goto ext
		case 0xc9: // ext32
			start = pos + 6
			if start > len(b) {
				return pos, 0, errTruncated
			}
			l = uint64(binary.BigEndian.Uint32(b[pos+1:]))
			goto ext
		case 0xdc: // array16
			start = pos + 3
			if start > len(b) {
				return pos, 0, errTruncated
			}
			items = uint64(binary.BigEndian.Uint16(b[pos+1:]))
			goto container
		case 0xdd: // array32
			start = pos + 5
			if start > len(b) {
				return pos, 0, errTruncated
			}
			items = uint64(binary.BigEndian.Uint32(b[pos+1:]))
			goto container
		case 0xde: // map16
			start, flag = pos+3, keyBit
			if start > len(b) {
				return pos, 0, errTruncated
			}
			items = 2 * uint64(binary.BigEndian.Uint16(b[pos+1:]))
			goto container
		case 0xdf: // map32
			start, flag = pos+5, keyBit
			if start > len(b) {
				return pos, 0, errTruncated
			}
			items = 2 * uint64(binary.BigEndian.Uint32(b[pos+1:]))
			goto container
		default: // 0xc1, never used
			return pos, 0, errInvalidByte
		}

	fixed: // a fixed-size scalar wider than one byte; pos is past it
		if pos > len(b) {
			return pos - scalarSize(c), 0, errTruncated
		}
		goto done

	str:
		if l > uint64(len(b)-start) {
			return pos, 0, errStrLen
		}
		if !validUTF8(b[start : start+int(l)]) {
			return pos, 0, errBadUTF8
		}
		pos = start + int(l)
		goto done

	bin:
		if l > uint64(len(b)-start) {
			return pos, 0, errBinLen
		}
		pos = start + int(l)
		goto done

	ext:
		if start > len(b) {
			return pos, 0, errTruncated
		}
		if !allow.has(int8(b[start-1])) {
			return pos, 0, errExtType
		}
		if l > uint64(len(b)-start) {
			return pos, 0, errExtLen
		}
		pos = start + int(l)
		goto done

	container:
		if cur&3 == 1 { // an even rem in a map with scalar keys: a key
			return pos, 0, errCompositeKey
		}
		// This container replaces one pending object by items objects.
		if uint64(outer)+cur>>1-1+items > uint64(len(b)-start) {
			if c <= 0x8f || c >= 0xde { // fixmap, map16, map32
				return pos, 0, errMapLen
			}
			return pos, 0, errArrayLen
		}
		if depth >= maxDepth {
			return pos, 0, errDepth
		}
		if room -= int(items); room < 0 {
			return pos, 0, errElements
		}
		pos = start
		if items != 0 {
			if depth == len(stack) { // only when MaxDepth > DefaultMaxDepth
				stack = append(stack, 0)
				stack = stack[:cap(stack)]
			}
			stack[depth] = cur - 2
			depth++
			outer += int(cur>>1) - 1
			cur = items<<1 | flag
			continue
		}
		// An empty container is complete at once.

	done:
		// An object is complete: close every container it completes.
		if cur -= 2; cur >= 2 {
			continue
		}
		for {
			if depth == 0 {
				if prefix {
					return pos, maxElems - room, nil
				}
				if pos != len(b) {
					return pos, 0, errTrailing
				}
				return 0, maxElems - room, nil
			}
			depth--
			cur = stack[depth]
			outer -= int(cur >> 1)
			if cur >= 2 {
				break
			}
		}
	}
}

// scalarSize is the total size of a fixed-size scalar wider than one byte.
func scalarSize(c byte) int {
	switch c {
	case 0xcc, 0xd0:
		return 2
	case 0xcd, 0xd1:
		return 3
	case 0xca, 0xce, 0xd2:
		return 5
	}
	return 9
}

// validUTF8 is utf8.Valid with a fast path for the short ASCII keys and
// values msgpack frames are mostly made of: it ORs the bytes together a word
// at a time (the last word overlapping) and tests the high bits once.
func validUTF8(s []byte) bool {
	const hi = 0x8080808080808080
	var acc uint64
	switch {
	case len(s) > 32:
		return utf8.Valid(s)
	case len(s) >= 8:
		for i := 0; i+8 < len(s); i += 8 {
			acc |= binary.LittleEndian.Uint64(s[i:])
		}
		acc |= binary.LittleEndian.Uint64(s[len(s)-8:])
	case len(s) >= 4:
		acc = uint64(binary.LittleEndian.Uint32(s) | binary.LittleEndian.Uint32(s[len(s)-4:]))
	default:
		for _, c := range s {
			acc |= uint64(c)
		}
	}
	return acc&hi == 0 || utf8.Valid(s)
}
