package vllmhash

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
)

type hexBytes struct {
	Hex string `json:"hex"`
}

func (h *hexBytes) bytes(t *testing.T) []byte {
	t.Helper()
	if h == nil {
		return nil
	}
	b, err := hex.DecodeString(h.Hex)
	if err != nil {
		t.Fatalf("bad hex %q: %v", h.Hex, err)
	}
	return b
}

type hashVector struct {
	Kind           string          `json:"kind"`
	HashFunction   hashAlgo        `json:"hash_function"`
	PythonHashSeed string          `json:"pythonhashseed"`
	Preimage       hexBytes        `json:"preimage"`
	NoneHash       hexBytes        `json:"none_hash"`
	BlockSize      int             `json:"block_size"`
	StartTokenIdx  int             `json:"start_token_idx"`
	TokenIDs       []int64         `json:"token_ids"`
	Parent         *hexBytes       `json:"parent_block_hash"`
	ExtraKeys      json.RawMessage `json:"extra_keys"`
	BlockHash      hexBytes        `json:"block_hash"`
	BlockHashInt   json.RawMessage `json:"block_hash_int"`
	Request        struct {
		LoRAName   *string `json:"lora_name"`
		MMFeatures []struct {
			Identifier string `json:"identifier"`
			Offset     int    `json:"offset"`
			Length     int    `json:"length"`
		} `json:"mm_features"`
		CacheSalt    *string `json:"cache_salt"`
		PromptEmbeds *struct {
			Dtype string    `json:"dtype"`
			Shape []int     `json:"shape"`
			Data  []float64 `json:"data"`
		} `json:"prompt_embeds"`
	} `json:"request"`
}

// renderExtra renders extra keys as the vectors do (JSON of vLLM's tuple).
func renderExtra(e extraKeys) any {
	if e.empty() {
		return nil
	}
	var out []any
	if e.LoRAName != "" {
		out = append(out, e.LoRAName)
	}
	for _, m := range e.MM {
		out = append(out, []any{m.Identifier, float64(m.Offset)})
	}
	if e.CacheSalt != "" {
		out = append(out, e.CacheSalt)
	}
	if e.EmbedsDigest != nil {
		out = append(out, map[string]any{"hex": hex.EncodeToString(e.EmbedsDigest)})
	}
	return out
}

// TestGoldenHashing checks every vector of vLLM's hashing.jsonl: the
// preimage byte for byte for all four hash functions (the xxhash ones share
// their encodings with the sha256 ones), the extra keys rebuilt from the
// request, and the digest and KV-event int for sha256_cbor and sha256.
func TestGoldenHashing(t *testing.T) {
	vecs := golden.Load(t, "hashing")
	counts := map[string]int{}
	for _, v := range vecs {
		t.Run(v.ID, func(t *testing.T) {
			var x hashVector
			if err := json.Unmarshal(v.Values, &x); err != nil {
				t.Fatal(err)
			}
			wantPre := x.Preimage.bytes(t)
			switch x.Kind {
			case "none_hash":
				pre, err := noneHashPreimage(x.HashFunction, x.PythonHashSeed)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(pre, wantPre) {
					t.Fatalf("NONE_HASH preimage\n got %x\nwant %x", pre, wantPre)
				}
				if x.HashFunction == algoSHA256CBOR || x.HashFunction == algoSHA256 {
					h, err := New(string(x.HashFunction), x.PythonHashSeed)
					if err != nil {
						t.Fatal(err)
					}
					if got := h.noneHash(); !bytes.Equal(got[:], x.NoneHash.bytes(t)) {
						t.Fatalf("NONE_HASH %x, want %s", got, x.NoneHash.Hex)
					}
				}
			case "block_hash":
				r := &Request{TokenIDs: make([]int64, x.StartTokenIdx+x.BlockSize)}
				copy(r.TokenIDs[x.StartTokenIdx:], x.TokenIDs)
				if x.Request.LoRAName != nil {
					r.LoRAName = *x.Request.LoRAName
				}
				if x.Request.CacheSalt != nil {
					r.CacheSalt = *x.Request.CacheSalt
				}
				for _, f := range x.Request.MMFeatures {
					r.MMFeatures = append(r.MMFeatures, MMFeature{f.Identifier, f.Offset, f.Length})
				}
				if pe := x.Request.PromptEmbeds; pe != nil {
					if pe.Dtype != "float32" || len(pe.Shape) != 2 {
						t.Fatalf("prompt embeds %s %v: only float32 [n, d] is rendered here", pe.Dtype, pe.Shape)
					}
					for _, f := range pe.Data {
						r.PromptEmbeds = binary.LittleEndian.AppendUint32(r.PromptEmbeds, math.Float32bits(float32(f)))
					}
					r.EmbedsRowBytes = 4 * pe.Shape[1]
				}
				extra := blockExtraKeys(r, x.StartTokenIdx, x.StartTokenIdx+x.BlockSize)
				var wantExtra any
				if err := json.Unmarshal(x.ExtraKeys, &wantExtra); err != nil {
					t.Fatal(err)
				}
				if got := renderExtra(extra); !reflect.DeepEqual(jsonRound(t, got), wantExtra) {
					t.Fatalf("extra keys\n got %v\nwant %v", got, wantExtra)
				}
				parent := x.NoneHash.bytes(t)
				if x.Parent != nil {
					parent = x.Parent.bytes(t)
				}
				pre, err := preimage(nil, x.HashFunction, parent, x.TokenIDs, extra)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(pre, wantPre) {
					t.Fatalf("preimage\n got %x\nwant %x", pre, wantPre)
				}
				if x.HashFunction != algoSHA256CBOR && x.HashFunction != algoSHA256 {
					break
				}
				h, err := New(string(x.HashFunction), x.PythonHashSeed)
				if err != nil {
					t.Fatal(err)
				}
				var p *Digest
				if x.Parent != nil {
					p = new(Digest)
					copy(p[:], parent)
				}
				d, err := h.block(p, x.TokenIDs, extra)
				if err != nil {
					t.Fatal(err)
				}
				if d.String() != x.BlockHash.Hex {
					t.Fatalf("block hash %s, want %s", d, x.BlockHash.Hex)
				}
				wantInt, err := strconv.ParseUint(string(bytes.Trim(x.BlockHashInt, `"`)), 10, 64)
				if err != nil {
					t.Fatalf("block_hash_int %s: %v", x.BlockHashInt, err)
				}
				if d.Uint64() != wantInt {
					t.Fatalf("KV-event int %d, want %d", d.Uint64(), wantInt)
				}
				// A first block is also what Request chains from NONE_HASH.
				if x.StartTokenIdx == 0 {
					ds, err := h.Request(r, x.BlockSize)
					if err != nil {
						t.Fatal(err)
					}
					if len(ds) != 1 || ds[0] != d {
						t.Fatalf("Request gave %v, want [%s]", ds, d)
					}
				}
			default:
				t.Fatalf("unknown kind %q", x.Kind)
			}
			counts[string(x.HashFunction)]++
		})
	}
	t.Logf("checked %d vectors by hash function: %v", len(vecs), counts)
	if counts["sha256_cbor"] == 0 || counts["sha256"] == 0 {
		t.Fatalf("no sha256_cbor or sha256 vectors checked: %v", counts)
	}
}

func jsonRound(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
