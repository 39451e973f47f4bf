package kvevents

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
)

// maxHashBytes is the longest bin-form block hash accepted: vLLM's block
// hashes are 32-byte digests (sha256, sha256_cbor) or shorter (xxhash).
const maxHashBytes = 32

// Hash is one block hash in either of vLLM's two forms: an unsigned 64-bit
// integer (the default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1) or the raw
// digest as msgpack bin (that variable set to 0). The zero Hash is the
// integer 0.
type Hash struct {
	u uint64
	n uint8 // bin length; 0 means the integer form
	b [maxHashBytes]byte
}

// IntHash returns the integer form of a hash.
func IntHash(v uint64) Hash { return Hash{u: v} }

// BytesHash returns the bin form of a hash; it reports false when b is empty
// or longer than maxHashBytes.
func BytesHash(b []byte) (Hash, bool) {
	var h Hash
	if len(b) == 0 || len(b) > maxHashBytes {
		return h, false
	}
	h.n = uint8(len(b))
	copy(h.b[:], b)
	h.u = foldBytes(b)
	return h, true
}

// Bytes returns the bin form's digest (a copy), or nil for the integer form.
func (h Hash) Bytes() []byte {
	if h.n == 0 {
		return nil
	}
	return append([]byte(nil), h.b[:h.n]...)
}

// Uint64 returns the hash as vLLM's integer form: the value itself for an
// integer hash, and for a bin hash the fold vLLM applies when
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is set — the digest read as a
// big-endian integer, masked to its low 64 bits (maybe_convert_block_hash in
// vllm/v1/core/kv_cache_utils.py), i.e. its last 8 bytes big-endian. A
// consumer keying its index on Uint64 therefore sees the same key for a block
// whichever form the engine publishes.
func (h Hash) Uint64() uint64 { return h.u }

// String renders an integer hash in decimal and a bin hash as lower-case hex.
func (h Hash) String() string {
	if h.n == 0 {
		return strconv.FormatUint(h.u, 10)
	}
	return hex.EncodeToString(h.b[:h.n])
}

func foldBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// The event types vLLM publishes (vllm/distributed/kv_events.py), by its
// class names: the values of [Event.Type].
const (
	// BlockStored: blocks entered the cache (or were offloaded to a medium).
	BlockStored = "BlockStored"
	// BlockRemoved: blocks left the cache of a medium.
	BlockRemoved = "BlockRemoved"
	// AllBlocksCleared: the engine dropped its whole prefix cache.
	AllBlocksCleared = "AllBlocksCleared"
)

// Opt is a field vLLM may send as nil or leave out (lora_id, medium,
// parent_block_hash, data_parallel_rank, ...): V means something only when
// Valid is set.
type Opt[T any] struct {
	V     T
	Valid bool
}

// Some returns a set Opt: Some("GPU"), Some[int64](0).
func Some[T any](v T) Opt[T] { return Opt[T]{V: v, Valid: true} }

// Event is one KV-cache event, with every field vLLM defines under its Go
// name. Which fields mean something depends on Type: BlockStored uses all of
// them, BlockRemoved BlockHashes, Medium, GroupIdx, Locality and Ownership,
// AllBlocksCleared none. Fields absent from the wire (older releases, or
// optional fields left at their default) are the zero value (Valid false).
//
// ExtraKeys holds, when HasExtraKeys, one raw msgpack object per block (a
// tuple, or nil): their contents are engine-specific (multi-modal hashes,
// LoRA name, cache salt) and left to the consumer. In a delivered Batch the
// ExtraKeys slices alias the received frame.
//
// Two BlockStored shapes need care from an index. An offloading
// placeholder (no TokenIDs) says only which tier (Medium, Locality,
// GroupIdx) now holds its blocks, nothing about the prefix they cache:
// vLLM's offloading connector publishes one by default for every block it
// offloads to CPU or storage (block_size 0 and one hash, the offload key's,
// since vLLM PR #36644; releases before it sent the cache's block size with
// no tokens); record the location for hashes already known and do not treat
// it as a new prefix. A hybrid model's store may carry the tokens of blocks
// left out of BlockHashes ([Event.SkippedBlocks]).
type Event struct {
	// Type is BlockStored, BlockRemoved or AllBlocksCleared.
	Type            string
	BlockHashes     []Hash
	ParentBlockHash Opt[Hash]
	TokenIDs        []int64
	// BlockSize is the tokens per block; 0 only in an offloading
	// placeholder (no token_ids, vLLM PR #36644).
	BlockSize    int64
	LoraID       Opt[int64]
	Medium       Opt[string]
	LoraName     Opt[string]
	HasExtraKeys bool
	ExtraKeys    [][]byte

	GroupIdx                 Opt[int64]
	KVCacheSpecKind          Opt[string]
	KVCacheSpecSlidingWindow Opt[int64]
	// Locality is "LOCAL" or "REMOTE" relative to the publisher (vLLM PR
	// #48281), when the tier says.
	Locality Opt[string]
	// Ownership names the tier that owns the blocks (BlockStored and
	// BlockRemoved, later vLLM main), when sent.
	Ownership Opt[string]
	// SessionID is the session a BlockStored's request belongs to (vLLM PR
	// #51381), when sent.
	SessionID Opt[string]
}

// SkippedBlocks returns how many blocks a BlockStored's token_ids cover
// beyond its block hashes: len(TokenIDs)/BlockSize - len(BlockHashes), and
// 0 for every other event. vLLM leaves null and masked-out blocks (hybrid
// models: Mamba groups in "align" prefix-caching mode, sliding-window
// groups) out of block_hashes and extra_keys but keeps their tokens
// (vllm/v1/core/block_pool.py cache_full_blocks; vLLM issue #44451). When it
// is above 0, the hashes cannot be paired with token blocks by position.
func (e *Event) SkippedBlocks() int {
	if e.Type != BlockStored || e.BlockSize <= 0 || len(e.TokenIDs) == 0 {
		return 0
	}
	n := int64(len(e.TokenIDs))/e.BlockSize - int64(len(e.BlockHashes))
	if n < 0 {
		return 0
	}
	return int(n)
}

// retainElems caps the slice capacity a reused Event keeps between
// batches, so one huge batch does not pin its memory in every source.
const retainElems = 1 << 12

// reset clears e, keeping slice capacity up to retainElems.
func (e *Event) reset() {
	hashes, tokens, extra := e.BlockHashes[:0], e.TokenIDs[:0], e.ExtraKeys[:0]
	if cap(hashes) > retainElems {
		hashes = nil
	}
	if cap(tokens) > 4*retainElems {
		tokens = nil
	}
	if cap(extra) > retainElems {
		extra = nil
	}
	*e = Event{BlockHashes: hashes, TokenIDs: tokens, ExtraKeys: extra}
}

// Batch is one KVEventBatch from one source: the events an engine published
// together under one sequence number.
//
// A Batch given to a Handler, and everything in it, is valid only until the
// Handler returns: the Subscriber reuses it. Copy what must outlive the call.
type Batch struct {
	// Source is the name of the source it came from.
	Source string
	// Seq is the publisher's sequence number.
	Seq uint64
	// TS is the engine's timestamp (seconds since the epoch).
	TS float64
	// DataParallelRank is the publishing engine's DP rank, when sent.
	DataParallelRank Opt[int64]
	// Events are the batch's valid events, in publication order. An event
	// that failed validation is left out (and counted); Index gives each
	// remaining event's position in the batch as published.
	Events []Event
	// Index[i] is the position of Events[i] in the published batch.
	Index []int
	// Replayed reports that the batch came from the replay endpoint.
	Replayed bool
	// Digest is a digest of the batch's payload bytes as received: with
	// Seq, the batch's Position.
	Digest uint64
	// DroppedEvents is how many events of this batch failed validation.
	DroppedEvents int

	// drops holds the fast path's event drops until the whole batch is
	// accepted (a batch refused later reports none).
	drops []eventDrop
	// strs are recently decoded strings that are not constants (lora
	// names, session ids, ...), reused when the same bytes come again.
	strs    [stringCache]string
	strNext uint8
}

// stringCache is how many recent strings a Batch keeps for reuse.
const stringCache = 8
