// Package kvevents follows vLLM's KV-cache event stream from a whole fleet
// of engines without ever losing its place, and publishes it with vLLM's
// bytes.
//
//	sub, err := kvevents.NewSubscriber(kvevents.Config{
//		Handler: func(ctx context.Context, u kvevents.Update) error {
//			switch u.Kind {
//			case kvevents.UpdateBatch: // u.Batch.Events, in order, exactly once
//			case kvevents.UpdateReset: // the engine restarted: forget what u.Source said
//			case kvevents.UpdateLost: // batches [u.From, u.To) cannot be recovered
//			}
//			return nil
//		},
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	sub.Add(kvevents.Source{Name: "engine-0", Live: "tcp://10.0.0.5:5557", Replay: "tcp://10.0.0.5:5558"})
//	log.Fatal(sub.Run(context.Background()))
//
// A [Subscriber] follows any number of engines; a [Publisher] sends the
// bytes vLLM's ZmqEventPublisher sends, without ever blocking its caller.
// SGLang's KV events (signed hashes, its own event arrays and replay
// framing) are read the same way and published with PublisherConfig.Engine
// "sglang"; see [Hash], [Source] and docs/kv-events.md.
//
// The protocol is described in the project's docs/kv-events.md; in short,
// each engine (each data-parallel rank) publishes [topic, seq, payload] on a
// PUB socket, seq an 8-byte big-endian counter from 0, payload a msgpack
// KVEventBatch [ts, events, data_parallel_rank], and keeps its last batches
// for replay on a ROUTER that answers ["", start_seq] with one reply per
// batch and an end marker.
//
// # Subscriber
//
// One Subscriber follows any number of [Source]s, added and removed while it
// runs. Each source has a SUB socket of package socket (so a hostile
// publisher meets the same guards as a hostile client), a receive loop of
// package loop, and per-source sequence tracking. For each source, the
// handler (Config.Handler) sees every batch the publisher still holds, in order and exactly
// once:
//
//   - a gap (a live seq above the next one expected) starts a replay over a
//     DEALER to the source's replay endpoint, in its own goroutine, under a
//     cap on concurrent replays shared fairly among sources
//     (Config.MaxReplays, Config.ReplaySlice), with an idle deadline
//     (Config.ReplayTimeout, default 10 s), a total deadline and back-off
//     after failures, waited out before a slot is taken; live batches
//     arriving meanwhile are buffered (bounded per source and across
//     sources by Config.MemoryBudget) and delivered after the replayed ones;
//   - a replay that ends incomplete (the error marker, no
//     end marker, replies missing or out of order) is retried, and a hole
//     left after a whole replay starts another one; replies above the
//     highest live seq seen are refused;
//   - what the replays cannot supply (the publisher no longer holds it,
//     Config.ReplayAttempts replays in a row made no progress, the source
//     has no replay endpoint) is reported as an [UpdateLost] range
//     [From, To);
//   - a seq not above the last live one means the publisher restarted: the
//     Handler gets an [UpdateReset] (clear that source's index), then
//     delivery resumes from the new run's first batch (replaying from 0 if
//     it was missed); so does a seq more than 2^32 above the last one
//     (delivery then starts at that batch, nothing counted lost);
//   - a source joining mid-stream starts at the first batch seen, or replays
//     from 0 with Config.FromStart.
//
// # Continuity is proven, never assumed
//
// After any new connection of a source's live socket (a reconnect, another
// peer in a bound slot, the first connection of a source given
// Source.Resume), nothing newer than the last delivered batch is applied
// before the subscriber has proof that the publisher is the run it
// followed: a restarted engine may have published past the old run's last
// seq while the subscriber was away, and its batches are not the old run's
// continuation. Every delivered batch carries [Batch.Digest] (a digest of
// its payload, which starts with vLLM's timestamp); the source keeps the
// last delivered [Position] and replays from its seq:
//
//   - the same seq with the same digest proves the run (counted in
//     SourceStats.ContinuityProven): delivery goes on;
//   - another digest is another run: an [UpdateReset], then delivery from
//     0 (SourceStats.ResetsBy.Digest);
//   - a publisher that no longer holds that seq, or no replay that shows
//     it, gives no proof (SourceStats.Unproven): an [UpdateLost] for
//     [next, first batch held), sent even when empty (From == To), so that
//     a consumer treats the source's entries as uncertain.
//
// Without a replay endpoint there is no proof: a new connection's first
// batch, above the last one, comes after an UpdateLost [last+1, seq), empty
// when seq is last+1. [Subscriber.Resync] forgets where a source stands (an
// UpdateReset, then delivery from the oldest batch the publisher holds), for
// a consumer that lost what it applied.
//
// A bound source on an address beyond loopback is refused unless
// Socket.Guard.Allow or CURVE keys restrict its publishers, or
// Config.AnyPeer says any peer may be first; SourceStats.Holder names the
// peer holding its slot.
//
// A fan-in source (Source.FanIn, llm-d's topology) binds one endpoint that
// any number of engines connect to: each topic is an engine, with all of
// the above per engine; a topic is its first connection's while it lives,
// and one naming an IP address is taken only from that address
// (Config.FanInAnyAddress). An engine whose connection has been gone for
// Config.EngineTTL gets an UpdateDeparted; so does a removed source
// (docs/kv-events.md, "Fan-in"). A data-parallel rank r > 0 (its batches'
// data_parallel_rank) is named by its topic + "/dp<r>", so the ranks of
// one pod, which share a topic, stay distinct engines.
//
// # What the decoder accepts
//
// Both event forms, in any mix: tagged maps {"type": name, field: value...}
// (vLLM PR #42892, v0.26.0; keys in any order, unknown keys ignored, missing
// optional keys default) and the tagged arrays [name, fields...] of v0.9 to
// v0.25 (shorter arrays too). Every field vLLM main defines, including
// locality (PR #48281), ownership (PR #52067) and session_id (PR #51381).
// Every shape vLLM's producers send, including those where an index needs
// care: offloading placeholders (a BlockStored without token_ids, see
// [Event]) and hybrid-model stores whose token_ids cover blocks left out of
// block_hashes ([Event.SkippedBlocks]). Both replay framings: ["", topic,
// seq, payload] (vLLM PR #45177, v0.26.0) and ["", seq, payload] before (and
// SGLang). Both hash forms: unsigned integers (the default) and raw digests
// as msgpack bin (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), with
// [Hash.Uint64] folding a digest exactly as vLLM would have
// (maybe_convert_block_hash: the low 64 bits, big-endian). The batch itself
// is accepted as an array (what vLLM sends, with every field: a nil rank is
// nil) or a map.
//
// The default limits (Config.MaxPayload, Config.MaxEvents) are sized for
// vLLM's largest batches (one per scheduler step; the "full" report mode of
// PR #45261 re-announces whole cached prefixes): 64 MiB and 65,536 events,
// see docs/kv-events.md.
//
// # What is dropped, and why
//
// Every refusal is a reason of decodeguard's closed set, counted per source
// in [SourceStats] (Dropped for messages and batches, DroppedEvents for
// events) and logged at most once per second per kind, peer bytes only as
// hex. A bad event costs that event only; the rest of its batch is
// delivered, and [Batch.Index] keeps each event's position.
//
//   - live message not of 3 frames, sequence frame not 8 bytes: envelope;
//   - payload over Config.MaxPayload (checked before decoding): oversize;
//     more events than Config.MaxEvents: oversize;
//   - payload not well-formed msgpack (lengths checked against the bytes
//     present before anything is read or allocated, nesting at most 32
//     deep, strings UTF-8, no ext types, no trailing bytes: the rules of
//     decodeguard's pre-scan, applied while decoding in one pass), not a
//     batch, ts not a number, events not an array: decode;
//   - event of a type this release does not know (a newer vLLM's, such as
//     the BlockInactive proposed in vLLM PR #50732): unsupported, with its
//     name counted in SourceStats.UnsupportedTypes (escaped, bounded) — not
//     decode, which would read as hostile traffic;
//   - event not a map or array, without a type, wrong field types, a bin
//     hash of more than 32 bytes, BlockStored or BlockRemoved
//     without block_hashes: decode;
//   - BlockStored with a negative block_size, or block_size 0 with
//     token_ids or without a hash: validate. Only the offloading
//     connector's placeholder has block_size 0 (vLLM PR #36644), and it
//     carries no tokens and one hash; Go consumers looped forever on 0 and
//     panicked on negative values;
//   - BlockStored whose token_ids are neither empty nor a whole number of
//     blocks, at least len(block_hashes) × block_size: validate. vLLM's
//     block pool publishes the tokens of full blocks only, and leaves null
//     and masked blocks (hybrid models: PRs #30166, #30877, #42258) out of
//     block_hashes while keeping their tokens (vLLM issue #44451);
//     offloading stores carry no tokens;
//   - BlockStored whose extra_keys is present but not one entry per block
//     hash: validate (the field's contract in vllm/distributed/kv_events.py,
//     since vLLM PR #33304);
//   - replay reply of another shape, a topic frame outside the
//     subscription: envelope or validate.
//
// # Publisher
//
// [Publisher] binds (or, by vLLM's rule, dials) its live socket and binds a
// replay ROUTER, keeps the last PublisherConfig.BufferSteps batches, and
// offsets both ports by the DP rank (PublisherConfig.DataParallelRank;
// [DPSources] lays the sources out the same way). PublisherConfig.Release
// chooses the bytes: tagged maps and topic-framed replies for vLLM ≥ 0.26
// (vllm.Rules KVEventsMapForm, KVReplayTopicFrame), arrays and bare replies
// before. Unlike vLLM's publisher (whose queue put blocks the engine when
// full, vLLM issue #53859), Publish never blocks: a full queue drops the
// batch and counts it. A slow live subscriber misses messages (counted); a
// stalled replay client holds up neither live publishing nor other replay
// clients: each replay runs in its own goroutine and waits for its client
// (at most 1,024 replies queued), both sockets have a write deadline by
// default (see PublisherConfig.Socket), and the send budget is shared fairly
// among the peers (socket.Options.SendTotalBytes). A replay that cannot
// send every batch ends with the error marker (seq 0xfffffffffffffffe, zmqguard's
// own; vLLM's example subscriber stops on it as on the end marker) instead of
// the end marker, never with a silent hole; so does a request that comes
// sooner than PublisherConfig.ReplayInterval after the same connection's
// previous replay.
package kvevents
