// Package kvindex tells a router which vLLM engine caches the longest
// prefix of a prompt, from the engines' KV events.
//
//	x, err := kvindex.New(kvindex.Config{})
//	if err != nil {
//		return err
//	}
//	defer x.Close()
//	sub, err := kvevents.NewSubscriber(kvevents.Config{
//		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) },
//	})
//	// ... sub.Add(a source per engine), go sub.Run(ctx), then per request:
//	r, err := x.Score(kvindex.ScoreRequest{Tokens: promptTokenIDs})
//	if best, ok := r.Best(); ok {
//		route(best.Engine) // best.Tokens are cached there
//	}
//
// The index follows a fleet of engines (package kvevents, or any feed of
// kvevents.Event): which engine holds which prefix blocks, on which medium
// (GPU, CPU, disk, ...), and [Index.Score] answers, per engine, the longest
// cached prefix of a prompt on any medium and on each, in blocks and
// tokens, certain and maybe. It stays exact when events are lost and
// publishers restart, because the subscriber reports both
// (kvevents.UpdateLost, kvevents.UpdateReset) and the index acts on them;
// [Index.Apply] takes either, for feeds other than a subscriber too.
//
// # Keys
//
// By default blocks are keyed by local keys ([Key]) the index computes
// itself from each BlockStored's token ids, not by the engine's hashes. vLLM's hashes
// depend on its hash function, its release and, for the default
// pickle-based one, on PYTHONHASHSEED (a random seed per process when
// unset), so two engines' hashes of one prompt need not agree and a router
// cannot recompute them. A local key is a 64-bit chained hash of (parent
// block's key, the block's token ids, the block size, the LoRA name, the
// block's extra keys as the engine published them (extra_keys, vLLM PR
// #33304: LoRA name, multimodal hashes, cache salt), the model): equal keys
// mean equal prefixes. It is this package's own multiply-mix hash (no
// crypto on the Score path: an 8k-token prompt is keyed in a few
// microseconds), deterministic across processes (router replicas sharing a
// Redis index agree), seeded by Config.Seed. Each engine's own hashes are
// mapped to local keys, for BlockRemoved and for tier-only stores.
//
// One keyspace per (model, block size): the model an engine serves comes
// from Config.ModelOf (e.g. from the topic, as llm-d deployments name it),
// the block size from its stores; Score tries every block size seen for the
// request's model.
//
// Engine-key mode. With Config.Keys set, a block's key is the hash its
// engine publishes, and Score computes a prompt's keys with Config.Keys:
// package vllmhash's Hasher.Keys computes vLLM's own hashes. A store then
// needs neither tokens nor a parent hash (a hybrid store is indexed as
// published), but every engine must run with the key function's hash
// function, PYTHONHASHSEED and block size, or nothing matches. The rules
// below hold in both modes, except those about parents and hybrid stores.
// Local keys have no such requirement and are the default to use unless
// the deployment already keys by vLLM's hashes.
//
// # Entries
//
// An entry is (block, engine, engine hash, medium, KV-cache group). A
// missing medium is GPU (releases before the medium field, vLLM PR #19737,
// had no other); a missing group is 0 (before vLLM PR #37688 published
// group_idx). Hybrid models publish one store per KV-cache group, and vLLM
// evicts sliding-window blocks while keeping the full-attention ones (the
// reason #37688 gave). Events of groups whose blocks do not hold a whole
// prefix — sliding-window, chunked-local, Mamba, encoder-only and
// cross-attention groups, as kv_cache_spec_kind names them (vLLM PR #40984)
// — are left out (Stats.PartialGroups): a prefix counts
// where the full-attention (or MLA) group holds it, and a sliding-window
// group's copy of a block the full-attention group dropped is not a hit.
// (A model with sliding-window layers only is therefore not indexed; a
// window-aware hit rule is future work.) Without a kind, as from releases
// before #40984, Score counts a block for an (engine, medium) when any of
// the engine's groups holds it there.
//
// # Rules
//
// Unknown parent. A BlockStored whose parent hash the engine has no key for
// (the index joined late, the parent was removed or evicted, or it was in a
// lost range) is not indexed at all, and counted in Stats.UnknownParents.
// Its key would depend on a prefix the index does not know; indexing it as
// a first block would chain it to the wrong prefix. Its children are then
// unknown parents too, until the engine stores the prefix again (vLLM
// re-stores a prompt's blocks when it recomputes them).
//
// Batches. A parent or a tier-only store resolves against the engine's
// mapping as the batch began plus the batch's own earlier stores; after an
// AllBlocksCleared in the batch, only the latter. A mapping is a fact about
// content (engine hash h means these tokens after that prefix), so using
// one removed earlier in the batch never builds a wrong key; it lets a
// remote backend resolve a whole batch in one round trip.
//
// Tier-only stores. An offloading connector's BlockStored with no tokens
// (vLLM PR #19737; block_size 0 since PR #36644) says a block the engine
// knows by its hash is now also on another medium: it is indexed under the
// key the hash maps to. A hash with no key is counted
// (Stats.UnknownPlaceholders) and dropped. (Since PR #43468 the offloading
// connector can also publish self-describing stores, with tokens and
// parents: those are ordinary stores here.)
//
// Hybrid stores. A store with more tokens than hashes × block size (vLLM
// skips null blocks' hashes but keeps their tokens, vLLM issue #44451) does
// not say which tokens belong to which hash: it is counted (Stats.Hybrid)
// and not indexed.
//
// Removal. BlockRemoved removes the (engine, hash, medium, group) entry;
// when the engine holds the block in no medium and group, its hash mapping
// goes too. Removing what is not held is counted
// (Counts.UnknownRemovals), never an error.
//
// Inactive blocks. vLLM's BlockInactive (PR #50732, open; delivered only
// under kvevents.Config.DecodeBlockInactive) names blocks no request
// references any more but still cached: the entries stay, the event is
// counted (Stats.Inactive), never refused.
//
// Clear and reset. AllBlocksCleared and a publisher reset (the publisher
// restarted: a new process, an empty cache, perhaps a new hash seed) remove
// every entry and mapping of the engine at once, eagerly, so the memory is
// reclaimed.
//
// Lost range. Events lost (kvevents.UpdateLost) may have removed blocks the
// index still lists. The engine's loss epoch goes up; an entry is trusted
// while its epoch (set when last stored) equals its engine's. Score reports
// uncertain entries apart: Prefix.Blocks counts only the leading blocks the
// engine certainly holds (trusted), Prefix.MaybeBlocks those it may hold. So
// a block the engine may no longer hold is never a certain hit. An entry
// becomes trusted again when the engine stores it again (vLLM publishes a
// store whenever a block is cached again), and everything is trusted after
// a clear or reset. The rule is per entry, not per engine: one lost batch
// does not blind the index to the engine's next stores, and nothing needs
// a timer. (Dropping the engine's entries instead would lose the many
// blocks it still holds; a per-engine flag would keep everything uncertain
// until some arbitrary rebuild.)
//
// Duplicates and replays. A store of an entry held refreshes its epoch and
// changes nothing else; a removal of an entry not held is a no-op; a batch
// applied twice leaves the index as applying it once did. (The subscriber
// delivers each batch once anyway.)
//
// Remap. A store of a hash the engine had mapped to another key (a
// collision, or a restart the index did not see with a fixed seed) removes
// the engine's entries under the old key first (Counts.Remapped).
//
// Capacity. The memory backend holds at most the capacity given to
// [NewMemory] (Config.Capacity for the default one). Past it the oldest entries by
// first store are evicted (Counts.Evicted): O(1), deterministic, easy to
// reproduce in a shared store, and vLLM's own eviction is of blocks unused
// longest, which the oldest stores approximate without a write on every
// Score.
//
// # SGLang engines
//
// SGLang's KV events (package kvevents decodes and publishes them; SGLang's
// disaggregation/kv_events.py, events made by KVCacheEventMixin in
// mem_cache/events.py) are indexed by the same rules, read as follows.
//
// Blocks. SGLang publishes one BlockStored per page (since SGLang PR
// #23678): one hash, block_size the page's tokens (the page size: 1 by
// default, 64 on some accelerators), so a block here is a page. A radix
// node's pages come as one store each, in order; one BlockRemoved per
// removed node carries all its pages' hashes (SGLang PR #29265).
//
// Parents. Each page's parent_block_hash is the previous page of its node;
// a node's first page has the parent node's last page, or nil under the
// root. The chain is therefore the prompt's page order, as a vLLM chain is
// its block order, and the Unknown parent rule applies unchanged: a page
// whose parent page the index does not hold is not indexed.
//
// Hashes. SGLang's hashes are signed int64 (the first 16 hex digits of the
// page's chained SHA-256 read as a signed number, SGLang's
// hash_str_to_int64), about half of them negative. The index maps every
// hash by its 64-bit pattern (kvevents.Hash.Uint64, the two's complement
// of a negative one): a store, its children's parent links and its removal
// all carry the same pattern, so they meet. Local keys are computed from
// the tokens, as for vLLM, never from SGLang's hashes; engine-key mode
// would need a Config.Keys that computes SGLang's page hashes (package
// vllmhash computes vLLM's only).
//
// Media. SGLang's medium names ("GPU", "CPU_PINNED" for host memory, "DISK",
// "EXTERNAL") are tiers as given.
//
// Bigram pages. For EAGLE bigram radix keys SGLang sends token_ids as
// [t_i, t_i+1] pairs (kvevents.Event.TokenPairs): such a page is a hit only
// when the token after it matches too, which a prompt's prefix does not
// show. In local-key mode these stores are not indexed, each counted in
// Stats.Bigrams (the pages chained to them too: never as hybrid stores or
// unknown parents).
//
// Models. llm-d names a publisher's topic kv@{host}@{model} for either
// engine; name each source by its topic and let Config.ModelOf take the
// model from the name (SGLang's replay replies carry no topic frame; the
// source name, not the frame, tells the model).
//
// # Restarts
//
// Positions. [Index.Apply] records, per source, the Position
// (kvevents.Position: sequence number and digest) of the last batch it
// applied, after the backend's Apply succeeded; a reset forgets it, a
// lost range keeps it. [Index.Positions] returns them, for
// kvevents.Source.Resume: a new subscriber resumes each source from
// there, and proves the publisher is still the run the index followed
// before it delivers anything newer. A backend that implements
// [PositionStore] (the Redis one) keeps them beside its entries: a
// restarted index, or a new replica, starts from the store's positions.
//
// Snapshot. With Config.SnapshotFile the in-memory index survives its own
// restart: the file (a header with magic and format version, then the
// block sizes seen, the positions, media and engines with their loss
// epochs, and the entries oldest first, then a CRC-64 of all of it) is
// written to a temporary file, fsynced and renamed over the old one,
// every Config.SnapshotInterval and on Close, and loaded by New into a
// fresh backend that is used only once the whole file was read and
// checked. A snapshot that is corrupt, truncated, foreign (wrong magic),
// of a newer format, or written with another seed or key mode is refused
// with one ERROR line naming the file and the reason (Stats.SnapshotRefused)
// and the index starts empty. The write holds the backend's read lock
// (Score goes on, ingest waits: 0.7 s at ten million entries;
// docs/kv-index.md has the figures).
//
// Trust after a restart. While the index was down its engines went on, so
// a loaded snapshot's entries are all uncertain at first. A source with a
// position gets them back (its loss epoch restored) with the first batch
// its feed delivers after the resume, since a subscriber delivers one only
// once continuity is proven; a lost range (the publisher no longer holds
// the gap) or a reset (the engine restarted) first leaves them uncertain
// or clears them. A source without a position (none applied since its
// last reset) stays uncertain until its blocks are stored again. Over a
// shared backend, entries stay as they are while no index follows an
// engine (its writer's downtime), as any shared store would; the resumed
// feed then proves continuity as above.
//
// Lost shared backend. When a backend call returns [ErrBackendLost] (the
// store lost its data: a Redis restart without persistence, FLUSHALL, a
// failover to an empty replica), the backend has dropped its own tables;
// the index drops what it caches about the store (positions, block sizes
// seen), logs one ERROR, counts it (Stats.BackendLosses) and calls
// Config.OnBackendLost in a goroutine of its own, outside its locks. That
// callback must resync every source (kvevents.Subscriber.Resync): each
// source's next update is a reset, then the publisher's oldest batches
// again, so that each engine is re-established as after a restart. No
// engine id of the lost store is ever resolved to a name again (the
// backend's rule), so no replica names the wrong engine.
//
// Candidates and models. ScoreRequest.Engines limits an answer to the
// engines a router may route to; ScoreResult.UnknownModel (counted in
// Stats.UnknownModels) says that no engine the index knows serves the
// request's model, so an empty answer is not read as "nothing cached".
//
// # Storage
//
// Every stateful piece lives behind [Backend]: the in-memory one
// ([NewMemory]: ≤ 64 bytes per entry, one write lock per batch) and
// shared ones (a Redis backend, in a subpackage so that importing kvindex
// never builds a Redis client). A batch costs one Backend.Resolve (parents
// and tier-only hashes) and one Backend.Apply; a Score one
// Backend.Holders (or [PrefixWalker]'s PrefixHolders, which may leave out
// what a prefix walk cannot use). Package kvindextest is the conformance
// suite every backend passes. On the in-memory backend a Score takes no
// lock: it does not wait for a batch being applied, nor for a table's
// rebuild, and sees each of the batch's changes or not; a block removed,
// cleared or made uncertain before the Score began is never counted
// certain by it.
//
// # Speed and size
//
// BENCHMARKS.md has the figures and how they were measured: ingest rate
// with concurrent queries, Score latency of an 8k-token prompt with 1,000
// engines and 10M blocks, bytes per entry.
package kvindex
