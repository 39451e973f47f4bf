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
//	st, _ := redisstore.StatsOf(be) // round trips, lease takeovers, ...
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
// indexer's writes. Resolve is one HMGET. Holders is one read-only script
// call that walks the keys in order and stops after the first key nobody
// holds (a prefix walk needs nothing past it; if the caller goes on anyway,
// the rest is read the same way); it returns raw strings that Go parses,
// and the engines' epochs only when they changed since the last call.
// Calls from many goroutines share one connection through the client's
// auto-pipelining.
//
// # Key layout
//
// Every key starts with Config.Prefix (default "{zmqguard-kvindex}:"; the
// braces are a hash tag, so all keys of one index fall in one slot). Engine
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
//	                    entries the engine holds under it
//	b:KEY        HASH   "E:hash:M:G" → the epoch the entry was stored at;
//	                    an entry is trusted while it equals ep[E]
//	fifo         ZSET   "KEY:E:hash:M:G" scored by first-store order
//	                    (seq): eviction pops the oldest past the capacity
//	seq          STRING the store counter
//	st           HASH   gauges and totals: blocks, mappings, evicted,
//	                    engines, mediums, takeovers
//	own:E        STRING the engine's writer lease (with WriterID only)
//
// The number of entries is ZCARD fifo. A reset or AllBlocksCleared removes
// every entry of the engine (reading m:E) and bumps ep[E]; a lost range
// only bumps ep[E], which makes every entry stored before it uncertain until
// it is stored again. Memory in Redis is larger than in the in-memory
// backend (a few hundred bytes per entry across b:, m: and fifo, against
// ≤ 64): size Capacity for the server's maxmemory, and keep maxmemory-policy
// at noeviction (Redis evicting keys on its own would break the layout; the
// index evicts by itself).
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
// Redis Cluster is not supported: the scripts build key names at run time
// (the hash tag keeps them in one slot, but a cluster also wants them
// declared). Use one primary, with replicas for reads if wanted.
package redisstore
