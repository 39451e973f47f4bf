package handshake_test

import (
	"encoding/hex"
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/vllm"
)

// A listener's view of one exchange: parse the request body, refuse a bad
// one with a classified reason, and build the reply frames.
func Example() {
	body, _ := hex.DecodeString("93c40c6765745f6d6574615f6d73670001") // (GET_META_MSG, 0, 1)
	req, err := handshake.ParseRequest(body)
	fmt.Printf("%v pp=%d tp=%d err=%v\n", req.Variant, req.PP, req.TP, err)

	_, err = handshake.ParseRequest([]byte{0x94, 0xc0, 0, 1, 2}) // wrong arity
	fmt.Println(decodeguard.ReasonOf(err), "|", err)
	_, err = handshake.ParseRequest([]byte{0x92, 0xc4, 0x02, 0x1b, 0x5b, 0x01}) // wrong message
	fmt.Println(decodeguard.ReasonOf(err), "|", err)

	meta := handshake.NixlAgentMetadata{
		EngineID:         "engine-0",
		AgentMetadata:    []byte("nixl-agent-blob"),
		KVCachesBaseAddr: []uint64{0x7f3a00000000},
		NumBlocks:        1000,
		BlockLens:        []handshake.Int{65536},
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
	payload, _ := handshake.NewPayload(hash, &meta)
	frame, _ := payload.MarshalMsg(nil)
	ts := handshake.AppendTimestamp(nil, 12345.678)
	fmt.Printf("hash %s\npayload %d bytes, timestamp %x\n", hash, len(frame), ts)

	// The decode side: payload, then hash check, then metadata.
	got, _ := handshake.DecodePayload(frame)
	m, err := got.AgentMetadata()
	fmt.Println(got.CompatibilityHash == hash, m.EngineID, m.KVCachesBaseAddr, m.DCPSize, err)
	// Output:
	// V3 pp=0 tp=1 err=<nil>
	// decode | zmqguard: decode: request array: expected 2 or 3 elements, got 4 at offset 0
	// validate | zmqguard: validate: element 0 (message) is not get_meta_msg: len=2 hex=1b5b at offset 1
	// hash 6a37293b8dd012b924959e66c92133ca7d47e56344e0e958ea9bd0ea3718ea1a
	// payload 459 bytes, timestamp cb40c81cd6c8b43958
	// true engine-0 [139887084830720] 1 <nil>
}

func ExampleCompatibilityHash() {
	h, err := handshake.CompatibilityHash(map[string]any{"b": 1.0, "a": []any{"é", nil, true}})
	fmt.Println(h, err)
	js, _ := handshake.PythonJSON(map[string]any{"b": 1.0, "a": []any{"é", nil, true}, "c": 1e-05})
	fmt.Println(string(js))
	// Output:
	// 29ae4f9e40b57723462a8a9984f7238f40f8883f24b1496a2fb9f85b0e26f453 <nil>
	// {"a": ["\u00e9", null, true], "b": 1.0, "c": 1e-05}
}
