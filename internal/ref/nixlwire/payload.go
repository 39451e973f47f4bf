package nixlwire

//go:generate go run github.com/tinylib/msgp -tests=false

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// Int is an integer field of a vLLM message. It encodes the way Python's
// msgpack and msgspec encode a Python int: a non-negative value in the
// smallest unsigned form (positive fixint, uint 8, 16, 32 or 64), a negative
// value in the smallest signed form. msgp's own int64 encoding writes
// non-negative values as signed ints, which decodes to the same number but
// differs from Python's bytes; Int keeps the encodings byte-identical.
//
// Int decodes from any msgpack integer, signed or unsigned, whose value fits
// in an int64.
//
//msgp:ignore Int
type Int int64

// MarshalMsg implements msgp.Marshaler.
func (i Int) MarshalMsg(b []byte) ([]byte, error) { return appendInt(b, int64(i)), nil }

// UnmarshalMsg implements msgp.Unmarshaler.
func (i *Int) UnmarshalMsg(b []byte) ([]byte, error) {
	v, o, err := msgp.ReadInt64Bytes(b)
	if err != nil {
		return b, err
	}
	*i = Int(v)
	return o, nil
}

// EncodeMsg implements msgp.Encodable.
func (i Int) EncodeMsg(w *msgp.Writer) error {
	if i >= 0 {
		return w.WriteUint64(uint64(i))
	}
	return w.WriteInt64(int64(i))
}

// DecodeMsg implements msgp.Decodable.
func (i *Int) DecodeMsg(r *msgp.Reader) error {
	v, err := r.ReadInt64()
	if err != nil {
		return err
	}
	*i = Int(v)
	return nil
}

// Msgsize implements msgp.Sizer: the largest encoding of an Int.
func (i Int) Msgsize() int { return msgp.Int64Size }

// appendInt appends v as Python's msgpack encodes an int.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return msgp.AppendUint64(b, uint64(v))
	}
	return msgp.AppendInt64(b, v)
}

// Nullable returns a pointer to v, for the optional list fields of
// [NixlAgentMetadata] (a nil pointer encodes as msgpack nil, Python's None;
// a pointer to an empty slice encodes as an empty array).
func Nullable[T any](v []T) *[]T { return &v }

// NixlHandshakePayload is the reply of the V2 and V3 handshakes: a msgpack
// map of the sender's compatibility hash and its msgpack-encoded
// [NixlAgentMetadata]. The receiver decodes the payload, compares the hash
// with its own, and only then decodes the metadata, so that a schema change
// shows up as a hash mismatch rather than a decode error.
type NixlHandshakePayload struct {
	// CompatibilityHash is the sender's compatibility hash ([CompatibilityHash]):
	// 64 lower-case hex digits (msgpack str).
	CompatibilityHash string `msg:"compatibility_hash"`
	// AgentMetadataBytes is the msgpack encoding of the sender's
	// NixlAgentMetadata (msgpack bin).
	AgentMetadataBytes []byte `msg:"agent_metadata_bytes"`
}

// Reset sets p to its zero value. Decoding into a reused value with
// UnmarshalMsg or DecodeMsg overwrites only the keys present in the input,
// so call Reset first ([DecodePayload] does).
func (p *NixlHandshakePayload) Reset() { *p = NixlHandshakePayload{} }

// NixlAgentMetadata is the wire form of handshake.NixlAgentMetadata (which
// has the same fields with int64 for Int): one prefill worker's KV cache
// described to a decode worker. It is a msgpack map keyed by the Python field names, in
// declaration order (connector version 12).
//
// Releases before version 12 send fewer keys (the oldest still decodable:
// engine_id, agent_metadata, kv_caches_base_addr, device_id, num_blocks,
// block_lens, kv_cache_layout, block_size); missing keys keep the values
// [NixlAgentMetadata.Reset] gives them (DCPSize and PCPSize 1, everything else
// zero, nil or empty). Unknown keys are skipped.
//
// The optional list fields are pointers to slices so that Python's None (a
// nil pointer) and an empty list (a pointer to an empty slice) stay apart;
// see [Nullable].
type NixlAgentMetadata struct {
	// EngineID is the sending engine's id (str).
	EngineID string `msg:"engine_id"`
	// AgentMetadata is the NIXL agent's own serialized metadata (bin).
	AgentMetadata []byte `msg:"agent_metadata"`
	// KVCachesBaseAddr holds the base address of each registered KV cache
	// region. Addresses of 2^32 and more encode as uint64; decoding accepts
	// any non-negative integer encoding.
	KVCachesBaseAddr []uint64 `msg:"kv_caches_base_addr"`
	// DeviceID is the sender's device index.
	DeviceID Int `msg:"device_id"`
	// NumBlocks is the number of KV cache blocks per region.
	NumBlocks Int `msg:"num_blocks"`
	// BlockLens is the length in bytes of one block, per region.
	BlockLens []Int `msg:"block_lens"`
	// BlockStrides is the distance in bytes between blocks, per region
	// (version 9 and later).
	BlockStrides []Int `msg:"block_strides"`
	// KVCacheLayout names the KV cache memory layout, e.g. "HND" or "NHD".
	KVCacheLayout string `msg:"kv_cache_layout"`
	// BlockSize is the number of tokens per block.
	BlockSize Int `msg:"block_size"`
	// SSMSizes holds the two state sizes of Mamba-style layers
	// (a Python 2-tuple, encoded as a 2-element array).
	SSMSizes [2]Int `msg:"ssm_sizes"`
	// AttnBackendName names the attention backend.
	AttnBackendName string `msg:"attn_backend_name"`
	// PhysicalBlocksPerLogicalKVBlock is the ratio of kernel blocks to
	// logical blocks (version 3 and later).
	PhysicalBlocksPerLogicalKVBlock Int `msg:"physical_blocks_per_logical_kv_block"`
	// RegionNumBlocks is the number of blocks per region, or nil (None).
	RegionNumBlocks *[]Int `msg:"region_num_blocks"`
	// RegionGroupIDs is the KV cache group of each region, or nil (None).
	RegionGroupIDs *[]Int `msg:"region_group_ids"`
	// RegionNames names each region, or nil (None).
	RegionNames *[]string `msg:"region_names"`
	// RegionMemTypes is the memory type of each region, or nil (None).
	RegionMemTypes *[]string `msg:"region_mem_types"`
	// DCPSize is the decode context-parallel size (default 1).
	DCPSize Int `msg:"dcp_size"`
	// PCPSize is the prefill context-parallel size (default 1).
	PCPSize Int `msg:"pcp_size"`
	// RegionMembers lists the layer names sharing each region, in region
	// order (default empty; a nil slice encodes as an empty array).
	RegionMembers [][]string `msg:"region_members"`
}

// Reset sets m to the values a key missing from the input takes: DCPSize
// and PCPSize 1, every other field zero or nil. Decoding into a reused value
// with UnmarshalMsg or DecodeMsg overwrites only the keys present in the
// input, so call Reset first ([DecodeAgentMetadata] does).
func (m *NixlAgentMetadata) Reset() { *m = NixlAgentMetadata{DCPSize: 1, PCPSize: 1} }

// DecodePayload decodes a [NixlHandshakePayload] from one frame with
// decodeguard's default limits. See [DecodePayloadLimits].
func DecodePayload(b []byte) (NixlHandshakePayload, error) {
	return DecodePayloadLimits(b, nil)
}

// DecodePayloadLimits decodes a [NixlHandshakePayload] from one frame: it
// runs [msgpscan.Scan] with lim (nil means the defaults), then the
// generated decoder, and requires the frame to hold exactly one map. Every
// failure is a classified *[decodeguard.Error] (ReasonDecode or
// ReasonOversize; ReasonDecoderPanic would mean a bug in the decoder). The
// payload's AgentMetadataBytes is a copy, not a view of b.
func DecodePayloadLimits(b []byte, lim *decodeguard.Limits) (NixlHandshakePayload, error) {
	var p NixlHandshakePayload
	if err := msgpscan.DecodeMsgp(b, lim, &p); err != nil {
		return NixlHandshakePayload{}, err
	}
	return p, nil
}

// DecodeAgentMetadata decodes a [NixlAgentMetadata] from b with
// decodeguard's default limits. See [DecodeAgentMetadataLimits].
func DecodeAgentMetadata(b []byte) (NixlAgentMetadata, error) {
	return DecodeAgentMetadataLimits(b, nil)
}

// DecodeAgentMetadataLimits decodes a [NixlAgentMetadata] from b (a frame of
// a V1 reply, or a payload's AgentMetadataBytes): it runs
// [msgpscan.Scan] with lim (nil means the defaults), then the generated
// decoder starting from [NixlAgentMetadata.Reset]'s defaults, and requires b
// to hold exactly one map. Every failure is a classified
// *[decodeguard.Error], as for [DecodePayloadLimits]. No check beyond types
// is made: the caller compares EngineID and geometry with what it expects.
func DecodeAgentMetadataLimits(b []byte, lim *decodeguard.Limits) (NixlAgentMetadata, error) {
	var m NixlAgentMetadata
	m.Reset()
	if err := msgpscan.DecodeMsgp(b, lim, &m); err != nil {
		return NixlAgentMetadata{}, err
	}
	return m, nil
}

// AgentMetadata decodes the payload's AgentMetadataBytes with
// [DecodeAgentMetadata].
func (p *NixlHandshakePayload) AgentMetadata() (NixlAgentMetadata, error) {
	return DecodeAgentMetadata(p.AgentMetadataBytes)
}

// NewPayload encodes m and wraps it with compatibilityHash into the payload
// a V2 or V3 listener replies with.
func NewPayload(compatibilityHash string, m *NixlAgentMetadata) (NixlHandshakePayload, error) {
	b, err := m.MarshalMsg(nil)
	if err != nil {
		return NixlHandshakePayload{}, err
	}
	return NixlHandshakePayload{CompatibilityHash: compatibilityHash, AgentMetadataBytes: b}, nil
}
