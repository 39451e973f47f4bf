package main

import (
	"fmt"
	"strings"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/vllm"
)

// demoFactors returns the documented demo factor set of release r: the
// compatibility factors of a plausible vLLM deployment (Llama 3.1 8B in
// bf16 on FlashAttention, pull mode) as r's compute_nixl_compatibility_hash
// builds them, with r's factor keys and connector version. vllm_version is
// the release ("0.25.0", "0.26.0"), or for the profiles named by rule set
// the profile's name ("main-pre-51481", "latest"): a real deployment passes
// its own hash with --compat-hash. handshake-listener's default
// --compat-hash and the demo's decode clients use its hash (README, "The
// CLI", lists them).
func demoFactors(r vllm.Release) handshake.Factors {
	version, _, _ := strings.Cut(r.String(), ",") // the profile, without options
	if !strings.HasPrefix(version, "main") && version != "latest" {
		version += ".0"
	}
	return handshake.Factors{
		Release:         r,
		VLLMVersion:     version,
		Model:           "meta-llama/Llama-3.1-8B-Instruct",
		Dtype:           "torch.bfloat16",
		NumKVHeads:      8,
		HeadSize:        128,
		NumHiddenLayers: 32,
		AttnBackendName: "FLASH_ATTN",
		CacheDtype:      "auto",
		IsHMAEnabled:    true,
		TransferMode:    "pull",
	}
}

// demoHash returns the compatibility hash of the latest release's demo
// factor set.
func demoHash() string { return demoHashFor(vllm.Latest()) }

// demoHashFor returns the compatibility hash of demoFactors(r).
func demoHashFor(r vllm.Release) string {
	f := demoFactors(r)
	h, err := f.Hash()
	if err != nil {
		panic(err) // the factor set is a constant: this cannot fail
	}
	return h
}

// demoMetadata returns the agent metadata handshake-listener serves for one
// rank: engine_id = engineID, device_id = tp, num_blocks = 1000 + pp*100 + tp,
// kv_cache_layout "HND", block_size 16, and plausible values elsewhere (two KV
// regions of 32 KiB blocks: 16 tokens x 8 heads x 128 x 2 bytes).
func demoMetadata(engineID string, pp, tp int) handshake.NixlAgentMetadata {
	const blockLen = 16 * 8 * 128 * 2
	base := uint64(0x7f0000000000) + uint64(pp)<<36 + uint64(tp)<<32
	numBlocks := int64(1000 + pp*100 + tp)
	return handshake.NixlAgentMetadata{
		EngineID:                        engineID,
		AgentMetadata:                   fmt.Appendf(nil, "zmqguard-demo-nixl-agent/%s/pp%d/tp%d", engineID, pp, tp),
		KVCachesBaseAddr:                []uint64{base, base + uint64(numBlocks)*blockLen},
		DeviceID:                        int64(tp),
		NumBlocks:                       numBlocks,
		BlockLens:                       []int64{blockLen, blockLen},
		BlockStrides:                    []int64{blockLen, blockLen},
		KVCacheLayout:                   "HND",
		BlockSize:                       16,
		AttnBackendName:                 "FLASH_ATTN",
		PhysicalBlocksPerLogicalKVBlock: 1,
		DCPSize:                         1,
		PCPSize:                         1,
	}
}

// demoPayloads returns the encoded payload of every (pp, tp) rank in
// [0, ppSize) x [0, tpSize), the agent metadata laid out as release r's vLLM
// writes it (handshake.EncodePayload).
func demoPayloads(engineID, hash string, r vllm.Release, ppSize, tpSize int) (map[handshake.Rank][]byte, error) {
	out := make(map[handshake.Rank][]byte, ppSize*tpSize)
	for pp := range ppSize {
		for tp := range tpSize {
			m := demoMetadata(engineID, pp, tp)
			b, err := handshake.EncodePayload(hash, &m, r)
			if err != nil {
				return nil, err
			}
			out[handshake.Rank{PP: pp, TP: tp}] = b
		}
	}
	return out, nil
}
