package kvevents

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// The one-pass decoder. It reads a batch once, checking each header against
// the bytes present before it reads or allocates what the header describes,
// and decodes the fields it knows while it checks them. Whatever it does not
// interpret (unknown fields and batch keys, extra_keys entries, array
// elements after data_parallel_rank) it hands to msgpscan.ScanPrefix at
// the depth where it stands, so the whole payload is held to the same
// structural rules as decodeChecked's pre-scan (msgpscan.Scan with its
// default depth of 32, no ext types, UTF-8 strings, scalar map keys, no
// trailing bytes).
//
// It only ever accepts: for anything it does not take as it is (a refusal,
// and also rare but valid encodings such as negative integers, float32
// timestamps, bin map keys, repeated fields), fastBatch reports false and
// DecodeBatch decides the payload with decodeChecked. An event the fast
// reader does not take is checked (ScanPrefix) and then decoded alone by the
// general event decoder, so one odd event does not send the whole batch to
// the two-pass path. FuzzDecodeDifferential holds the two paths to the same
// results.

// maxDepth is the nesting decodeChecked's pre-scan allows.
const maxDepth = msgpscan.DefaultMaxDepth

// Absolute depths (a container at the top level is at depth 1) of the
// objects the fast path skips with skipAt.
const (
	depthBatchField = 2 // an element of the batch array or a batch map value
	depthEvent      = 3 // an event
	depthEventField = 4 // a field value of an event
	depthExtraKey   = 5 // one extra_keys entry
)

// skipAt checks the object at p[i:], which stands at absolute depth d, as
// the pre-scan would, and returns the index after it.
func skipAt(p []byte, i, d int) (int, bool) {
	lim := decodeguard.Limits{MaxDepth: maxDepth + 1 - d, MaxElements: math.MaxInt}
	n, _, err := msgpscan.ScanPrefix(p[i:], &lim)
	return i + n, err == nil
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

// intAt reads an int64 sent as a non-negative integer.
func intAt(p []byte, i int) (int64, int, bool) {
	v, j, ok := uintAt(p, i)
	return int64(v), j, ok && v <= math.MaxInt64
}

func optIntAt(p []byte, i int) (Opt[int64], int, bool) {
	if i < len(p) && p[i] == 0xc0 {
		return Opt[int64]{}, i + 1, true
	}
	v, j, ok := intAt(p, i)
	return Opt[int64]{V: v, Valid: true}, j, ok
}

// numberAt reads the batch ts: a float64 or a non-negative integer.
func numberAt(p []byte, i int) (float64, int, bool) {
	if i+9 <= len(p) && p[i] == 0xcb {
		return math.Float64frombits(binary.BigEndian.Uint64(p[i+1:])), i + 9, true
	}
	v, j, ok := uintAt(p, i)
	return float64(v), j, ok
}

// negAt reads a negative integer in msgpack's negative fixint or int8 to
// int64 encodings (SGLang's signed hashes); ok is false for anything else,
// a non-negative value in a signed encoding included (left to the general
// path).
func negAt(p []byte, i int) (v int64, j int, ok bool) {
	if i >= len(p) {
		return 0, i, false
	}
	switch c := p[i]; {
	case c >= 0xe0:
		return int64(int8(c)), i + 1, true
	case c == 0xd0 && i+2 <= len(p):
		v, j = int64(int8(p[i+1])), i+2
	case c == 0xd1 && i+3 <= len(p):
		v, j = int64(int16(binary.BigEndian.Uint16(p[i+1:]))), i+3
	case c == 0xd2 && i+5 <= len(p):
		v, j = int64(int32(binary.BigEndian.Uint32(p[i+1:]))), i+5
	case c == 0xd3 && i+9 <= len(p):
		v, j = int64(binary.BigEndian.Uint64(p[i+1:])), i+9
	default:
		return 0, i, false
	}
	return v, j, v < 0
}

func hashAt(p []byte, i int) (Hash, int, bool) {
	if v, j, ok := uintAt(p, i); ok {
		return Hash{u: v}, j, true
	}
	if v, j, ok := negAt(p, i); ok {
		return Hash{u: uint64(v), neg: true}, j, true
	}
	// bin8 of 1 to maxHashBytes bytes.
	if i+2 > len(p) || p[i] != 0xc4 {
		return Hash{}, i, false
	}
	l := int(p[i+1])
	if l == 0 || l > maxHashBytes || l > len(p)-i-2 {
		return Hash{}, i, false
	}
	h, _ := BytesHash(p[i+2 : i+2+l])
	return h, i + 2 + l, true
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

func (b *Batch) optStrAt(p []byte, i int) (Opt[string], int, bool) {
	if i < len(p) && p[i] == 0xc0 {
		return Opt[string]{}, i + 1, true
	}
	s, j, ok := strAt(p, i)
	if !ok {
		return Opt[string]{}, i, false
	}
	v, ok := b.str(s)
	return Opt[string]{V: v, Valid: true}, j, ok
}

// fastBatch decodes p into b in one validating pass and reports whether it
// took p as a whole; b's event drops wait in b.drops.
func fastBatch(p []byte, lim limits, b *Batch) bool {
	b.reuse()
	if len(p) == 0 {
		return false
	}
	if c := p[0]; c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf {
		return fastBatchMap(p, lim, b)
	}
	n, j, ok := arrayAt(p, 0)
	if !ok || n < 2 {
		return false
	}
	if b.TS, j, ok = numberAt(p, j); !ok {
		return false
	}
	if j, ok = b.fastEvents(p, j, lim); !ok {
		return false
	}
	if n >= 3 {
		if b.DataParallelRank, j, ok = optIntAt(p, j); !ok {
			return false
		}
	}
	for k := 3; k < n; k++ {
		if j, ok = skipAt(p, j, depthBatchField); !ok {
			return false
		}
		b.UnknownFields++
	}
	return j == len(p)
}

// fastBatchMap decodes the map form of a batch.
func fastBatchMap(p []byte, lim limits, b *Batch) bool {
	n, j, ok := mapAt(p, 0)
	if !ok {
		return false
	}
	haveTS, haveEvents := false, false
	for k := 0; k < n; k++ {
		var key []byte
		if key, j, ok = strAt(p, j); !ok {
			return false
		}
		switch string(key) {
		case "ts":
			b.TS, j, ok = numberAt(p, j)
			haveTS = true
		case "events":
			if haveEvents {
				return false // the general decoder keeps the last one
			}
			j, ok = b.fastEvents(p, j, lim)
			haveEvents = true
		case "data_parallel_rank":
			b.DataParallelRank, j, ok = optIntAt(p, j)
		default:
			ok = utf8.Valid(key)
			if ok {
				j, ok = skipAt(p, j, depthBatchField)
			}
			b.UnknownFields++
		}
		if !ok {
			return false
		}
	}
	return haveTS && haveEvents && j == len(p)
}

// fastEvents decodes the events array at p[i:].
func (b *Batch) fastEvents(p []byte, i int, lim limits) (int, bool) {
	n, j, ok := arrayAt(p, i)
	if !ok || n > lim.MaxEvents {
		return i, false
	}
	for k := 0; k < n; k++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		ev := &b.Events[len(b.Events)-1]
		ev.reset()
		start := j
		var (
			err  error
			tag  []byte
			seen uint16
		)
		if j, seen, ok = b.fastEvent(p, j, ev, lim); ok {
			err = validate(ev, seen)
		} else {
			// Not for the fast reader: check the event, then decode it
			// alone with the general event decoder.
			if j, ok = skipAt(p, start, depthEvent); !ok {
				return i, false
			}
			ev.reset()
			_, tag, err = decodeEvent(p[start:], ev, lim)
		}
		if err == nil {
			b.Index = append(b.Index, k)
			b.UnknownFields += ev.unknown
			continue
		}
		b.Events = b.Events[:len(b.Events)-1]
		b.DroppedEvents++
		b.drops = append(b.drops, eventDrop{Index: k, Err: err, Type: string(tag)})
	}
	return j, true
}

// fastEvent decodes the event at p[i:] into ev (not yet validated): in the
// map form or the array form, with a known type and each known field at
// most once.
func (b *Batch) fastEvent(p []byte, i int, ev *Event, lim limits) (j int, seen uint16, ok bool) {
	inactive := lim.Inactive
	if i >= len(p) {
		return i, 0, false
	}
	if c := p[i]; c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf {
		var n int
		if n, j, ok = mapAt(p, i); !ok {
			return i, 0, false
		}
		for k := 0; k < n; k++ {
			var key []byte
			if key, j, ok = strAt(p, j); !ok {
				return i, 0, false
			}
			if string(key) == "type" {
				var t string
				if t, j, ok = tagAt(p, j, inactive); !ok || ev.Type != "" {
					return i, 0, false
				}
				ev.Type = t
				continue
			}
			f := fieldOf(key)
			if f == fUnknown {
				if !utf8.Valid(key) {
					return i, 0, false
				}
				j, ok = skipAt(p, j, depthEventField)
				ev.unknown++
			} else {
				if seen&(1<<f) != 0 {
					return i, 0, false
				}
				seen |= 1 << f
				j, ok = b.fastField(f, p, j, ev)
			}
			if !ok {
				return i, 0, false
			}
		}
		return j, seen, ev.Type != ""
	}
	n, j, ok := arrayAt(p, i)
	if !ok || n == 0 {
		return i, 0, false
	}
	if ev.Type, j, ok = tagAt(p, j, inactive); !ok {
		return i, 0, false
	}
	fields := arrayFields(ev.Type, lim.SGLang)
	for k := 1; k < n; k++ {
		if k-1 < len(fields) {
			f := fields[k-1]
			seen |= 1 << f
			j, ok = b.fastField(f, p, j, ev)
		} else {
			j, ok = skipAt(p, j, depthEventField)
			ev.unknown++
		}
		if !ok {
			return i, 0, false
		}
	}
	return j, seen, true
}

// tagAt reads a known event type tag (blockInactive with inactive).
func tagAt(p []byte, i int, inactive bool) (string, int, bool) {
	s, j, ok := strAt(p, i)
	if !ok {
		return "", i, false
	}
	switch string(s) {
	case "BlockStored":
		return BlockStored, j, true
	case "BlockRemoved":
		return BlockRemoved, j, true
	case "AllBlocksCleared":
		return AllBlocksCleared, j, true
	case "BlockInactive":
		if inactive {
			return blockInactive, j, true
		}
	}
	return "", i, false
}

// fastField decodes one known field, as readField does.
func (b *Batch) fastField(f int, p []byte, i int, ev *Event) (int, bool) {
	var ok bool
	j := i
	switch f {
	case fBlockHashes:
		var n int
		if n, j, ok = arrayAt(p, i); !ok {
			return i, false
		}
		hs := ev.BlockHashes[:0]
		if cap(hs) < n {
			hs = make([]Hash, n)
		}
		hs = hs[:n]
		for k := range hs {
			// vLLM's integer hashes are 64-bit digests: nearly all uint64.
			if j <= len(p)-9 && p[j] == 0xcf {
				hs[k] = Hash{u: binary.BigEndian.Uint64(p[j+1:])}
				j += 9
				continue
			}
			if hs[k], j, ok = hashAt(p, j); !ok {
				return i, false
			}
		}
		ev.BlockHashes = hs
	case fParent:
		if i < len(p) && p[i] == 0xc0 {
			ev.ParentBlockHash = Opt[Hash]{}
			return i + 1, true
		}
		ev.ParentBlockHash.V, j, ok = hashAt(p, i)
		ev.ParentBlockHash.Valid = true
	case fTokenIDs:
		if i < len(p) && p[i] == 0xc0 {
			ev.TokenIDs = ev.TokenIDs[:0]
			return i + 1, true
		}
		var n int
		if n, j, ok = arrayAt(p, i); !ok {
			return i, false
		}
		ts := ev.TokenIDs[:0]
		if cap(ts) < n {
			ts = make([]int64, n)
		}
		ts = ts[:n]
		if j, ok = tokensAt(p, j, ts); !ok {
			return i, false
		}
		ev.TokenIDs = ts
	case fBlockSize:
		ev.BlockSize, j, ok = intAt(p, i)
	case fLoraID:
		ev.LoraID, j, ok = optIntAt(p, i)
	case fMedium:
		ev.Medium, j, ok = b.optStrAt(p, i)
	case fLoraName:
		ev.LoraName, j, ok = b.optStrAt(p, i)
	case fExtraKeys:
		ev.ExtraKeys = ev.ExtraKeys[:0]
		if i < len(p) && p[i] == 0xc0 {
			ev.HasExtraKeys = false
			return i + 1, true
		}
		var n int
		if n, j, ok = arrayAt(p, i); !ok {
			return i, false
		}
		ev.HasExtraKeys = true
		for k := 0; k < n; k++ {
			if j >= len(p) {
				return i, false
			}
			// A tuple or nil.
			if c := p[j]; !(c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd || c == 0xc0) {
				return i, false
			}
			e := 0
			if e, ok = skipAt(p, j, depthExtraKey); !ok {
				return i, false
			}
			ev.ExtraKeys = append(ev.ExtraKeys, p[j:e:e])
			j = e
		}
	case fGroupIdx:
		ev.GroupIdx, j, ok = optIntAt(p, i)
	case fSpecKind:
		ev.KVCacheSpecKind, j, ok = b.optStrAt(p, i)
	case fSpecWindow:
		ev.KVCacheSpecSlidingWindow, j, ok = optIntAt(p, i)
	case fLocality:
		ev.Locality, j, ok = b.optStrAt(p, i)
	case fOwnership:
		ev.Ownership, j, ok = b.optStrAt(p, i)
	case fSessionID:
		ev.SessionID, j, ok = b.optStrAt(p, i)
	}
	if !ok {
		return i, false
	}
	return j, true
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

// tokensAt reads len(dst) token ids (non-negative integers) from p[i:].
//
// Token ids mix positive fixint, uint16 and uint32 at random (a vocabulary
// of 150k ids), so a branch on each one's encoding mispredicts, and
// without branches each token's start waits on the previous one's type
// byte: load it, look up its size, add. tokensAt shortens that chain by
// reading tokens two at a time while 16 bytes are left: the second token
// starts 1, 2, 3 or 5 bytes after the first, all within the first's 8-byte
// load, so the sizes of those four candidates are looked up alongside the
// first's, and the first's size only picks one of them.
func tokensAt(p []byte, i int, dst []int64) (int, bool) {
	k := 0
	for k+2 <= len(dst) && i <= len(p)-16 {
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
			return i, false
		}
		dst[k] = int64(v)
		i = j
	}
	return i, true
}
