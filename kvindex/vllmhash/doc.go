// Package vllmhash computes vLLM's own prefix-cache block hashes in Go, so
// a KV-cache index can key blocks by the hashes the engines publish.
//
//	h, err := vllmhash.New("sha256_cbor", "0") // the engines' hash and PYTHONHASHSEED
//	if err != nil {
//		return err
//	}
//	x, err := kvindex.New(kvindex.Config{Keys: h.Keys, BlockSize: 16})
//	// ... x.Apply(update) for the engines' KV events, then per request:
//	r, err := x.Score(kvindex.ScoreRequest{Tokens: promptTokenIDs, LoraName: "sql-lora"})
//	// or the hashes themselves, as vLLM's KV events carry them:
//	ds, err := h.Request(&vllmhash.Request{TokenIDs: promptTokenIDs}, 16)
//	fmt.Println(ds[0].Uint64())
//
// # Engine-key mode
//
// [Hasher.Keys] is the key function of kvindex's engine-key mode
// (kvindex.Config.Keys): a block's key is the hash its engine publishes
// (the KV-event int form), and Score hashes the prompt with the Hasher to
// find it, on any kvindex.Backend (in memory, or Redis through
// kvindex/redisstore) under kvindex's rules. It needs neither token ids nor
// parent hashes on the event side, but every engine must run with the
// Hasher's function, PYTHONHASHSEED and block size. kvindex's default,
// keying blocks by its own hashes of the token ids each BlockStored
// carries, has no such requirement and is the one to use unless the
// deployment already keys by vLLM's hashes. A multimodal, salted or
// prompt-embeddings request passes its [Request] in
// kvindex.ScoreRequest.Request.
//
// # What vLLM hashes
//
// vLLM's hash_block_tokens (vllm/v1/core/kv_cache_utils.py) digests the
// triple (parent, tokens, extra_keys): parent is the previous full block's
// hash, or NONE_HASH for a request's first block; tokens is the block's token
// ids; extra_keys is nil or a tuple of, in this order, the LoRA name (every
// block of a LoRA request), one (mm_identifier, offset) pair per multimodal
// item overlapping the block (offset relative to the block's first token,
// negative when the item began in an earlier block: vLLM PR #36708), the
// cache salt (first block only) and the SHA-256 of the block's raw prompt
// embeddings (vLLM PR #27219). Only full blocks are hashed. [Hasher.Request]
// rebuilds extra_keys from a request as vLLM's
// generate_block_hash_extra_keys does.
//
// The hash function is picked by vLLM's --prefix-caching-hash-algo
// (vllm/utils/hashing.py):
//
//   - sha256_cbor (vLLM PR #20511, the portable one): SHA-256 of canonical
//     CBOR of [parent bytes, [token uints], null or [extra keys]].
//   - sha256 (vLLM's default): SHA-256 of Python's pickle.dumps(x,
//     protocol=5).
//   - xxhash_cbor and xxhash: XXH3-128 of the same two encodings. [New]
//     refuses them: XXH3-128 would need a dependency the module does not
//     carry. (The package's tests check its preimages for them against
//     vLLM's golden vectors all the same.)
//
// NONE_HASH is the hash function applied to the value of PYTHONHASHSEED as a
// string ("0" → hash_fn("0")); [New] takes that string. With PYTHONHASHSEED
// unset, vLLM draws NONE_HASH from os.urandom(32) per process: every hash of
// that engine then depends on 32 secret random bytes, no other process
// (another engine, a restarted one, a router) can reproduce any of them, and
// vLLM-key mode cannot work. Engines whose hashes a router recomputes must all
// run with the same PYTHONHASHSEED; the router passes the same value to [New].
//
// # The pickle-based sha256 default
//
// vLLM's default hashes Python's pickle of the triple. This package writes
// that pickle for the shapes hash_block_tokens hands it (bytes, a tuple of
// ints, None or a tuple of str, (str, int) tuples and bytes), as CPython's
// pickler writes them at protocol 5: PROTO, one FRAME, SHORT_BINBYTES,
// MARK/TUPLE or TUPLE1..3, BININT1/BININT2/BININT/LONG1 by magnitude,
// SHORT_BINUNICODE, MEMOIZE after each str, bytes and non-empty tuple, STOP;
// the golden vectors vLLM wrote prove it byte for byte. Its limits are
// pickle's, not vLLM's contract: the bytes are CPython's pickler's output, not
// a format vLLM promises, so a future Python or a vLLM change to the hashed
// objects (a list where a tuple was, a subclass of str, one object referenced
// twice, which pickle writes as a memo reference) changes every hash without
// notice, and a preimage larger than one 64 KiB pickle frame is refused
// (an error). A deployment that wants a router to follow vLLM's hashes
// should run vLLM with --prefix-caching-hash-algo sha256_cbor and a fixed
// PYTHONHASHSEED; a router that cannot choose that (engines on the default)
// is better served by keying its index by its own hashes of the token ids
// each BlockStored carries, which is what package kvindex does by default.
//
// # KV events
//
// With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (vLLM's default since PR
// #23673) KV events carry int.from_bytes(hash, "big") & (2**64-1): the last
// 8 bytes of the hash read big-endian, [Digest.Uint64]. A BlockStored's
// parent_block_hash is the parent's hash in the same form; NONE_HASH is never
// published.
package vllmhash
