package handshake

import (
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
)

// NixlAgentMetadata describes one prefill worker's KV cache to a decode
// worker: its NIXL agent, the base addresses and geometry of its KV cache
// regions. A listener's user fills it (and encodes it with
// [EncodePayload]); [Fetch] returns the one a listener sent.
//
// On the wire it is a msgpack map keyed by the Python field names, in
// declaration order, with integers encoded as Python encodes them. Releases
// before connector version 12 send fewer keys; a missing key decodes as
// DCPSize and PCPSize 1, everything else zero, nil or empty. Unknown keys
// are skipped.
//
// The optional list fields are pointers to slices so that Python's None (a
// nil pointer) and an empty list (a pointer to an empty slice, e.g.
// &[]int64{}) stay apart.
type NixlAgentMetadata struct {
	// EngineID is the sending engine's id (str).
	EngineID string
	// AgentMetadata is the NIXL agent's own serialized metadata (bin).
	AgentMetadata []byte
	// KVCachesBaseAddr holds the base address of each registered KV cache
	// region.
	KVCachesBaseAddr []uint64
	// DeviceID is the sender's device index.
	DeviceID int64
	// NumBlocks is the number of KV cache blocks per region.
	NumBlocks int64
	// BlockLens is the length in bytes of one block, per region.
	BlockLens []int64
	// BlockStrides is the distance in bytes between blocks, per region
	// (connector version 9 and later).
	BlockStrides []int64
	// KVCacheLayout names the KV cache memory layout, e.g. "HND" or "NHD".
	KVCacheLayout string
	// BlockSize is the number of tokens per block.
	BlockSize int64
	// SSMSizes holds the two state sizes of Mamba-style layers.
	SSMSizes [2]int64
	// AttnBackendName names the attention backend.
	AttnBackendName string
	// PhysicalBlocksPerLogicalKVBlock is the ratio of kernel blocks to
	// logical blocks (connector version 3 and later).
	PhysicalBlocksPerLogicalKVBlock int64
	// RegionNumBlocks is the number of blocks per region, or nil (None).
	RegionNumBlocks *[]int64
	// RegionGroupIDs is the KV cache group of each region, or nil (None).
	RegionGroupIDs *[]int64
	// RegionNames names each region, or nil (None).
	RegionNames *[]string
	// RegionMemTypes is the memory type of each region, or nil (None).
	RegionMemTypes *[]string
	// DCPSize is the decode context-parallel size. Zero means 1 (what a
	// release that omits the key means too).
	DCPSize int64
	// PCPSize is the prefill context-parallel size. Zero means 1.
	PCPSize int64
	// RegionMembers lists the layer names sharing each region, in region
	// order (a nil slice encodes as an empty list).
	RegionMembers [][]string
}

// EncodePayload returns the reply payload a V2 or V3 listener sends for one
// rank (a value of [ListenerConfig.Payloads]): the msgpack map of
// compatibilityHash (see [Factors.Hash]) and m encoded as release r's vLLM
// encodes its NixlAgentMetadata dataclass (the zero Release is the latest).
// msgspec writes every field of the dataclass, so the field set is the
// release's: for connector version 6 and lower (0.25, 0.26, main-pre-50620)
// the 11 fields of that dataclass, byte for byte what vLLM writes
// (BlockStrides, the Region* fields, DCPSize, PCPSize and RegionMembers are
// not sent); for later releases all 19, whose extra fields a receiver of
// either kind skips or defaults.
func EncodePayload(compatibilityHash string, m *NixlAgentMetadata, r vllm.Release) ([]byte, error) {
	w := toWire(m)
	p, err := nixlwire.NewPayloadRelease(compatibilityHash, &w, r)
	if err != nil {
		return nil, err
	}
	return p.MarshalMsg(nil)
}

func ints(v []int64) []nixlwire.Int {
	if v == nil {
		return nil
	}
	out := make([]nixlwire.Int, len(v))
	for i, x := range v {
		out[i] = nixlwire.Int(x)
	}
	return out
}

func int64s(v []nixlwire.Int) []int64 {
	if v == nil {
		return nil
	}
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func optInts(v *[]int64) *[]nixlwire.Int {
	if v == nil {
		return nil
	}
	out := ints(*v)
	if out == nil {
		out = []nixlwire.Int{}
	}
	return &out
}

func optInt64s(v *[]nixlwire.Int) *[]int64 {
	if v == nil {
		return nil
	}
	out := int64s(*v)
	if out == nil {
		out = []int64{}
	}
	return &out
}

// toWire returns m as its wire type, with a zero DCPSize and PCPSize
// sent as their default, 1. Slices of strings and bytes are shared, not
// copied.
func toWire(m *NixlAgentMetadata) nixlwire.NixlAgentMetadata {
	dcp, pcp := m.DCPSize, m.PCPSize
	if dcp == 0 {
		dcp = 1
	}
	if pcp == 0 {
		pcp = 1
	}
	return nixlwire.NixlAgentMetadata{
		EngineID:                        m.EngineID,
		AgentMetadata:                   m.AgentMetadata,
		KVCachesBaseAddr:                m.KVCachesBaseAddr,
		DeviceID:                        nixlwire.Int(m.DeviceID),
		NumBlocks:                       nixlwire.Int(m.NumBlocks),
		BlockLens:                       ints(m.BlockLens),
		BlockStrides:                    ints(m.BlockStrides),
		KVCacheLayout:                   m.KVCacheLayout,
		BlockSize:                       nixlwire.Int(m.BlockSize),
		SSMSizes:                        [2]nixlwire.Int{nixlwire.Int(m.SSMSizes[0]), nixlwire.Int(m.SSMSizes[1])},
		AttnBackendName:                 m.AttnBackendName,
		PhysicalBlocksPerLogicalKVBlock: nixlwire.Int(m.PhysicalBlocksPerLogicalKVBlock),
		RegionNumBlocks:                 optInts(m.RegionNumBlocks),
		RegionGroupIDs:                  optInts(m.RegionGroupIDs),
		RegionNames:                     m.RegionNames,
		RegionMemTypes:                  m.RegionMemTypes,
		DCPSize:                         nixlwire.Int(dcp),
		PCPSize:                         nixlwire.Int(pcp),
		RegionMembers:                   m.RegionMembers,
	}
}

// fromWire returns w as the exported type, sharing its string and byte
// slices.
func fromWire(w *nixlwire.NixlAgentMetadata) NixlAgentMetadata {
	return NixlAgentMetadata{
		EngineID:                        w.EngineID,
		AgentMetadata:                   w.AgentMetadata,
		KVCachesBaseAddr:                w.KVCachesBaseAddr,
		DeviceID:                        int64(w.DeviceID),
		NumBlocks:                       int64(w.NumBlocks),
		BlockLens:                       int64s(w.BlockLens),
		BlockStrides:                    int64s(w.BlockStrides),
		KVCacheLayout:                   w.KVCacheLayout,
		BlockSize:                       int64(w.BlockSize),
		SSMSizes:                        [2]int64{int64(w.SSMSizes[0]), int64(w.SSMSizes[1])},
		AttnBackendName:                 w.AttnBackendName,
		PhysicalBlocksPerLogicalKVBlock: int64(w.PhysicalBlocksPerLogicalKVBlock),
		RegionNumBlocks:                 optInt64s(w.RegionNumBlocks),
		RegionGroupIDs:                  optInt64s(w.RegionGroupIDs),
		RegionNames:                     w.RegionNames,
		RegionMemTypes:                  w.RegionMemTypes,
		DCPSize:                         int64(w.DCPSize),
		PCPSize:                         int64(w.PCPSize),
		RegionMembers:                   w.RegionMembers,
	}
}
