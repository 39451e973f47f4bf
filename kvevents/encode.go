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
// values), floats float64, strings str, bin hashes bin. ExtraKeys entries
// are written as given (raw msgpack; an empty entry as nil).
func AppendBatch(dst []byte, ts float64, events []Event, dpRank Opt[int64], mapForm bool) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		if mapForm {
			dst = appendEventMap(dst, &events[i])
		} else {
			dst = appendEventArray(dst, &events[i])
		}
	}
	return appendOptInt(dst, dpRank)
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
	var fields []int
	switch ev.Type {
	case BlockStored:
		fields = storedArray
	case BlockRemoved:
		fields = removedArray
	}
	b = msgp.AppendArrayHeader(b, uint32(1+len(fields)))
	b = msgp.AppendString(b, ev.Type)
	for _, f := range fields {
		b = appendField(b, ev, f)
	}
	return b
}
