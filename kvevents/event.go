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
//
// SGLang's hashes are signed int64 (hash_str_to_int64 in SGLang's
// mem_cache/utils.py, since SGLang PR #13488): about half are negative, sent
// as msgpack negative integers. A Hash remembers that the wire carried a
// negative integer (see SignedHash), with no setting per source or engine:
// String shows it negative, as SGLang holds it, and the encoder writes it
// back as the same negative integer. A non-negative integer has one
// encoding whichever engine sent it (msgspec writes it unsigned), so it is
// the same Hash either way. Uint64 is the 64-bit pattern for every form
// (int64(h.Uint64()) is SGLang's value), which is what an index keys on.
type Hash struct {
	u   uint64
	n   uint8 // bin length; 0 means the integer form
	neg bool  // the integer form was sent as a negative (signed) integer
	b   [maxHashBytes]byte
}

// IntHash returns the integer form of a hash.
func IntHash(v uint64) Hash { return Hash{u: v} }

// SignedHash returns the integer form of a signed hash, as SGLang sends
// them: a negative v is kept signed (String shows it negative, the encoder
// writes a msgpack negative integer, Uint64 is its two's-complement
// pattern); a non-negative v is IntHash(uint64(v)).
func SignedHash(v int64) Hash { return Hash{u: uint64(v), neg: v < 0} }

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

// String renders an integer hash in decimal (signed for a hash sent as a
// negative integer, see SignedHash) and a bin hash as lower-case hex.
func (h Hash) String() string {
	if h.neg {
		return strconv.FormatInt(int64(h.u), 10)
	}
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

// blockInactive is the type of vLLM's BlockInactive events: GPU blocks no
// request references any more, still cached (vLLM PR #50732, open: emitted
// by BlockPool.free_blocks when a hashed block's ref_cnt drops to 0).
// Decoded only with Config.DecodeBlockInactive (BlockHashes, Medium and
// GroupIdx, Type "BlockInactive"); by default it is counted as an
// unsupported type, as any type this release does not know.
const blockInactive = "BlockInactive"

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
	// Type is BlockStored, BlockRemoved or AllBlocksCleared (or
	// "BlockInactive", vLLM PR #50732, when Config.DecodeBlockInactive asks
	// for it).
	Type            string
	BlockHashes     []Hash
	ParentBlockHash Opt[Hash]
	// TokenIDs are the tokens of the blocks; with TokenPairs, two entries
	// per token.
	TokenIDs []int64
	// TokenPairs reports that token_ids came as [t_i, t_i+1] pairs, one
	// per token, as SGLang's KVCacheEventMixin writes them for EAGLE
	// bigram radix keys (SGLang mem_cache/events.py; RadixKey bigram view,
	// SGLang PR #23106): TokenIDs holds the pairs flattened (t_i, t_i+1,
	// t_i+1, t_i+2, ...), so a block of BlockSize tokens has 2×BlockSize
	// entries, and the encoder writes them back as pairs. SGLang's own
	// typed decoder refuses such a payload; zmqguard keeps it.
	TokenPairs bool
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

	// unknown counts the fields this release does not know, read past:
	// map keys, and array elements after the last known field.
	unknown int
}

// tokens returns how many tokens TokenIDs holds (pairs count once).
func (e *Event) tokens() int64 {
	if e.TokenPairs {
		return int64(len(e.TokenIDs) / 2)
	}
	return int64(len(e.TokenIDs))
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
	n := e.tokens()/e.BlockSize - int64(len(e.BlockHashes))
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
	// Cleared in place, then the slices put back: a composite literal
	// would be built in a temporary and copied.
	*e = Event{}
	e.BlockHashes, e.TokenIDs, e.ExtraKeys = hashes, tokens, extra
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
	// UnknownFields counts what the decoder read past because this release
	// does not know it, never refusing the batch or the event for it: batch
	// array elements after the third and unknown batch map keys, and, in
	// the events delivered, unknown map keys and array elements after the
	// last known field (a field a later vLLM or SGLang may add).
	UnknownFields int

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
