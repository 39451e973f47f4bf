package kvevents

import (
	"encoding/binary"
	"fmt"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// The event decoder: one event, in the map form (vLLM PR #42892, v0.26.0)
// or the array form (vLLM v0.9–v0.25, SGLang), read as the checked decoder
// read it: a repeated map key counts its last value, the tag may stand
// anywhere in a map, fields a release does not know are read past and
// counted. An error it returns is the event's drop reason, valid once the
// caller has checked the event's structure (skipAt).

// event decodes the event at p[i:] into ev (not yet validated) and returns
// the index after it and the fields it read. tag is, with a
// ReasonUnsupported error, the type tag this release does not know.
func (b *Batch) event(p []byte, i int, ev *Event, lim limits) (j int, seen uint16, tag []byte, err error) {
	if i >= len(p) {
		return i, 0, nil, errMalformed
	}
	if isMap(p[i]) {
		return b.eventMap(p, i, ev, lim)
	}
	if !isArray(p[i]) {
		return i, 0, nil, decodeErr("kvevents: event is a %s, not a map or array", typeAt(p, i))
	}
	n, j, ok := arrayAt(p, i)
	if !ok {
		return i, 0, nil, errMalformed
	}
	if n == 0 {
		return i, 0, nil, decodeErr("kvevents: empty event array")
	}
	s, j, ok := strAt(p, j)
	if !ok {
		return i, 0, nil, errTagNotStr
	}
	t, ok := tagOf(s, lim.Inactive)
	if !ok {
		return i, 0, s, unsupportedErr(s)
	}
	ev.Type = t
	fields := arrayFields(t, lim.SGLang)
	for k := 1; k < n; k++ {
		if k-1 >= len(fields) {
			if j, ok = skipAt(p, j, depthEventField); !ok {
				return i, 0, nil, errMalformed
			}
			ev.unknown++
			continue
		}
		f := fields[k-1]
		if j, err = b.field(f, p, j, ev); err != nil {
			return i, 0, nil, fieldErr(f, err)
		}
		seen |= 1 << f
	}
	return j, seen, nil, nil
}

// The texts of a type tag that is not a str: msgp's reader leaves no bytes
// to name the type of, so the checked decoder's texts name it "invalid".
var (
	errTagNotStr  = decodeErr("kvevents: event tag is a %s, not a str", msgp.InvalidType)
	errTypeNotStr = decodeErr("kvevents: event type is a %s, not a str", msgp.InvalidType)
)

// eventMap decodes a map-form event.
func (b *Batch) eventMap(p []byte, i int, ev *Event, lim limits) (int, uint16, []byte, error) {
	n, j, ok := mapAt(p, i)
	if !ok {
		return i, 0, nil, errMalformed
	}
	var seen uint16
	for k := 0; k < n; k++ {
		at := j
		key, j2, err := keyAt(p, j)
		if err != nil {
			if err == errMalformed {
				return i, 0, nil, err
			}
			return i, 0, nil, decodeErr("kvevents: event map key: %v", err)
		}
		j = j2
		if string(key) == "type" {
			s, j2, ok := strAt(p, j)
			if !ok {
				return i, 0, nil, errTypeNotStr
			}
			t, ok := tagOf(s, lim.Inactive)
			if !ok {
				return i, 0, s, unsupportedErr(s)
			}
			ev.Type, j = t, j2
			continue
		}
		f := fieldOf(key)
		if f == fUnknown {
			if !checkKey(p, at, key) {
				return i, 0, nil, errMalformed
			}
			if j, ok = skipAt(p, j, depthEventField); !ok {
				return i, 0, nil, errMalformed
			}
			ev.unknown++
			continue
		}
		if j2, err = b.field(f, p, j, ev); err != nil {
			if ev.Type == "" && err != errMalformed {
				// A field the type this release does not know may
				// carry differently: the unknown type is the reason.
				if tag, ok := tagAhead(p, j, n-k-1); ok {
					if _, known := tagOf(tag, lim.Inactive); !known {
						return i, 0, tag, unsupportedErr(tag)
					}
				}
			}
			return i, 0, nil, fieldErr(f, err)
		}
		j = j2
		seen |= 1 << f
	}
	if ev.Type == "" {
		return i, 0, nil, decodeErr("kvevents: event map without a type")
	}
	return j, seen, nil, nil
}

// tagAhead finds, after the value at p[i:] and among the left pairs that
// follow it, the first "type" key's str value (cold: an event's field
// error).
func tagAhead(p []byte, i, left int) ([]byte, bool) {
	j, ok := skipAt(p, i, depthEventField)
	for ; ok && left > 0; left-- {
		var key []byte
		var err error
		if key, j, err = keyAt(p, j); err != nil {
			return nil, false
		}
		if string(key) == "type" {
			s, _, ok := strAt(p, j)
			return s, ok
		}
		j, ok = skipAt(p, j, depthEventField)
	}
	return nil, false
}

// tagOf returns the event type a tag names (blockInactive with inactive).
func tagOf(s []byte, inactive bool) (string, bool) {
	switch string(s) {
	case "BlockStored":
		return BlockStored, true
	case "BlockRemoved":
		return BlockRemoved, true
	case "AllBlocksCleared":
		return AllBlocksCleared, true
	case "BlockInactive":
		if inactive {
			return blockInactive, true
		}
	}
	return "", false
}

func unsupportedErr(tag []byte) error {
	return decodeguard.NewError(decodeguard.ReasonUnsupported,
		"kvevents: event type "+ratelog.Escape(string(tag), 64)+" unknown to this release")
}

func fieldErr(f int, err error) error {
	if err == errMalformed {
		return err
	}
	return decodeErr("kvevents: field %s: %v", fieldName(f), err)
}

// field decodes one known field's value at p[i:] into ev.
func (b *Batch) field(f int, p []byte, i int, ev *Event) (int, error) {
	var err error
	j := i
	switch f {
	case fBlockHashes:
		return b.hashes(p, i, ev)
	case fParent:
		if i < len(p) && p[i] == 0xc0 {
			ev.ParentBlockHash = Opt[Hash]{}
			return i + 1, nil
		}
		ev.ParentBlockHash.V, j, err = hashAt(p, i)
		ev.ParentBlockHash.Valid = err == nil
	case fTokenIDs:
		return b.tokens(p, i, ev)
	case fBlockSize:
		ev.BlockSize, j, err = intAt(p, i)
	case fLoraID:
		ev.LoraID, j, err = optIntAt(p, i)
	case fMedium:
		ev.Medium, j, err = b.optStrAt(p, i)
	case fLoraName:
		ev.LoraName, j, err = b.optStrAt(p, i)
	case fExtraKeys:
		return extraKeys(p, i, ev)
	case fGroupIdx:
		ev.GroupIdx, j, err = optIntAt(p, i)
	case fSpecKind:
		ev.KVCacheSpecKind, j, err = b.optStrAt(p, i)
	case fSpecWindow:
		ev.KVCacheSpecSlidingWindow, j, err = optIntAt(p, i)
	case fLocality:
		ev.Locality, j, err = b.optStrAt(p, i)
	case fOwnership:
		ev.Ownership, j, err = b.optStrAt(p, i)
	case fSessionID:
		ev.SessionID, j, err = b.optStrAt(p, i)
	}
	return j, err
}

// hashes reads block_hashes.
func (b *Batch) hashes(p []byte, i int, ev *Event) (int, error) {
	n, j, ok := arrayAt(p, i)
	if !ok {
		return i, wrongType(msgp.ArrayType, p, i)
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
		var err error
		if hs[k], j, err = hashAt(p, j); err != nil {
			ev.BlockHashes = hs[:0]
			return i, fmt.Errorf("block hash %d: %w", k, err)
		}
	}
	ev.BlockHashes = hs
	return j, nil
}

// tokens reads token_ids: nil (vLLM's MooncakeStoreConnector sends None
// when its request metadata has no tokens), an array of ids, or of
// [t_i, t_i+1] pairs (SGLang's bigram keys, Event.TokenPairs) when its first
// element is an array.
func (b *Batch) tokens(p []byte, i int, ev *Event) (int, error) {
	ev.TokenPairs = false
	ev.TokenIDs = ev.TokenIDs[:0]
	if i < len(p) && p[i] == 0xc0 {
		return i + 1, nil
	}
	n, j, ok := arrayAt(p, i)
	if !ok {
		return i, wrongType(msgp.ArrayType, p, i)
	}
	pairs := n > 0 && j < len(p) && isArray(p[j])
	m := n
	if pairs {
		// A pair takes at least 3 bytes: no more are allocated for than
		// the bytes left can hold.
		if n > (len(p)-j)/3 {
			return i, errMalformed
		}
		m = 2 * n
	}
	ts := ev.TokenIDs[:0]
	if cap(ts) < m {
		ts = make([]int64, m)
	}
	ts = ts[:m]
	if pairs {
		var err error
		if j, err = tokenPairs(p, j, ts); err != nil {
			return i, err
		}
		ev.TokenIDs, ev.TokenPairs = ts, true
		return j, nil
	}
	j, k := tokensAt(p, j, ts)
	for ; k < n; k++ {
		// Cold: signed encodings, and the errors.
		var err error
		if ts[k], j, err = intAt(p, j); err != nil {
			return i, fmt.Errorf("token %d: %w", k, err)
		}
	}
	ev.TokenIDs = ts
	return j, nil
}

// tokenPairs reads len(dst)/2 [t_i, t_i+1] pairs at p[i:] into dst,
// flattened.
func tokenPairs(p []byte, i int, dst []int64) (int, error) {
	for k := 0; k < len(dst)/2; k++ {
		m, j, ok := arrayAt(p, i)
		if !ok || m != 2 {
			return i, fmt.Errorf("token %d is not a [t_i, t_i+1] pair like token 0", k)
		}
		var err error
		for h := 0; h < 2; h++ {
			if dst[2*k+h], j, err = intAt(p, j); err != nil {
				return i, fmt.Errorf("token %d: %w", k, err)
			}
		}
		i = j
	}
	return i, nil
}

// extraKeys reads extra_keys: nil, or an array of tuples or nils, each kept
// as its bytes (aliasing p).
func extraKeys(p []byte, i int, ev *Event) (int, error) {
	ev.ExtraKeys = ev.ExtraKeys[:0]
	if i < len(p) && p[i] == 0xc0 {
		ev.HasExtraKeys = false
		return i + 1, nil
	}
	n, j, ok := arrayAt(p, i)
	if !ok {
		return i, wrongType(msgp.ArrayType, p, i)
	}
	ev.HasExtraKeys = true
	for k := 0; k < n; k++ {
		if j >= len(p) {
			return i, errMalformed
		}
		if c := p[j]; !isArray(c) && c != 0xc0 {
			return i, fmt.Errorf("extra_keys entry %d is a %s, not a tuple or nil", k, typeAt(p, j))
		}
		e, ok := skipAt(p, j, depthExtraKey)
		if !ok {
			return i, errMalformed
		}
		ev.ExtraKeys = append(ev.ExtraKeys, p[j:e:e])
		j = e
	}
	return j, nil
}
