package kvevents

import (
	"github.com/tinylib/msgp/msgp"
)

// AppendBatch appends the KVEventBatch payload vLLM's publisher would send
// for these events to dst: the batch as an array [ts, events,
// data_parallel_rank] (data_parallel_rank left out when not Valid, as
// msgspec's omit_defaults does), each event as a tagged map in declaration
// order when mapForm (vLLM PR #42892, v0.26.0) or as a tagged array [tag,
// fields...] before it, fields equal to their default (nil) left out —
// trailing ones only, in the array form. Integers take msgpack's smallest
// encoding (unsigned for non-negative values), floats float64, as msgspec
// writes them. ExtraKeys entries are written as given (raw msgpack, nil when
// empty).
func AppendBatch(dst []byte, ts float64, events []Event, dpRank OptInt, mapForm bool) []byte {
	if dpRank.Valid {
		dst = msgp.AppendArrayHeader(dst, 3)
	} else {
		dst = msgp.AppendArrayHeader(dst, 2)
	}
	dst = msgp.AppendFloat64(dst, ts)
	dst = msgp.AppendArrayHeader(dst, uint32(len(events)))
	for i := range events {
		if mapForm {
			dst = appendEventMap(dst, &events[i])
		} else {
			dst = appendEventArray(dst, &events[i])
		}
	}
	if dpRank.Valid {
		dst = appendInt(dst, dpRank.V)
	}
	return dst
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

func appendOptInt(b []byte, v OptInt) []byte {
	if !v.Valid {
		return msgp.AppendNil(b)
	}
	return appendInt(b, v.V)
}

func appendOptString(b []byte, v OptString) []byte {
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

// fieldSet reports, per field, whether it differs from its default and
// must be written (required fields always are).
func fieldSet(ev *Event, f int) bool {
	switch f {
	case fBlockHashes, fParent, fTokenIDs, fBlockSize, fLoraID, fMedium, fLoraName:
		return true
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
	}
	return false
}

func removedSet(ev *Event, f int) bool {
	if f == fBlockHashes || f == fMedium {
		return true
	}
	return fieldSet(ev, f)
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
	}
	return msgp.AppendNil(b)
}

func eventFields(ev *Event) ([]int, func(*Event, int) bool) {
	switch ev.Type {
	case BlockStored:
		return storedFields, fieldSet
	case BlockRemoved:
		return removedFields, removedSet
	}
	return nil, nil
}

func appendEventMap(b []byte, ev *Event) []byte {
	fields, set := eventFields(ev)
	n := uint32(1)
	for _, f := range fields {
		if set(ev, f) {
			n++
		}
	}
	b = msgp.AppendMapHeader(b, n)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, ev.Type.String())
	for _, f := range fields {
		if set(ev, f) {
			b = msgp.AppendString(b, fieldName(f))
			b = appendField(b, ev, f)
		}
	}
	return b
}

func appendEventArray(b []byte, ev *Event) []byte {
	fields, set := eventFields(ev)
	last := -1
	for i, f := range fields {
		if set(ev, f) {
			last = i
		}
	}
	b = msgp.AppendArrayHeader(b, uint32(2+last))
	b = msgp.AppendString(b, ev.Type.String())
	for _, f := range fields[:last+1] {
		b = appendField(b, ev, f)
	}
	return b
}
