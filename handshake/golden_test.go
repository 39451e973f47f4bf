package handshake

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/vllm"
)

// preMain50620 is the profile of the vectors' commit (vLLM main of
// 2026-08-07, NIXL connector version 6).
var preMain50620 = vllm.MustParse("main-pre-50620")

type goldenHex struct {
	Hex string `json:"hex"`
}

func (h goldenHex) bytes(t *testing.T) []byte {
	t.Helper()
	b, err := hex.DecodeString(h.Hex)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenAgent is values' rendering of nixlwire.NixlAgentMetadata.
type goldenAgent struct {
	EngineID          string    `json:"engine_id"`
	AgentMetadata     goldenHex `json:"agent_metadata"`
	KVCachesBaseAddr  []uint64  `json:"kv_caches_base_addr"`
	DeviceID          int64     `json:"device_id"`
	NumBlocks         int64     `json:"num_blocks"`
	BlockLens         []int64   `json:"block_lens"`
	KVCacheLayout     string    `json:"kv_cache_layout"`
	BlockSize         int64     `json:"block_size"`
	SSMSizes          [2]int64  `json:"ssm_sizes"`
	AttnBackendName   string    `json:"attn_backend_name"`
	PhysicalPerLogcal int64     `json:"physical_blocks_per_logical_kv_block"`
}

func (g *goldenAgent) metadata(t *testing.T) nixlwire.NixlAgentMetadata {
	m := nixlwire.NixlAgentMetadata{EngineID: g.EngineID, AgentMetadata: g.AgentMetadata.bytes(t), KVCachesBaseAddr: g.KVCachesBaseAddr,
		DeviceID: nixlwire.Int(g.DeviceID), NumBlocks: nixlwire.Int(g.NumBlocks), KVCacheLayout: g.KVCacheLayout, BlockSize: nixlwire.Int(g.BlockSize),
		SSMSizes: [2]nixlwire.Int{nixlwire.Int(g.SSMSizes[0]), nixlwire.Int(g.SSMSizes[1])}, AttnBackendName: g.AttnBackendName,
		PhysicalBlocksPerLogicalKVBlock: nixlwire.Int(g.PhysicalPerLogcal), DCPSize: 1, PCPSize: 1}
	for _, l := range g.BlockLens {
		m.BlockLens = append(m.BlockLens, nixlwire.Int(l))
	}
	return m
}

// checkAgent decodes b, compares with g, and re-encodes g under the
// vectors' profile, byte for byte.
func checkAgent(t *testing.T, b []byte, g *goldenAgent) {
	t.Helper()
	got, err := nixlwire.DecodeAgentMetadata(b)
	if err != nil {
		t.Fatalf("DecodeAgentMetadata: %v", err)
	}
	want := g.metadata(t)
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Fatalf("decoded %s\nwant    %s", gj, wj)
	}
	enc, err := want.MarshalRelease(nil, preMain50620)
	if err != nil || !bytes.Equal(enc, b) {
		t.Fatalf("MarshalRelease(main-pre-50620) %x, %v\nvLLM %x", enc, err, b)
	}
}

// checkPayload decodes a nixlwire.NixlHandshakePayload frame and re-encodes it.
func checkPayload(t *testing.T, b []byte, hash string, agentBytes []byte, agent *goldenAgent) {
	t.Helper()
	p, err := nixlwire.DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload: %v", err)
	}
	if p.CompatibilityHash != hash || !bytes.Equal(p.AgentMetadataBytes, agentBytes) {
		t.Fatalf("payload %q / %x", p.CompatibilityHash, p.AgentMetadataBytes)
	}
	checkAgent(t, p.AgentMetadataBytes, agent)
	m := agent.metadata(t)
	np, err := nixlwire.NewPayloadRelease(hash, &m, preMain50620)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := np.MarshalMsg(nil)
	if err != nil || !bytes.Equal(enc, b) {
		t.Fatalf("payload encoded %x, %v\nvLLM %x", enc, err, b)
	}
}

// TestGoldenNixl runs every NIXL vector (bytes written by vLLM's own side
// channel and hash function at the vectors' commit) under the
// main-pre-50620 profile: the compatibility hashes reproduce exactly
// (canonical JSON and SHA-256), requests and replies parse to values, and
// encoding values gives vLLM's bytes.
func TestGoldenNixl(t *testing.T) {
	vs := golden.Load(t, "nixl")
	kinds := map[string]int{}
	for _, v := range vs {
		t.Run(v.ID, func(t *testing.T) {
			frames, err := v.Frames()
			if err != nil {
				t.Fatal(err)
			}
			kinds[v.Message()]++
			if !v.ByteExact {
				t.Fatal("vector not byte_exact")
			}
			switch v.Message() {
			case "nixl_compatibility_hash":
				goldenHash(t, frames[0], v.Values)
			case "nixl_handshake_request":
				var vals struct {
					Decoded [3]json.RawMessage `json:"decoded"`
				}
				mustUnmarshal(t, v.Values, &vals)
				var msg goldenHex
				var pp, tp int
				mustUnmarshal(t, vals.Decoded[0], &msg)
				mustUnmarshal(t, vals.Decoded[1], &pp)
				mustUnmarshal(t, vals.Decoded[2], &tp)
				if len(frames) != 2 || len(frames[0]) != 0 || string(msg.bytes(t)) != "get_meta_msg" {
					t.Fatalf("frames %x", frames)
				}
				req, err := parseRequest(frames[1])
				if err != nil || req.Variant != V3 || req.PP != pp || req.TP != tp {
					t.Fatalf("ParseRequest: %+v, %v; want V3 pp %d tp %d", req, err, pp, tp)
				}
				if enc := appendRequest(nil, req); !bytes.Equal(enc, frames[1]) {
					t.Fatalf("AppendRequest %x, vLLM %x", enc, frames[1])
				}
			case "nixl_handshake_reply":
				var vals struct {
					Decoded struct {
						Payload struct {
							Hash  string    `json:"compatibility_hash"`
							Agent goldenHex `json:"agent_metadata_bytes"`
						} `json:"payload"`
						Agent goldenAgent `json:"agent_metadata"`
						Perf  float64     `json:"remote_perf_counter"`
					} `json:"decoded"`
				}
				mustUnmarshal(t, v.Values, &vals)
				d := vals.Decoded
				if len(frames) != 3 || len(frames[0]) != 0 {
					t.Fatalf("%d frames", len(frames))
				}
				checkPayload(t, frames[1], d.Payload.Hash, d.Payload.Agent.bytes(t), &d.Agent)
				ts, err := nixlwire.ParseTimestamp(frames[2])
				if err != nil || ts != d.Perf {
					t.Fatalf("ParseTimestamp %v, %v; want %v", ts, err, d.Perf)
				}
				if enc := nixlwire.AppendTimestamp(nil, d.Perf); !bytes.Equal(enc, frames[2]) {
					t.Fatalf("AppendTimestamp %x, vLLM %x", enc, frames[2])
				}
			case "nixl_agent_metadata":
				var vals struct {
					Decoded goldenAgent `json:"decoded"`
				}
				mustUnmarshal(t, v.Values, &vals)
				checkAgent(t, frames[0], &vals.Decoded)
			case "nixl_handshake_payload":
				var vals struct {
					Decoded struct {
						Payload struct {
							Hash  string    `json:"compatibility_hash"`
							Agent goldenHex `json:"agent_metadata_bytes"`
						} `json:"payload"`
						Agent goldenAgent `json:"agent_metadata"`
					} `json:"decoded"`
				}
				mustUnmarshal(t, v.Values, &vals)
				d := vals.Decoded
				if d.Agent.EngineID == "" {
					t.Fatal("values hold no agent_metadata")
				}
				checkPayload(t, frames[0], d.Payload.Hash, d.Payload.Agent.bytes(t), &d.Agent)
			default:
				t.Fatalf("message kind %q has no test", v.Message())
			}
		})
	}
	want := map[string]int{"nixl_compatibility_hash": 7, "nixl_handshake_request": 2, "nixl_handshake_reply": 2,
		"nixl_agent_metadata": 2, "nixl_handshake_payload": 2}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("%d %s vectors, want %d", kinds[k], k, n)
		}
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// goldenHash rebuilds the factors of a compatibility-hash vector as
// Factors under main-pre-50620 and checks the canonical JSON and the hash.
func goldenHash(t *testing.T, canonical []byte, values json.RawMessage) {
	t.Helper()
	var vals struct {
		Decoded struct {
			Factors struct {
				VLLMVersion       string         `json:"vllm_version"`
				ConnectorVersion  int            `json:"nixl_connector_version"`
				Model             string         `json:"model"`
				Dtype             string         `json:"dtype"`
				NumKVHeads        int            `json:"num_kv_heads"`
				HeadSize          int            `json:"head_size"`
				NumHiddenLayers   int            `json:"num_hidden_layers"`
				AttnBackendName   string         `json:"attn_backend_name"`
				CacheDtype        string         `json:"cache_dtype"`
				CrossLayersBlocks bool           `json:"cross_layers_blocks"`
				IsHMAEnabled      bool           `json:"is_hma_enabled"`
				SpeculativeConfig map[string]any `json:"speculative_config"`
			} `json:"factors"`
			Hash string `json:"compatibility_hash"`
		} `json:"decoded"`
	}
	d := json.NewDecoder(bytes.NewReader(values))
	d.UseNumber() // ints in speculative_config stay ints
	if err := d.Decode(&vals); err != nil {
		t.Fatal(err)
	}
	f := vals.Decoded.Factors
	if f.ConnectorVersion != preMain50620.Rules().NixlConnectorVersion {
		t.Fatalf("vector hashes connector version %d, main-pre-50620 has %d", f.ConnectorVersion, preMain50620.Rules().NixlConnectorVersion)
	}
	fs := Factors{Release: preMain50620, VLLMVersion: f.VLLMVersion, Model: f.Model, Dtype: f.Dtype,
		NumKVHeads: f.NumKVHeads, HeadSize: f.HeadSize, NumHiddenLayers: f.NumHiddenLayers, AttnBackendName: f.AttnBackendName,
		CacheDtype: f.CacheDtype, CrossLayersBlocks: f.CrossLayersBlocks, IsHMAEnabled: f.IsHMAEnabled,
		SpeculativeConfig: numbersToInts(f.SpeculativeConfig)}
	js, err := nixlwire.PythonJSON(fs.dict())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js, canonical) {
		t.Fatalf("canonical JSON\n got %s\nvLLM %s", js, canonical)
	}
	h, err := fs.Hash()
	if err != nil || h != vals.Decoded.Hash {
		t.Fatalf("hash %s, %v; vLLM %s", h, err, vals.Decoded.Hash)
	}
}

// numbersToInts turns json.Numbers into ints (the speculative configs hold
// ints only), recursively.
func numbersToInts(v map[string]any) map[string]any {
	if v == nil {
		return nil
	}
	var conv func(any) any
	conv = func(x any) any {
		switch y := x.(type) {
		case json.Number:
			if i, err := y.Int64(); err == nil {
				return int(i)
			}
			f, _ := y.Float64()
			return f
		case []any:
			out := make([]any, len(y))
			for i := range y {
				out[i] = conv(y[i])
			}
			return out
		case map[string]any:
			out := make(map[string]any, len(y))
			for k, e := range y {
				out[k] = conv(e)
			}
			return out
		}
		return x
	}
	return conv(v).(map[string]any)
}
