// Package redisstore keeps a kvindex.Index in Redis or Valkey, so router
// replicas share one KV-cache index.
//
//	be, err := redisstore.New(redisstore.Config{
//		URL:      "unix:///run/redis/redis-server.sock",
//		WriterID: redisstore.NewWriterID(), // one writer per engine at a time
//	})
//	if err != nil {
//		return err
//	}
//	defer be.Close()
//	x, err := kvindex.New(kvindex.Config{Backend: be})
//	// ... as with the in-memory index: x.Apply(update), x.Score(request)
//	st, _ := redisstore.StatsOf(be) // round trips, lease takeovers, losses, ...
//
// The backend gives the same answers as kvindex's in-memory one for the
// same operations (kvindex's conformance suite and a differential test
// against kvindex.NewMemory run on a real redis-server), and it lives in
// its own package so that importing kvindex never builds a Redis client.
//
// # Round trips
//
// Apply sends a whole batch of one engine's operations as one Lua script
// call (EVALSHA, or EVAL when the server does not hold the script yet): one round trip
// per batch, applied atomically, so no reader and no other writer ever sees
// half a batch, and a reset's clear is never interleaved with another
// indexer's writes. Resolve is one read-only script call (the engine's
// id and an HMGET of its map). Holders is one read-only script call that walks the keys in order and stops after the first key nobody
// holds (a prefix walk needs nothing past it; if the caller goes on anyway,
// the rest is read the same way); it returns raw strings that Go parses,
// and the engines' epochs only when they changed since the last call.
// Calls from many goroutines share one connection through the client's
// auto-pipelining.
//
// # Key layout
//
// Every key starts with Config.Prefix (default "{zmqguard-kvindex}:"; the
// braces are a hash tag, so all keys of one index, or of one shard, fall
// in one slot; with Shards > 1 each shard has its prefix, see below). Engine
// hashes and local keys are unsigned decimal strings; E is an engine's id,
// M a medium's id, G a KV-cache group, all small decimal numbers:
//
//	eid, ename   HASH   engine name → E, and E → name
//	mid, mname   HASH   medium name → M, and M → name (at most 64 mediums)
//	ep           HASH   E → the engine's loss epoch
//	epv          STRING the version of ep, bumped at every epoch change and
//	                    new engine: readers cache ep and re-read it only
//	                    when epv moved
//	m:E          HASH   engine hash → "key|M:G|M:G…": the local key the
//	                    engine's hash maps to, and the (medium, group)
//	                    entries the engine holds under it, while the
//	                    engine has at most 128 mappings (level 0)
//	m:E:D…       HASH   the same, at level l = 1..3: 10^l buckets named by
//	                    the last l digits of the engine hash; an engine
//	                    moves up a level (its mappings rewritten in one
//	                    script: at most 12,800 at the move to level 3)
//	                    past 128·10^l mappings, and back to 0 on a clear
//	ml, mc       HASH   E → the engine's map level (absent: 0), and E → its
//	                    number of mappings
//	b:D          HASH   KEY → "E:hash:M:G,epoch:seq,E:hash:M:G,epoch:seq…":
//	                    the entries of every block whose key ends in the
//	                    digits D (a bucket), each with the epoch it was
//	                    stored at (trusted while it equals ep[E]) and its
//	                    first-store number
//	bd           STRING how many trailing digits of a key name its bucket:
//	                    the fewest giving 10^bd ≥ Capacity/128 buckets,
//	                    set with the generation by the first store
//	q:N          HASH   seq → "E:hash:M:G": the entries first stored as
//	                    numbers 64N..64N+63 (the store order); eviction
//	                    takes the lowest seq of the lowest bucket
//	qh           STRING the lowest q: bucket that may hold entries
//	seq          STRING the store counter
//	st           HASH   gauges and totals: entries, blocks, mappings,
//	                    evicted, engines, mediums, takeovers
//	own:E        STRING the engine's writer lease (with WriterID only)
//	gen          STRING the generation token: 128 random bits, written
//	                    (if missing) by the first store to use the prefix
//	pos          HASH   source → "seq:digest", the position of the last
//	                    batch applied from the source (kvindex.PositionStore)
//
// A reset or AllBlocksCleared removes every entry of the engine (reading
// m:E) and bumps ep[E]; a lost range only bumps ep[E], which makes every
// entry stored before it uncertain until it is stored again.
//
// Memory: blocks, the store order and engine maps are kept in buckets,
// hashes of up to about 128 short fields that Redis stores as compact
// listpacks (hash-max-listpack-entries 128, hash-max-listpack-value 64),
// so a key's own overhead (about 70 bytes) is shared by a bucket, and no
// hash grows into a hash table (about 90 bytes per field). Measured with
// INFO used_memory before and after BenchmarkScoreFleet's build (200,000
// entries, one 8k prompt held by 32 engines, the rest in chains of 128
// blocks): 136, 132 and 126 bytes per entry with 1,000, 100 and 40 engines
// on one server; 138, 134 and 128 on a 3-node cluster (summed over the
// nodes); 135 split into 16 shards on the cluster (6.7, 8.7 and 11.7 MB
// on the three nodes, against 27.7 MB on one node with one slot) and 146
// into 3; the layout before buckets took 307. The in-memory backend needs
// ≤ 64. A block held by several engines has a value longer than 64 bytes,
// which turns its bucket into a hash table: a fleet where most blocks are
// shared by many engines pays about 90 bytes more per such bucket field. Size Capacity for the server's maxmemory, and keep
// maxmemory-policy at noeviction (Redis evicting keys on its own would
// break the layout; the index evicts by itself). An index written by an
// older version (a sorted-set "fifo" key under the prefix) is refused when
// a store starts: use another prefix, or delete the old keys.
//
// # Failures
//
// Every call is bounded by Config.Timeout. A batch whose call fails may or
// may not have been applied (a timeout after the server ran it, a
// connection lost on the way), so the engine's state is in doubt, as after
// a lost range: the engine's next batch that gets through starts with a
// lost-range operation, and its entries read as uncertain until stored
// again (counted in Stats.Recovered, from [StatsOf]). A Redis outage therefore costs
// certainty, never correctness.
//
// # Losing the data
//
// Redis can lose the index while the indexers run: a restart without
// persistence, FLUSHALL or FLUSHDB, a failover to an empty replica. Engine and medium ids are then handed out again from 1, in
// whatever order the indexers write next, so a table a store cached before
// would name another engine; entries and mappings are gone, so the
// continuations of prefixes stored before are unknown parents. The store
// notices, on its first call that reaches the new data:
//
//   - Every script (Apply, Resolve, Holders, the name lookups, the
//     positions, the lease renewal) first compares the gen key with the
//     token of the store's generation (read when it started, or after its
//     last loss), atomically, in the same call;
//     Stats reads gen in its one round trip. The check is one GET of a
//     short string inside a script the call makes anyway: no extra round
//     trip.
//   - When gen is missing or differs, the script does nothing. The store
//     drops every table it cached (engine and medium names, the engines'
//     epochs, its leases, the engines in doubt), reads the token of the
//     new generation (writing a new random one with SET-if-missing when
//     there is none) and returns an error wrapping kvindex.ErrBackendLost,
//     once per loss per store (the index then resyncs every source); the
//     store's later calls work in the new generation. A loss found by a
//     call that returns no error (EngineName, MediumName, Stats, the lease
//     renewal) is reported by the store's next call that does. Losses are
//     counted in Stats.Losses.
//   - Ids never cross a loss: a Holder's ids are Redis's plus the
//     generation's bases, and a new generation's bases are above every id
//     the store handed out before (the bases start again at 0 past 2³¹
//     engine ids or about a thousand losses of mediums), so an id read
//     before a loss names nothing after it (EngineName answers "") and
//     never another engine. Holders hands out ids only while their
//     generation is current: a walk that finds its generation dropped
//     starts again in the new one, or fails when it visited keys already.
//
// A failover to a replica that lags behind keeps the generation: the
// writes it missed are lost without a trace the token can show.
//
// Positions (kvindex.PositionStore) live in the pos hash under the prefix:
// one field per source, saved by the index after the batch's Apply
// succeeded (so a saved position is never ahead of the entries), shared by
// every store of the prefix, so a restarted index or a new replica resumes
// each source from where the shared index stands. They belong to the
// generation: a loss takes them with the entries, and Positions reports
// the loss like any call. (Saving in the Apply call itself would make it
// one round trip, an extra field and value in the batch's script; the
// interface keeps them apart.)
//
// # Many indexers writing one Redis
//
// Replicas that only read (Score) need nothing: reads are scripts and
// single commands, consistent per batch. For writers there are two modes.
//
// Without WriterID (the default), every indexer applies every event it
// receives. Batches are atomic and every operation is idempotent (a
// duplicate store only refreshes, a removal of a missing entry is counted
// as unknown, a clear of a cleared engine removes nothing), so two indexers
// following the same engine converge. What they cannot rule out is order
// between them: an indexer lagging behind another may re-store a block the
// other already saw removed, and that block reads as a certain hit until
// the lagging indexer applies the removal too, for as long as it lags.
//
// With WriterID (NewWriterID: one per process), each engine has one writer
// at a time: the first Apply for an engine takes a lease (own:E, LeaseTTL,
// renewed on every Apply and every LeaseTTL/3), and Apply by anyone else
// writes nothing and reports nothing done (no error: the writer applies
// the same events; counted in Stats.NotWriter). When a lease expires (its writer
// died or stalled) the next indexer to Apply takes it over, and its first
// act is to bump the engine's epoch: what the old writer missed is unknown,
// so every entry becomes uncertain until stored again, exactly like a lost
// range. Never a phantom certain hit; at worst a period of uncertain ones.
//
// # Shared ingest
//
// With leases alone every replica still receives every engine's events
// and all but one throw them away. Rebalance (issue 41) splits the engines
// instead: each call heartbeats the replica in a sorted set (members,
// scored by expiry on Redis's clock, LeaseTTL), renews the leases it
// holds, and takes free ones up to its quota, len(engines)/members plus
// one for the first len(engines)%members writer ids; it returns what it
// holds and what it holds over the quota (Split.Excess). The caller
// follows what it holds, and hands the excess back in this order: stop
// following the engine, wait for its batches under way, then Release.
// From the first Rebalance on, the store's Apply writes only the engines
// Rebalance gave it; Release closes that gate (waiting for an Apply under
// way) before it deletes the lease, so no late batch of the old writer
// can take the lease back, and Redis's lease lets no second writer in.
// Taking the lease of a known engine bumps its epoch, as a takeover by
// Apply does: the taker has no continuity with what was applied before,
// so the engine's entries are uncertain until stored again. A replica
// that dies stops heartbeating and renewing: after LeaseTTL its
// membership and its leases expire and the others' next Rebalance takes
// its engines. Leave releases everything and leaves the membership at
// once (a clean stop). Between a release and the next holder's take the
// engine is followed by nobody for up to a round; its entries stay, and
// read as uncertain once taken.
//
// # Redis Cluster and shards
//
// Config.URL may list a cluster's seed addresses,
// redis://host:port,host:port,…; the client detects a cluster by itself
// (CLUSTER SLOTS on the seeds; a server with cluster support disabled gets
// a plain client). A script is atomic only within one slot, so the index
// is split by engine into Config.Shards shards (default: 16 on a cluster,
// 1 on a single server, where the keys are those above, unchanged). Each
// shard is a whole index, with every key and rule above, under a prefix of
// its own: ":sN" inside the prefix's {hash tag} ("{zmqguard-kvindex:s3}:"),
// so each shard is one slot and the shards' slots spread over the nodes
// (without a hash tag, on a single server, "sN:" is appended; on a cluster
// a prefix without one is refused). An engine lives in shard FNV-1a(name)
// mod Shards: its batches, its writer lease, its epoch, its map and its
// entries stay in one slot, so a batch is still one atomic script call,
// and the continuity rules (a failed batch puts the engine in doubt, a
// takeover bumps its epoch) are per engine as before. Capacity is split
// evenly (Capacity/Shards per shard, evicting oldest-first within the
// shard; Capacity must be at least Shards), and Stats sums the shards
// (Blocks counts a block once per shard holding it). Positions live in
// shard 0. Every store of one prefix must use the same Shards: another
// count puts engines in other shards.
//
// Holders sends one read-only script per shard in one DoMulti: the
// cluster client pipelines the calls of each node together, one round trip
// per node, all nodes in parallel; the answers are merged key by key, and
// a Holder's ids are the shard's ids times Shards plus the shard, so
// EngineName and MediumName find the shard. Holders reads every key in
// every shard (it reports every holder of every key). Score uses
// PrefixHolders (kvindex.PrefixWalker) instead: the same call, but each
// shard's script stops at the first key none of the shard's engines holds
// (past it, no engine of the shard can extend its prefix), and takes the
// prompt's keys packed in one argument, reading only those it walks. A
// Score then reads, in each shard, the longest prefix one of its engines
// holds, plus one key: a prompt nobody holds costs one read per shard
// instead of the whole prompt per shard. Sharded Score still costs more
// than one slot's: 16 shards read up to 16 times the keys when every shard
// has an engine holding a long prefix (kvindex's fleet: 1,583 keys against
// 128), and one script per shard. BenchmarkShardedScore measures the three
// cases side by side (BENCHMARKS.md, issue 41, session 9).
//
// Each shard has its own generation token. A node that restarts empty
// loses the shards whose slots it serves: the next call that reaches them
// (Holders and PrefixHolders reach every shard) reports the loss once, as
// one error wrapping kvindex.ErrBackendLost for all the shards found lost
// together (the index then resyncs its sources), and only the engines of
// those shards lose their entries; the engines of shards on other nodes keep
// theirs, trusted. Several indexes (models, block sizes) use one prefix
// each, as on one server.
package redisstore
