package vllmhash

import (
	"encoding/hex"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

// jsonHashInt reads a KV-event hash as the vectors render it: an integer
// (a decimal string when ≥ 2^53), or {"hex": ...} for the bin form, whose
// int form is its last 8 bytes big-endian.
func jsonHashInt(t *testing.T, raw json.RawMessage) (uint64, []byte) {
	t.Helper()
	var h struct {
		Hex string `json:"hex"`
	}
	if json.Unmarshal(raw, &h) == nil && h.Hex != "" {
		b, err := hex.DecodeString(h.Hex)
		if err != nil || len(b) < 8 {
			t.Fatalf("bad hex hash %s", raw)
		}
		var d Digest
		copy(d[32-len(b):], b)
		return d.Uint64(), b
	}
	n, ok := new(big.Int).SetString(strings.Trim(string(raw), `"`), 10)
	if !ok || !n.IsUint64() {
		t.Fatalf("bad int hash %s", raw)
	}
	return n.Uint64(), nil
}

// extraFromJSON rebuilds one block's extra keys from the vectors'
// rendering of vLLM's tuple.
func extraFromJSON(t *testing.T, raw json.RawMessage, lora string) extraKeys {
	t.Helper()
	var e extraKeys
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return e
	}
	for i, it := range items {
		var s string
		var pair []json.RawMessage
		var hx struct {
			Hex string `json:"hex"`
		}
		switch {
		case json.Unmarshal(it, &s) == nil:
			if i == 0 && s == lora {
				e.LoRAName = s
			} else {
				e.CacheSalt = s
			}
		case json.Unmarshal(it, &pair) == nil && len(pair) == 2:
			var id string
			var off int64
			if json.Unmarshal(pair[0], &id) != nil || json.Unmarshal(pair[1], &off) != nil {
				t.Fatalf("bad mm key %s", it)
			}
			e.MM = append(e.MM, mmKey{Identifier: id, Offset: off})
		case json.Unmarshal(it, &hx) == nil && hx.Hex != "":
			b, err := hex.DecodeString(hx.Hex)
			if err != nil {
				t.Fatal(err)
			}
			e.EmbedsDigest = b
		default:
			t.Fatalf("unknown extra key %s", it)
		}
	}
	return e
}

// TestGoldenKVEventHashes recomputes, with the pickle-based sha256 and
// PYTHONHASHSEED=0, the block hashes of every BlockStored in vLLM's own
// KV-event vectors whose chain can be followed (a first block, or a parent
// given as the full hash): vLLM-key mode reproduces the hashes vLLM's
// publisher sends, extra keys (LoRA, multimodal, cache salt, prompt-embeds
// digests) included.
func TestGoldenKVEventHashes(t *testing.T) {
	h, err := New(algoSHA256, "0")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, v := range golden.Load(t, "kv-events") {
		if !strings.HasPrefix(v.ID, "kv-gpu-") || !strings.Contains(v.Notes, "hash_block_tokens with the sha256 (pickle) hash") {
			continue
		}
		var x struct {
			Decoded struct {
				Events []struct {
					Type      string            `json:"type"`
					Hashes    []json.RawMessage `json:"block_hashes"`
					Parent    json.RawMessage   `json:"parent_block_hash"`
					Tokens    []int64           `json:"token_ids"`
					BlockSize int               `json:"block_size"`
					LoraName  *string           `json:"lora_name"`
					ExtraKeys []json.RawMessage `json:"extra_keys"`
				} `json:"events"`
			} `json:"decoded"`
		}
		if err := json.Unmarshal(v.Values, &x); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		for i, e := range x.Decoded.Events {
			if e.Type != "BlockStored" || e.BlockSize <= 0 || len(e.Tokens) != len(e.Hashes)*e.BlockSize {
				continue // hybrid stores pair hashes with blocks differently
			}
			var parent *Digest
			if string(e.Parent) != "null" {
				_, full := jsonHashInt(t, e.Parent)
				if len(full) != 32 {
					continue // only the int form of the parent: its bytes are unknown
				}
				parent = new(Digest)
				copy(parent[:], full)
			}
			lora := ""
			if e.LoraName != nil {
				lora = *e.LoraName
			}
			for b, raw := range e.Hashes {
				var extra extraKeys
				if b < len(e.ExtraKeys) {
					extra = extraFromJSON(t, e.ExtraKeys[b], lora)
				}
				d, err := h.block(parent, e.Tokens[b*e.BlockSize:(b+1)*e.BlockSize], extra)
				if err != nil {
					t.Fatal(err)
				}
				want, full := jsonHashInt(t, raw)
				if d.Uint64() != want || full != nil && hex.EncodeToString(full) != d.String() {
					t.Fatalf("%s event %d block %d: %s (int %d), vLLM published %s", v.ID, i, b, d, d.Uint64(), raw)
				}
				parent = &d
				checked++
			}
		}
	}
	t.Logf("%d block hashes of vLLM's KV events recomputed", checked)
	if checked < 10 {
		t.Fatalf("only %d block hashes checked", checked)
	}
}
