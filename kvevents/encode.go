package kvevents

import (
	"github.com/tinylib/msgp/msgp"
)

// AppendBatch appends to dst the KVEventBatch payload vLLM's publisher
// sends for these events, byte for byte what msgspec writes for the same
// values (proven against bytes vLLM's own encoder wrote):
//
//   - the batch is an array_like struct, so always the 3-array [ts, events,
//     data_parallel_rank], a rank not Valid written as nil (msgspec ignores
//     omit_defaults for arrays);
//   - with mapForm (vLLM PR #42892, v0.26.0) each event is a map, "type"
//     first, then the fields in declaration order: the required ones always
//     (BlockStored's first seven, BlockRemoved's block_hashes and medium,
//     nil included), the optional ones only when set (omit_defaults);
//   - without it (v0.9 to v0.25) each event is the array [tag, fields...]
//     with every field the last array-form release declared (BlockStored 11,
//     BlockRemoved 3), defaults included; fields added later (Locality,
//     Ownership, SessionID) do not exist in that form and are not written.
//
// Integers take msgpack's smallest encoding (unsigned for non-negative
// values, signed for a hash sent as a negative integer, see SignedHash),
// floats float64, strings str, bin hashes bin. ExtraKeys entries are written
// as given (raw msgpack; an empty entry as nil).
func AppendBatch(dst []byte, ts float64, events []Event, dpRank Opt[int64], mapForm bool) []byte {
	form := formArray
	if mapForm {
		form = formMap
	}
	return appendBatch(dst, ts, events, dpRank, form)
}

// The event encodings appendBatch writes.
const (
	formArray  = iota // vLLM v0.9 to v0.25: tagged arrays
	formMap           // vLLM PR #42892 (v0.26.0) on: tagged maps
	formSGLang        // SGLang: tagged arrays of SGLang's fields
)

// appendBatch is AppendBatch for one of the forms. formSGLang writes what
// SGLang's publisher sends (msgspec.msgpack.Encoder over SGLang's structs,
// disaggregation/kv_events.py, proven byte for byte against SGLang's own
// bytes): the batch [ts, events, attn_dp_rank], and each event an
// array_like struct with its tag first and every SGLang field, nil
// included: BlockStored [tag, block_hashes, parent_block_hash, token_ids,
// block_size, lora_id, medium] (token_ids as [t_i, t_i+1] pairs when
// TokenPairs), BlockRemoved [tag, block_hashes, medium], AllBlocksCleared
// [tag]; vLLM's other fields do not exist there and are not written.
func appendBatch(dst []byte, ts float64, events []Event, dpRank Opt[int64], form int) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		switch form {
		case formMap:
			dst = appendEventMap(dst, &events[i])
		case formSGLang:
			dst = appendEventFields(dst, &events[i], sglangFields(events[i].Type))
		default:
			dst = appendEventArray(dst, &events[i])
		}
	}
	return appendOptInt(dst, dpRank)
}

// sglangFields are the fields of SGLang's events after the tag.
func sglangFields(typ string) []int {
	switch typ {
	case BlockStored:
		return sglangStored
	case BlockRemoved:
		return sglangRemoved
	}
	return nil
}

func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return msgp.AppendUint64(b, uint64(v))
	}
	return msgp.AppendInt64(b, v)
}

func appendHash(b []byte, h Hash) []byte {
	if h.n != 0 {
		return msgp.AppendBytes(b, h.b[:h.n])
	}
	if h.neg {
		return msgp.AppendInt64(b, int64(h.u))
	}
	return msgp.AppendUint64(b, h.u)
}

func appendHashes(b []byte, hs []Hash) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(hs)))
	for _, h := range hs {
		b = appendHash(b, h)
	}
	return b
}

func appendOptInt(b []byte, v Opt[int64]) []byte {
	if !v.Valid {
		return msgp.AppendNil(b)
	}
	return appendInt(b, v.V)
}

func appendOptString(b []byte, v Opt[string]) []byte {
	if !v.Valid {
		return msgp.AppendNil(b)
	}
	return msgp.AppendString(b, v.V)
}

func appendExtraKeys(b []byte, ev *Event) []byte {
	b = msgp.AppendArrayHeader(b, uint32(len(ev.ExtraKeys)))
	for _, k := range ev.ExtraKeys {
		if len(k) == 0 {
			b = msgp.AppendNil(b)
		} else {
			b = append(b, k...)
		}
	}
	return b
}

// fieldSet reports whether a map-form event writes field f: required
// fields always, optional ones when they differ from their default (nil).
func fieldSet(ev *Event, f int) bool {
	switch f {
	case fBlockHashes, fMedium:
		return true
	case fParent, fTokenIDs, fBlockSize, fLoraID, fLoraName:
		return ev.Type == BlockStored
	case fExtraKeys:
		return ev.HasExtraKeys
	case fGroupIdx:
		return ev.GroupIdx.Valid
	case fSpecKind:
		return ev.KVCacheSpecKind.Valid
	case fSpecWindow:
		return ev.KVCacheSpecSlidingWindow.Valid
	case fLocality:
		return ev.Locality.Valid
	case fOwnership:
		return ev.Ownership.Valid
	case fSessionID:
		return ev.SessionID.Valid
	}
	return false
}

func appendField(b []byte, ev *Event, f int) []byte {
	switch f {
	case fBlockHashes:
		return appendHashes(b, ev.BlockHashes)
	case fParent:
		if !ev.ParentBlockHash.Valid {
			return msgp.AppendNil(b)
		}
		return appendHash(b, ev.ParentBlockHash.V)
	case fTokenIDs:
		if ev.TokenPairs {
			b = msgp.AppendArrayHeader(b, uint32(len(ev.TokenIDs)/2))
			for i := 0; i+1 < len(ev.TokenIDs); i += 2 {
				b = msgp.AppendArrayHeader(b, 2)
				b = appendInt(appendInt(b, ev.TokenIDs[i]), ev.TokenIDs[i+1])
			}
			return b
		}
		b = msgp.AppendArrayHeader(b, uint32(len(ev.TokenIDs)))
		for _, t := range ev.TokenIDs {
			b = appendInt(b, t)
		}
		return b
	case fBlockSize:
		return appendInt(b, ev.BlockSize)
	case fLoraID:
		return appendOptInt(b, ev.LoraID)
	case fMedium:
		return appendOptString(b, ev.Medium)
	case fLoraName:
		return appendOptString(b, ev.LoraName)
	case fExtraKeys:
		if !ev.HasExtraKeys {
			return msgp.AppendNil(b)
		}
		return appendExtraKeys(b, ev)
	case fGroupIdx:
		return appendOptInt(b, ev.GroupIdx)
	case fSpecKind:
		return appendOptString(b, ev.KVCacheSpecKind)
	case fSpecWindow:
		return appendOptInt(b, ev.KVCacheSpecSlidingWindow)
	case fLocality:
		return appendOptString(b, ev.Locality)
	case fOwnership:
		return appendOptString(b, ev.Ownership)
	case fSessionID:
		return appendOptString(b, ev.SessionID)
	}
	return msgp.AppendNil(b)
}

func appendEventMap(b []byte, ev *Event) []byte {
	var fields []int
	switch ev.Type {
	case BlockStored:
		fields = storedFields
	case BlockRemoved:
		fields = removedFields
	case blockInactive:
		fields = inactiveFields
	}
	n := uint32(1)
	for _, f := range fields {
		if fieldSet(ev, f) {
			n++
		}
	}
	b = msgp.AppendMapHeader(b, n)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, ev.Type)
	for _, f := range fields {
		if fieldSet(ev, f) {
			b = msgp.AppendString(b, fieldName(f))
			b = appendField(b, ev, f)
		}
	}
	return b
}

func appendEventArray(b []byte, ev *Event) []byte {
	return appendEventFields(b, ev, arrayFields(ev.Type, false))
}

// appendEventFields writes ev as the array [tag, fields...].
func appendEventFields(b []byte, ev *Event, fields []int) []byte {
	b = msgp.AppendArrayHeader(b, uint32(1+len(fields)))
	b = msgp.AppendString(b, ev.Type)
	for _, f := range fields {
		b = appendField(b, ev, f)
	}
	return b
}
