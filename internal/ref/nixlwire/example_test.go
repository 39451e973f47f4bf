package nixlwire_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

func ExampleCompatibilityHash() {
	h, err := nixlwire.CompatibilityHash(map[string]any{"b": 1.0, "a": []any{"é", nil, true}})
	fmt.Println(h, err)
	js, _ := nixlwire.PythonJSON(map[string]any{"b": 1.0, "a": []any{"é", nil, true}, "c": 1e-05})
	fmt.Println(string(js))
	// Output:
	// 29ae4f9e40b57723462a8a9984f7238f40f8883f24b1496a2fb9f85b0e26f453 <nil>
	// {"a": ["\u00e9", null, true], "b": 1.0, "c": 1e-05}
}

// A listener's view of one exchange's reply: the payload a V3 request is
// answered with, and the timestamp frame after it, decoded as a client does.
func ExampleDecodePayload() {
	meta := nixlwire.NixlAgentMetadata{EngineID: "engine-0", KVCachesBaseAddr: []uint64{0x7f3a00000000},
		NumBlocks: 1000, BlockLens: []nixlwire.Int{65536}, KVCacheLayout: "HND", BlockSize: 16, DCPSize: 1, PCPSize: 1}
	p, _ := nixlwire.NewPayload("c940fa5f", &meta)
	frame, _ := p.MarshalMsg(nil)
	ts := nixlwire.AppendTimestamp(nil, 12345.678)

	got, _ := nixlwire.DecodePayload(frame)
	m, err := got.AgentMetadata()
	sec, _ := nixlwire.ParseTimestamp(ts)
	fmt.Println(got.CompatibilityHash, m.EngineID, m.KVCachesBaseAddr, m.DCPSize, err, sec)
	fmt.Printf("%x\n", nixlwire.AppendRequest(nil, 3, 0, 1))
	// Output:
	// c940fa5f engine-0 [139887084830720] 1 <nil> 12345.678
	// 93c40c6765745f6d6574615f6d73670001
}
