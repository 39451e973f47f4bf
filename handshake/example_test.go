package handshake_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/vllm"
)

// A prefill agent's reply payload for one rank: its compatibility hash over
// the release's factor set, and its KV cache metadata encoded as that
// release's vLLM encodes it.
func Example() {
	meta := handshake.NixlAgentMetadata{
		EngineID:         "engine-0",
		AgentMetadata:    []byte("nixl-agent-blob"),
		KVCachesBaseAddr: []uint64{0x7f3a00000000},
		NumBlocks:        1000,
		BlockLens:        []int64{65536},
		KVCacheLayout:    "HND",
		BlockSize:        16,
		DCPSize:          1,
		PCPSize:          1,
	}
	// The factor set of the latest vLLM (connector version 7, with
	// cross_layers_blocks, speculative_config and transfer_mode); set
	// Release to hash an older release's set.
	factors := handshake.Factors{
		Release: vllm.Latest(), VLLMVersion: "0.11.1",
		Model: "meta-llama/Llama-3.1-8B-Instruct", Dtype: "torch.bfloat16",
		NumKVHeads: 8, HeadSize: 128, NumHiddenLayers: 32, AttnBackendName: "FLASH_ATTN",
		CacheDtype: "auto", IsHMAEnabled: true, TransferMode: "pull",
	}
	hash, _ := factors.Hash()
	payload, err := handshake.EncodePayload(hash, &meta, factors.Release)
	fmt.Printf("hash %s\npayload %d bytes, %v\n", hash, len(payload), err)
	// Output:
	// hash 6a37293b8dd012b924959e66c92133ca7d47e56344e0e958ea9bd0ea3718ea1a
	// payload 459 bytes, <nil>
}
