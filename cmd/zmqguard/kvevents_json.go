package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/kvevents"
)

// appendJSONString appends s as a JSON string (peer text: json.Marshal
// escapes control characters; the decoders refuse invalid UTF-8).
func appendJSONString[S string | []byte](b []byte, s S) []byte {
	q, _ := json.Marshal(string(s))
	return append(b, q...)
}

// appendHashJSON writes an integer hash as a JSON number, signed when the
// engine sent it signed (SGLang; kvevents.SignedHash), and a bin hash as a
// hex string.
func appendHashJSON(b []byte, h kvevents.Hash) []byte {
	if h.Bytes() != nil {
		return append(append(append(b, '"'), h.String()...), '"')
	}
	return append(b, h.String()...)
}

func appendOptIntJSON(b []byte, v kvevents.Opt[int64]) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, v.V, 10)
}

func appendOptStringJSON(b []byte, v kvevents.Opt[string]) []byte {
	if !v.Valid {
		return append(b, "null"...)
	}
	return appendJSONString(b, v.V)
}

func appendField(b []byte, name string) []byte {
	b = append(b, ", \""...)
	b = append(b, name...)
	return append(b, "\": "...)
}

// appendEventJSON renders one event line (without the newline).
func appendEventJSON(b []byte, u kvevents.Update, i int) []byte {
	bt := u.Batch
	e := &bt.Events[i]
	b = append(b, `{"source": `...)
	b = appendJSONString(b, u.Source)
	b = appendField(b, "seq")
	b = strconv.AppendUint(b, u.Seq, 10)
	b = appendField(b, "ts")
	if math.IsNaN(bt.TS) || math.IsInf(bt.TS, 0) {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendFloat(b, bt.TS, 'f', -1, 64)
	}
	b = appendField(b, "dp_rank")
	b = appendOptIntJSON(b, bt.DataParallelRank)
	b = appendField(b, "index")
	b = strconv.AppendInt(b, int64(bt.Index[i]), 10)
	b = appendField(b, "type")
	b = appendJSONString(b, e.Type)
	b = appendField(b, "block_hashes")
	b = append(b, '[')
	for j, h := range e.BlockHashes {
		if j > 0 {
			b = append(b, ", "...)
		}
		b = appendHashJSON(b, h)
	}
	b = append(b, ']')
	switch e.Type {
	case kvevents.BlockStored:
		b = appendField(b, "parent_block_hash")
		if e.ParentBlockHash.Valid {
			b = appendHashJSON(b, e.ParentBlockHash.V)
		} else {
			b = append(b, "null"...)
		}
		b = appendField(b, "token_ids")
		b = append(b, '[')
		for j, t := range e.TokenIDs {
			switch {
			case e.TokenPairs && j%2 == 1:
				// SGLang's bigram pairs, as on the wire: [[t0, t1], ...].
				b = append(append(append(b, ", "...), strconv.AppendInt(nil, t, 10)...), ']')
				continue
			case j > 0:
				b = append(b, ", "...)
			}
			if e.TokenPairs {
				b = append(b, '[')
			}
			b = strconv.AppendInt(b, t, 10)
		}
		b = append(b, ']')
		b = appendField(b, "block_size")
		b = strconv.AppendInt(b, e.BlockSize, 10)
		b = appendField(b, "lora_id")
		b = appendOptIntJSON(b, e.LoraID)
		b = appendField(b, "medium")
		b = appendOptStringJSON(b, e.Medium)
		b = appendField(b, "lora_name")
		b = appendOptStringJSON(b, e.LoraName)
		if e.HasExtraKeys {
			b = appendField(b, "extra_keys")
			b = append(b, '[')
			for j, k := range e.ExtraKeys {
				if j > 0 {
					b = append(b, ", "...)
				}
				var out bytes.Buffer
				if _, err := msgp.UnmarshalAsJSON(&out, k); err != nil {
					b = append(b, "null"...)
				} else {
					b = append(b, bytes.TrimSpace(out.Bytes())...)
				}
			}
			b = append(b, ']')
		}
		b = appendOpt(b, "group_idx", e.GroupIdx)
		b = appendOptS(b, "kv_cache_spec_kind", e.KVCacheSpecKind)
		b = appendOpt(b, "kv_cache_spec_sliding_window", e.KVCacheSpecSlidingWindow)
	case kvevents.BlockRemoved:
		b = appendField(b, "medium")
		b = appendOptStringJSON(b, e.Medium)
		b = appendOpt(b, "group_idx", e.GroupIdx)
	}
	if e.Type != kvevents.AllBlocksCleared {
		b = appendOptS(b, "locality", e.Locality)
		b = appendOptS(b, "ownership", e.Ownership)
	}
	if e.Type == kvevents.BlockStored {
		b = appendOptS(b, "session_id", e.SessionID)
	}
	return append(b, '}')
}

// appendOpt and appendOptS write an optional field only when it was sent.
func appendOpt(b []byte, name string, v kvevents.Opt[int64]) []byte {
	if !v.Valid {
		return b
	}
	return appendOptIntJSON(appendField(b, name), v)
}

func appendOptS(b []byte, name string, v kvevents.Opt[string]) []byte {
	if !v.Valid {
		return b
	}
	return appendOptStringJSON(appendField(b, name), v)
}
