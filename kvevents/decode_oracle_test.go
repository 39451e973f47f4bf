package kvevents

import (
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// The differential oracle: the checked, two-pass decoder that DecodeBatch
// used before the one-pass decoder decided every payload itself (issue 41).
// It runs the structural pre-scan of the whole payload (msgpscan), then
// decodes with msgp's readers; FuzzDecodeMatchesOracle holds DecodeBatch to
// its results (the same batch and drops, the same refusal reason and text).

// decodeChecked is the two-pass path: the size check, the structural
// pre-scan of the whole payload (msgpscan.ScanOffset), then the decode.
// It is DecodeBatch as it was before the one-pass decoder, kept as the
// differential oracle.
func decodeChecked(p []byte, lim limits, b *Batch, onDrop func(eventDrop)) error {
	lim = lim.withDefaults()
	b.reuse()
	if len(p) > lim.MaxPayload {
		return decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: payload of %d bytes over the %d-byte limit", len(p), lim.MaxPayload))
	}
	scanLim := decodeguard.Limits{MaxBytes: lim.MaxPayload, MaxElements: lim.MaxPayload}
	if _, err := msgpscan.ScanOffset(p, &scanLim); err != nil {
		return err
	}
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		return batchArray(p, lim, b, onDrop)
	case msgp.MapType:
		events, err := batchMap(p, b)
		if err != nil {
			return err
		}
		_, err = decodeEvents(events, lim, b, onDrop)
		return err
	}
	return decodeErr("kvevents: batch is a %s, not an array", msgp.NextType(p))
}

// decodeEvents reads the events array at the start of p into b and returns
// what follows it.
func decodeEvents(p []byte, lim limits, b *Batch, onDrop func(eventDrop)) ([]byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return nil, decodeErr("kvevents: events is a %s, not an array", msgp.NextType(p))
	}
	if int(n) > lim.MaxEvents {
		return nil, decodeguard.NewError(decodeguard.ReasonOversize,
			fmt.Sprintf("kvevents: batch of %d events over the %d-event limit", n, lim.MaxEvents))
	}
	for i := 0; i < int(n); i++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		ev := &b.Events[len(b.Events)-1]
		ev.reset()
		after, tag, err := decodeEvent(rest, ev, lim)
		if err == nil {
			b.Index = append(b.Index, i)
			b.UnknownFields += ev.unknown
			rest = after
			continue
		}
		b.Events = b.Events[:len(b.Events)-1]
		b.DroppedEvents++
		if onDrop != nil {
			onDrop(eventDrop{Index: i, Err: err, Type: string(tag)})
		}
		if decodeguard.ReasonOf(err) != decodeguard.ReasonValidate {
			// A decode error may stop anywhere inside the event: find its
			// end from its start (the pre-scan proved it well-formed).
			if after, err = msgp.Skip(rest); err != nil {
				return nil, decodeErr("kvevents: event %d: %v", i, err)
			}
		}
		rest = after
	}
	return rest, nil
}

// batchArray decodes the array form [ts, events, data_parallel_rank?] (SGLang:
// [ts, events, attn_dp_rank], SGLang's disaggregation/kv_events.py). Elements
// after the third, which a later release may add, are read past and counted
// in UnknownFields (the pre-scan proved them well-formed).
func batchArray(p []byte, lim limits, b *Batch, onDrop func(eventDrop)) error {
	n, rest, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil || n < 2 {
		return decodeErr("kvevents: batch array of %d elements, want 2 or 3", n)
	}
	if b.TS, rest, err = readNumber(rest); err != nil {
		return decodeErr("kvevents: batch ts: %v", err)
	}
	if rest, err = decodeEvents(rest, lim, b, onDrop); err != nil {
		return err
	}
	if n >= 3 {
		if b.DataParallelRank, _, err = readOptInt(rest); err != nil {
			return decodeErr("kvevents: data_parallel_rank: %v", err)
		}
		b.UnknownFields += int(n - 3)
	}
	return nil
}

// batchMap reads the map form {"ts", "events", "data_parallel_rank"} that a
// msgspec EventBatch without array_like would produce.
func batchMap(p []byte, b *Batch) ([]byte, error) {
	n, rest, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return nil, decodeErr("kvevents: batch map: %v", err)
	}
	var events []byte
	haveTS := false
	for i := uint32(0); i < n; i++ {
		var key []byte
		if key, rest, err = msgp.ReadMapKeyZC(rest); err != nil {
			return nil, decodeErr("kvevents: batch map key: %v", err)
		}
		switch string(key) {
		case "ts":
			b.TS, rest, err = readNumber(rest)
			haveTS = true
		case "events":
			events = rest
			rest, err = msgp.Skip(rest)
		case "data_parallel_rank":
			b.DataParallelRank, rest, err = readOptInt(rest)
		default:
			b.UnknownFields++
			rest, err = msgp.Skip(rest)
		}
		if err != nil {
			return nil, decodeErr("kvevents: batch field %s: %v", ratelog.Escape(string(key), 64), err)
		}
	}
	if !haveTS || events == nil {
		return nil, decodeErr("kvevents: batch map without ts or events")
	}
	return events, nil
}

func readNumber(b []byte) (float64, []byte, error) {
	switch msgp.NextType(b) {
	case msgp.Float64Type, msgp.Float32Type:
		return msgp.ReadFloat64Bytes(b)
	case msgp.IntType:
		v, o, err := msgp.ReadInt64Bytes(b)
		return float64(v), o, err
	case msgp.UintType:
		v, o, err := msgp.ReadUint64Bytes(b)
		return float64(v), o, err
	}
	return 0, b, fmt.Errorf("a %s, not a number", msgp.NextType(b))
}

// fastUint reads the unsigned and positive encodings msgpack writers use
// for non-negative integers; ok is false for anything else (left to the
// general path).
func fastUint(b []byte) (v uint64, n int, ok bool) {
	if len(b) == 0 {
		return 0, 0, false
	}
	switch c := b[0]; {
	case c <= 0x7f:
		return uint64(c), 1, true
	case c == 0xcc && len(b) >= 2:
		return uint64(b[1]), 2, true
	case c == 0xcd && len(b) >= 3:
		return uint64(binary.BigEndian.Uint16(b[1:])), 3, true
	case c == 0xce && len(b) >= 5:
		return uint64(binary.BigEndian.Uint32(b[1:])), 5, true
	case c == 0xcf && len(b) >= 9:
		return binary.BigEndian.Uint64(b[1:]), 9, true
	}
	return 0, 0, false
}

func readInt(b []byte) (int64, []byte, error) {
	if v, n, ok := fastUint(b); ok && v <= 1<<63-1 {
		return int64(v), b[n:], nil
	}
	switch msgp.NextType(b) {
	case msgp.IntType:
		return msgp.ReadInt64Bytes(b)
	case msgp.UintType:
		v, o, err := msgp.ReadUint64Bytes(b)
		if err == nil && v > 1<<63-1 {
			return 0, b, fmt.Errorf("integer %d out of range", v)
		}
		return int64(v), o, err
	}
	return 0, b, fmt.Errorf("a %s, not an integer", msgp.NextType(b))
}

func readOptInt(b []byte) (Opt[int64], []byte, error) {
	if msgp.IsNil(b) {
		return Opt[int64]{}, b[1:], nil
	}
	v, o, err := readInt(b)
	return Opt[int64]{V: v, Valid: err == nil}, o, err
}

func readOptString(b []byte) (Opt[string], []byte, error) {
	if msgp.IsNil(b) {
		return Opt[string]{}, b[1:], nil
	}
	s, o, err := msgp.ReadStringZC(b)
	if err != nil {
		return Opt[string]{}, b, err
	}
	return Opt[string]{V: intern(s), Valid: true}, o, nil
}

// intern returns s as a string without allocating for the values vLLM uses
// for medium, kv_cache_spec_kind and similar fields.
func intern(s []byte) string {
	switch string(s) {
	case "GPU":
		return "GPU"
	case "CPU":
		return "CPU"
	case "CPU_PINNED":
		return "CPU_PINNED"
	case "DISK":
		return "DISK"
	case "EXTERNAL":
		return "EXTERNAL"
	case "full_attention":
		return "full_attention"
	case "sliding_window":
		return "sliding_window"
	case "":
		return ""
	}
	return string(s)
}

func readHash(b []byte) (Hash, []byte, error) {
	var h Hash
	if len(b) == 0 {
		return h, b, msgp.ErrShortBytes
	}
	if v, n, ok := fastUint(b); ok {
		h.u = v
		return h, b[n:], nil
	}
	switch msgp.NextType(b) {
	case msgp.UintType:
		v, o, err := msgp.ReadUint64Bytes(b)
		h.u = v
		return h, o, err
	case msgp.IntType:
		// Signed integers are taken as their two's-complement bits and a
		// negative one is remembered as signed: SGLang sends its hashes as
		// int64 (see Hash).
		v, o, err := msgp.ReadInt64Bytes(b)
		h.u, h.neg = uint64(v), v < 0
		return h, o, err
	case msgp.BinType:
		v, o, err := msgp.ReadBytesZC(b)
		if err != nil {
			return h, b, err
		}
		if len(v) == 0 || len(v) > maxHashBytes {
			return h, b, fmt.Errorf("bin hash of %d bytes (want 1 to %d)", len(v), maxHashBytes)
		}
		h.n = uint8(len(v))
		copy(h.b[:], v)
		h.u = foldBytes(v)
		return h, o, nil
	}
	return h, b, fmt.Errorf("a %s, not an int or bin hash", msgp.NextType(b))
}

func readHashes(b []byte, dst []Hash) ([]Hash, []byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return dst, b, err
	}
	// n is bounded by the bytes present (the pre-scan checked it).
	for i := uint32(0); i < n; i++ {
		var h Hash
		if h, rest, err = readHash(rest); err != nil {
			return dst, b, fmt.Errorf("block hash %d: %w", i, err)
		}
		dst = append(dst, h)
	}
	return dst, rest, nil
}

func readTokens(b []byte, dst []int64) ([]int64, []byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return dst, b, err
	}
	if cap(dst)-len(dst) < int(n) {
		nd := make([]int64, len(dst), len(dst)+int(n))
		copy(nd, dst)
		dst = nd
	}
	for i := uint32(0); i < n; i++ {
		var v int64
		if u, k, ok := fastUint(rest); ok && u <= 1<<63-1 {
			v, rest = int64(u), rest[k:]
		} else if v, rest, err = readInt(rest); err != nil {
			return dst, b, fmt.Errorf("token %d: %w", i, err)
		}
		dst = append(dst, v)
	}
	return dst, rest, nil
}

// readTokenPairs reads token_ids sent as [t_i, t_i+1] pairs (SGLang's
// bigram keys, see Event.TokenPairs) into dst, flattened.
func readTokenPairs(b []byte, dst []int64) ([]int64, []byte, error) {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return dst, b, err
	}
	for i := uint32(0); i < n; i++ {
		var m uint32
		if m, rest, err = msgp.ReadArrayHeaderBytes(rest); err != nil || m != 2 {
			return dst, b, fmt.Errorf("token %d is not a [t_i, t_i+1] pair like token 0", i)
		}
		for k := 0; k < 2; k++ {
			var v int64
			if v, rest, err = readInt(rest); err != nil {
				return dst, b, fmt.Errorf("token %d: %w", i, err)
			}
			dst = append(dst, v)
		}
	}
	return dst, rest, nil
}

// pairsAhead reports whether the token_ids array at the start of b holds
// pairs: its first element is an array.
func pairsAhead(b []byte) bool {
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	return err == nil && n > 0 && msgp.NextType(rest) == msgp.ArrayType
}

func readExtraKeys(b []byte, ev *Event) ([]byte, error) {
	if msgp.IsNil(b) {
		ev.HasExtraKeys = false
		return b[1:], nil
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		return b, err
	}
	ev.HasExtraKeys = true
	for i := uint32(0); i < n; i++ {
		t := msgp.NextType(rest)
		if t != msgp.ArrayType && t != msgp.NilType {
			return b, fmt.Errorf("extra_keys entry %d is a %s, not a tuple or nil", i, t)
		}
		after, err := msgp.Skip(rest)
		if err != nil {
			return b, err
		}
		ev.ExtraKeys = append(ev.ExtraKeys, rest[:len(rest)-len(after):len(rest)-len(after)])
		rest = after
	}
	return rest, nil
}

func parseTag(tag []byte, inactive bool) (string, error) {
	switch string(tag) {
	case "BlockStored":
		return BlockStored, nil
	case "BlockRemoved":
		return BlockRemoved, nil
	case "AllBlocksCleared":
		return AllBlocksCleared, nil
	case "BlockInactive":
		if inactive {
			return blockInactive, nil
		}
	}
	return "", decodeguard.NewError(decodeguard.ReasonUnsupported,
		"kvevents: event type "+ratelog.Escape(string(tag), 64)+" unknown to this release")
}

func readField(f int, b []byte, ev *Event) ([]byte, error) {
	var err error
	switch f {
	case fBlockHashes:
		ev.BlockHashes, b, err = readHashes(b, ev.BlockHashes[:0])
	case fParent:
		if msgp.IsNil(b) {
			ev.ParentBlockHash = Opt[Hash]{}
			return b[1:], nil
		}
		ev.ParentBlockHash.V, b, err = readHash(b)
		ev.ParentBlockHash.Valid = err == nil
	case fTokenIDs:
		ev.TokenPairs = false
		if msgp.IsNil(b) {
			// vLLM's MooncakeStoreConnector sends None when its request
			// metadata has no tokens: no tokens, as a placeholder.
			ev.TokenIDs = ev.TokenIDs[:0]
			return b[1:], nil
		}
		if pairsAhead(b) {
			ev.TokenIDs, b, err = readTokenPairs(b, ev.TokenIDs[:0])
			ev.TokenPairs = err == nil
			break
		}
		ev.TokenIDs, b, err = readTokens(b, ev.TokenIDs[:0])
	case fBlockSize:
		ev.BlockSize, b, err = readInt(b)
	case fLoraID:
		ev.LoraID, b, err = readOptInt(b)
	case fMedium:
		ev.Medium, b, err = readOptString(b)
	case fLoraName:
		ev.LoraName, b, err = readOptString(b)
	case fExtraKeys:
		ev.ExtraKeys = ev.ExtraKeys[:0]
		b, err = readExtraKeys(b, ev)
	case fGroupIdx:
		ev.GroupIdx, b, err = readOptInt(b)
	case fSpecKind:
		ev.KVCacheSpecKind, b, err = readOptString(b)
	case fSpecWindow:
		ev.KVCacheSpecSlidingWindow, b, err = readOptInt(b)
	case fLocality:
		ev.Locality, b, err = readOptString(b)
	case fOwnership:
		ev.Ownership, b, err = readOptString(b)
	case fSessionID:
		ev.SessionID, b, err = readOptString(b)
	default:
		b, err = msgp.Skip(b)
	}
	return b, err
}

// decodeEvent decodes the event at the start of raw into ev, validates it,
// and returns the bytes after it (also after a validation error). For an
// event of a type this release does not know it returns the tag with a
// ReasonUnsupported error. inactive decodes blockInactive (limits.Inactive).
//
// Fields this release does not know are read past and counted in
// ev.unknown, never a refusal: unknown map keys, and array elements after
// the last field known for the type (an array-form event shorter than the
// fields known, such as SGLang's, simply ends early).
func decodeEvent(raw []byte, ev *Event, lim limits) (rest, unknown []byte, err error) {
	inactive := lim.Inactive
	var seen uint16
	switch msgp.NextType(raw) {
	case msgp.MapType:
		var n uint32
		n, rest, err = msgp.ReadMapHeaderBytes(raw)
		if err != nil {
			return nil, nil, decodeErr("kvevents: event map: %v", err)
		}
		// The tag may stand anywhere in the map (msgspec writes it first):
		// read the fields, then check them against the type.
		for i := uint32(0); i < n; i++ {
			var key []byte
			if key, rest, err = msgp.ReadMapKeyZC(rest); err != nil {
				return nil, nil, decodeErr("kvevents: event map key: %v", err)
			}
			if string(key) == "type" {
				var tag []byte
				if tag, rest, err = msgp.ReadStringZC(rest); err != nil {
					return nil, nil, decodeErr("kvevents: event type is a %s, not a str", msgp.NextType(rest))
				}
				if ev.Type, err = parseTag(tag, inactive); err != nil {
					return nil, tag, err
				}
				continue
			}
			f := fieldOf(key)
			if rest, err = readField(f, rest, ev); err != nil {
				if tag, ok := mapTag(raw); ok && ev.Type == "" {
					// The fields of a type this release does not know.
					if _, terr := parseTag(tag, inactive); terr != nil {
						return nil, tag, terr
					}
				}
				return nil, nil, decodeErr("kvevents: field %s: %v", fieldName(f), err)
			}
			if f != fUnknown {
				seen |= 1 << f
			} else {
				ev.unknown++
			}
		}
		if ev.Type == "" {
			return nil, nil, decodeErr("kvevents: event map without a type")
		}
	case msgp.ArrayType:
		var n uint32
		n, rest, err = msgp.ReadArrayHeaderBytes(raw)
		if err != nil || n == 0 {
			return nil, nil, decodeErr("kvevents: empty event array")
		}
		var tag []byte
		if tag, rest, err = msgp.ReadStringZC(rest); err != nil {
			return nil, nil, decodeErr("kvevents: event tag is a %s, not a str", msgp.NextType(rest))
		}
		if ev.Type, err = parseTag(tag, inactive); err != nil {
			return nil, tag, err
		}
		fields := arrayFields(ev.Type, lim.SGLang)
		for i := 1; i < int(n); i++ {
			f := fUnknown
			if i-1 < len(fields) {
				f = fields[i-1]
			}
			if rest, err = readField(f, rest, ev); err != nil {
				return nil, nil, decodeErr("kvevents: field %s: %v", fieldName(f), err)
			}
			if f != fUnknown {
				seen |= 1 << f
			} else {
				ev.unknown++
			}
		}
	default:
		return nil, nil, decodeErr("kvevents: event is a %s, not a map or array", msgp.NextType(raw))
	}
	return rest, nil, validate(ev, seen)
}

// mapTag finds the "type" string of the event map at the start of raw.
func mapTag(raw []byte) ([]byte, bool) {
	n, rest, err := msgp.ReadMapHeaderBytes(raw)
	if err != nil {
		return nil, false
	}
	for i := uint32(0); i < n; i++ {
		var key []byte
		if key, rest, err = msgp.ReadMapKeyZC(rest); err != nil {
			return nil, false
		}
		if string(key) == "type" {
			tag, _, err := msgp.ReadStringZC(rest)
			return tag, err == nil
		}
		if rest, err = msgp.Skip(rest); err != nil {
			return nil, false
		}
	}
	return nil, false
}
