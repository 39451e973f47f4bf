package nixlwire

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/vllm"
)

// metadataFieldsV6 is the number of fields of vLLM's NixlAgentMetadata
// dataclass at NIXL connector versions 3 to 6 (vLLM main up to the golden
// vectors' commit, 2026-08-07, before PR #50620): engine_id, agent_metadata,
// kv_caches_base_addr, device_id, num_blocks, block_lens, kv_cache_layout,
// block_size, ssm_sizes, attn_backend_name,
// physical_blocks_per_logical_kv_block.
const metadataFieldsV6 = 11

// MarshalRelease appends m as release r's vLLM encodes its NixlAgentMetadata
// dataclass: msgspec writes a dataclass as a map of every field in
// declaration order, so the field set is the release's. For releases whose
// NIXL connector version is 6 or lower (0.25, 0.26, main-pre-50620) that is
// the 11 fields of that dataclass, byte for byte what vLLM writes (checked
// on vLLM's own bytes); BlockStrides, the Region* fields, DCPSize, PCPSize
// and RegionMembers are not written. For later releases it is [MarshalMsg]'s
// 19-field map, whose extra fields a receiver of either kind skips or
// defaults.
func (m *NixlAgentMetadata) MarshalRelease(b []byte, r vllm.Release) ([]byte, error) {
	if r.Rules().NixlConnectorVersion > 6 {
		return m.MarshalMsg(b)
	}
	b = msgp.AppendMapHeader(b, metadataFieldsV6)
	b = msgp.AppendString(b, "engine_id")
	b = msgp.AppendString(b, m.EngineID)
	b = msgp.AppendString(b, "agent_metadata")
	b = msgp.AppendBytes(b, m.AgentMetadata)
	b = msgp.AppendString(b, "kv_caches_base_addr")
	b = msgp.AppendArrayHeader(b, uint32(len(m.KVCachesBaseAddr)))
	for _, a := range m.KVCachesBaseAddr {
		b = msgp.AppendUint64(b, a)
	}
	b = msgp.AppendString(b, "device_id")
	b = appendInt(b, int64(m.DeviceID))
	b = msgp.AppendString(b, "num_blocks")
	b = appendInt(b, int64(m.NumBlocks))
	b = msgp.AppendString(b, "block_lens")
	b = msgp.AppendArrayHeader(b, uint32(len(m.BlockLens)))
	for _, l := range m.BlockLens {
		b = appendInt(b, int64(l))
	}
	b = msgp.AppendString(b, "kv_cache_layout")
	b = msgp.AppendString(b, m.KVCacheLayout)
	b = msgp.AppendString(b, "block_size")
	b = appendInt(b, int64(m.BlockSize))
	b = msgp.AppendString(b, "ssm_sizes")
	b = msgp.AppendArrayHeader(b, 2)
	b = appendInt(b, int64(m.SSMSizes[0]))
	b = appendInt(b, int64(m.SSMSizes[1]))
	b = msgp.AppendString(b, "attn_backend_name")
	b = msgp.AppendString(b, m.AttnBackendName)
	b = msgp.AppendString(b, "physical_blocks_per_logical_kv_block")
	return appendInt(b, int64(m.PhysicalBlocksPerLogicalKVBlock)), nil
}

// NewPayloadRelease is [NewPayload] with m encoded by
// [NixlAgentMetadata.MarshalRelease] for release r.
func NewPayloadRelease(compatibilityHash string, m *NixlAgentMetadata, r vllm.Release) (NixlHandshakePayload, error) {
	b, err := m.MarshalRelease(nil, r)
	if err != nil {
		return NixlHandshakePayload{}, err
	}
	return NixlHandshakePayload{CompatibilityHash: compatibilityHash, AgentMetadataBytes: b}, nil
}
