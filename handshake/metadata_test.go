package handshake

import (
	"reflect"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
)

// fullMetadata sets every field, with one optional list None, one empty
// and two filled, so that a conversion that loses a field or the
// None/empty distinction shows.
func fullMetadata() NixlAgentMetadata {
	return NixlAgentMetadata{
		EngineID: "prefill-3", AgentMetadata: []byte("agent"), KVCachesBaseAddr: []uint64{1 << 40, 1<<40 + 4096},
		DeviceID: 3, NumBlocks: 1000, BlockLens: []int64{4096, 4096}, BlockStrides: []int64{8192, 8192},
		KVCacheLayout: "HND", BlockSize: 16, SSMSizes: [2]int64{7, -1}, AttnBackendName: "FLASH_ATTN",
		PhysicalBlocksPerLogicalKVBlock: 2, RegionNumBlocks: &[]int64{1000, 1000}, RegionGroupIDs: &[]int64{},
		RegionNames: &[]string{"k", "v"}, RegionMemTypes: nil, DCPSize: 2, PCPSize: 4,
		RegionMembers: [][]string{{"layer.0"}, {"layer.1"}},
	}
}

// TestEncodePayloadRoundTrip: what EncodePayload writes for the latest
// release decodes, through the wire type, to the same NixlAgentMetadata;
// for a release of connector version 6 or lower it is the 11-field map.
func TestEncodePayloadRoundTrip(t *testing.T) {
	m := fullMetadata()
	b, err := EncodePayload(testHash, &m, vllm.Latest())
	if err != nil {
		t.Fatal(err)
	}
	p, err := nixlwire.DecodePayload(b)
	if err != nil || p.CompatibilityHash != testHash {
		t.Fatalf("payload: %+v, %v", p, err)
	}
	w, err := p.AgentMetadata()
	if err != nil {
		t.Fatal(err)
	}
	if got := fromWire(&w); !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
	if n, _, err := msgp.ReadMapHeaderBytes(p.AgentMetadataBytes); err != nil || n != 19 {
		t.Fatalf("latest metadata map: %d keys, %v", n, err)
	}

	b, err = EncodePayload(testHash, &m, vllm.MustParse("main-pre-50620"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = nixlwire.DecodePayload(b); err != nil {
		t.Fatal(err)
	}
	if n, _, err := msgp.ReadMapHeaderBytes(p.AgentMetadataBytes); err != nil || n != 11 {
		t.Fatalf("main-pre-50620 metadata map: %d keys, %v", n, err)
	}
	w, _ = p.AgentMetadata()
	if got := fromWire(&w); got.EngineID != m.EngineID || got.NumBlocks != m.NumBlocks || got.BlockStrides != nil || got.DCPSize != 1 {
		t.Fatalf("main-pre-50620 decoded: %+v", got)
	}
}

// TestEncodePayloadZeroSizes: a zero DCPSize or PCPSize means 1, vLLM's
// default, on the wire.
func TestEncodePayloadZeroSizes(t *testing.T) {
	m := NixlAgentMetadata{EngineID: "e", KVCacheLayout: "HND"}
	b, err := EncodePayload(testHash, &m, vllm.Latest())
	if err != nil {
		t.Fatal(err)
	}
	p, err := nixlwire.DecodePayload(b)
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.AgentMetadata()
	if err != nil || w.DCPSize != 1 || w.PCPSize != 1 {
		t.Fatalf("decoded dcp_size %d, pcp_size %d, %v; want 1, 1", w.DCPSize, w.PCPSize, err)
	}
}
