package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// defaultClusterShards is Config.Shards 0 on a Redis Cluster: a fixed
// number (not one from the node count, which changes), so that an
// engine's shard never moves; 16 slots spread over a few nodes.
const defaultClusterShards = 16

// maxShards bounds Config.Shards: a shard's medium ids are multiplied by
// the number of shards within 16 bits, with room for a few generations.
const maxShards = 256

// sharded is a kvindex.Backend (and a kvindex.PositionStore) made of
// shards, each a whole store under a prefix of its own; an engine lives in
// the shard shardOf picks. Holder ids are a shard's ids times the number
// of shards plus the shard's number, so EngineName and MediumName find
// the shard again.
type sharded struct {
	shards []*store
	client rueidis.Client
	own    bool
	// holdersSha and prefixSha are the SHA-1s of holdersScript and
	// prefixScript, for EVALSHA_RO in the pipelined walks; prefix runs
	// prefixScript when a node does not hold it yet.
	holdersSha, prefixSha string
	prefix                *rueidis.Lua
	timeout               time.Duration
	closed                atomic.Bool

	calls, errs atomic.Uint64
}

var (
	_ kvindex.Backend       = (*sharded)(nil)
	_ kvindex.PositionStore = (*sharded)(nil)
	_ kvindex.PrefixWalker  = (*sharded)(nil)
)

// shardPrefix is the prefix of shard n of an index under prefix: with a
// {hash tag}, ":sN" goes inside it ("{zmqguard-kvindex:s3}:"), so each
// shard has its own slot; without one (a single server), "sN:" is
// appended.
func shardPrefix(prefix string, n int) string {
	if i := strings.IndexByte(prefix, '{'); i >= 0 {
		if j := strings.IndexByte(prefix[i+1:], '}'); j > 0 {
			j += i + 1
			return prefix[:j] + ":s" + strconv.Itoa(n) + prefix[j:]
		}
	}
	return prefix + "s" + strconv.Itoa(n) + ":"
}

// shardOf is the shard of engine: FNV-1a of its name modulo n (stable
// across processes and versions: every store of a prefix must agree).
func shardOf(engine string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(engine))
	return int(h.Sum64() % uint64(n))
}

// openSharded makes the backend New returns for cfg.Shards other than 1:
// a plain store when Shards is 0 on a single server, else a sharded one.
func openSharded(cfg Config) (kvindex.Backend, error) {
	if cfg.Shards < 0 || cfg.Shards > maxShards {
		return nil, fmt.Errorf("redisstore: Config.Shards %d is not in 0..%d", cfg.Shards, maxShards)
	}
	shards := cfg.Shards
	cfg, err := withDefaults(cfg) // checked before dialing
	if err != nil {
		return nil, err
	}
	cfg.Shards = shards
	timeout := cfg.Timeout
	c, own := cfg.Client, false
	if c == nil {
		var err error
		if c, err = dial(cfg.URL, timeout); err != nil {
			return nil, err
		}
		own = true
	}
	fail := func(err error) (kvindex.Backend, error) {
		if own {
			c.Close()
		}
		return nil, err
	}
	n := cfg.Shards
	if n == 0 {
		// The mode is known once a node answered: PING first.
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := c.Do(ctx, c.B().Ping().Build()).Error()
		cancel()
		if err != nil {
			return fail(fmt.Errorf("redisstore: PING %s: %v", cfg.URL, err))
		}
		n = 1
		if c.Mode() == rueidis.ClientModeCluster {
			n = defaultClusterShards
		}
	}
	sub := cfg
	sub.URL, sub.Client, sub.Shards = "", c, 1
	if n == 1 {
		s, err := open(sub)
		if err != nil {
			return fail(err)
		}
		s.own = own
		return s, nil
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = defaultCapacity
	}
	if cfg.Capacity < n {
		return fail(fmt.Errorf("redisstore: Config.Capacity %d is under Config.Shards %d (the capacity is split between the shards)", cfg.Capacity, n))
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	sum, psum := sha1.Sum([]byte(holdersScript)), sha1.Sum([]byte(prefixScript))
	sh := &sharded{client: c, own: own, holdersSha: hex.EncodeToString(sum[:]), prefixSha: hex.EncodeToString(psum[:]),
		prefix: rueidis.NewLuaScriptReadOnly(prefixScript), timeout: timeout}
	sub.Capacity = cfg.Capacity / n
	sub.engineLimit = (1 << 32) / uint64(n)
	sub.mediumLimit = (1 << 16) / n
	for i := 0; i < n; i++ {
		sub.Prefix = shardPrefix(cfg.Prefix, i)
		s, err := open(sub)
		if err != nil {
			for _, o := range sh.shards {
				o.Close()
			}
			return fail(err)
		}
		sh.shards = append(sh.shards, s)
	}
	if sh.shards[0].cluster && !hasHashTag(cfg.Prefix) {
		sh.Close()
		return nil, fmt.Errorf("redisstore: Config.Prefix %q has no {hash tag}: on a Redis Cluster every shard's keys must fall in one slot", cfg.Prefix)
	}
	return sh, nil
}

// shard returns the store of engine's shard.
func (s *sharded) shard(engine string) *store {
	return s.shards[shardOf(engine, len(s.shards))]
}

// Resolve implements kvindex.Backend in the engine's shard.
func (s *sharded) Resolve(engine string, hashes []uint64, keys []kvindex.Key, found []bool) error {
	return s.shard(engine).Resolve(engine, hashes, keys, found)
}

// Apply implements kvindex.Backend in the engine's shard: one script call,
// atomic, with the engine's lease, epochs and map in one slot.
func (s *sharded) Apply(engine string, ops []kvindex.Op) (kvindex.Counts, error) {
	return s.shard(engine).Apply(engine, ops)
}

// shardWalk is one shard's part of a Holders call.
type shardWalk struct {
	g     *generation
	cache *epochCache
	rows  []string // the raw answer for each key
}

// Holders implements kvindex.Backend: one script call per shard, all sent
// in one DoMulti (the cluster client pipelines the calls of each node
// together: one round trip per node), each reading every key (a shard
// cannot know where the other shards' holders stop), merged key by key.
// A shard found lost is reported as a store reports it.
func (s *sharded) Holders(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) error {
	return s.walk(keys, visit, false)
}

// PrefixHolders implements kvindex.PrefixWalker, Score's walk: as
// Holders, but each shard's script stops at the first key none of the
// shard's engines holds (no engine of the shard holds a longer prefix, so
// the shard's holders past it are the ones PrefixWalker may leave out).
// The walk visits keys up to the furthest shard's stop. A shard whose
// engines miss the first key costs one read, where Holders reads the
// whole prompt in every shard.
func (s *sharded) PrefixHolders(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) error {
	return s.walk(keys, visit, true)
}

// walk is Holders, or PrefixHolders when prefix is set.
func (s *sharded) walk(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool, prefix bool) error {
	if s.closed.Load() {
		return kvindex.ErrClosed
	}
	if len(keys) == 0 {
		return nil
	}
	n := len(s.shards)
	walks := make([]shardWalk, n)
	// Holders: the keys as arguments, read whole; PrefixHolders: packed in
	// one (prefixScript).
	var keyArgs []string
	if prefix {
		packed := make([]byte, 0, 21*len(keys))
		for _, k := range keys {
			n := len(packed)
			packed = strconv.AppendUint(append(packed, 0), uint64(k), 10)
			packed[n] = byte(len(packed) - n - 1)
		}
		keyArgs = []string{string(packed)}
	} else {
		keyArgs = make([]string, 1, 1+len(keys))
		keyArgs[0] = strconv.Itoa(len(keys)) // nostop: every key
		for _, k := range keys {
			keyArgs = append(keyArgs, strconv.FormatUint(uint64(k), 10))
		}
	}
	sha, script := s.holdersSha, func(sh *store) *rueidis.Lua { return sh.holders }
	if prefix {
		sha, script = s.prefixSha, func(*store) *rueidis.Lua { return s.prefix }
	}
	for try := 1; ; try++ {
		if err := s.enterAll(); err != nil {
			return err
		}
		cmds := make(rueidis.Commands, n)
		for i, sh := range s.shards {
			g, err := sh.enter("Holders")
			if err != nil {
				return err
			}
			cache := g.ep.Load()
			if cache == nil {
				cache = &epochCache{}
			}
			walks[i] = shardWalk{g: g, cache: cache}
			args := append([]string{sh.prefix, g.token, cache.ver}, keyArgs...)
			cmds[i] = s.client.B().EvalshaRo().Sha1(sha).Numkeys(1).Key(sh.keys...).Arg(args...).Build()
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		res := s.client.DoMulti(ctx, cmds...)
		cancel()
		s.calls.Add(1)
		lost := false
		for i, sh := range s.shards {
			w := &walks[i]
			vals, err := res[i].ToArray()
			if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
				// The node does not hold the script yet: EVAL it once.
				ctx, cancel := sh.ctx()
				args := append([]string{sh.prefix, w.g.token, w.cache.ver}, keyArgs...)
				vals, err = script(sh).Exec(ctx, s.client, sh.keys, args).ToArray()
				cancel()
			}
			if err != nil {
				s.errs.Add(1)
				return fmt.Errorf("redisstore: Holders: shard %s: %w", sh.prefix, err)
			}
			if len(vals) == 0 {
				sh.lose(w.g)
				lost = true
				continue
			}
			if len(vals) > 2+len(keys) || len(vals) < 3 || !prefix && len(vals) != 2+len(keys) {
				return fmt.Errorf("redisstore: Holders: shard %s: %d answers for %d keys", sh.prefix, len(vals)-2, len(keys))
			}
			ver, err := vals[0].ToString()
			if err != nil {
				return fmt.Errorf("redisstore: Holders: shard %s: epoch version: %v", sh.prefix, err)
			}
			if ver != w.cache.ver {
				ep, err := vals[1].ToString()
				if err != nil {
					return fmt.Errorf("redisstore: Holders: shard %s: epochs: %v", sh.prefix, err)
				}
				epochs, err := parseEpochs(ep, nil)
				if err != nil {
					return err
				}
				w.cache = &epochCache{ver: ver, epochs: epochs}
				w.g.ep.Store(w.cache)
			}
			w.rows = make([]string, len(vals)-2)
			for j, v := range vals[2:] {
				if w.rows[j], err = v.ToString(); err != nil {
					return fmt.Errorf("redisstore: Holders: shard %s: key %d: %v", sh.prefix, j, err)
				}
			}
		}
		if lost {
			// Nothing was visited: report the losses (or, when another
			// call of the store reported them already, start again).
			if err := s.enterAll(); err != nil {
				return err
			}
			if try == maxTries {
				return fmt.Errorf("redisstore: Holders: the store lost its data %d times during the call", try)
			}
			continue
		}
		restart, err := s.visitRows(walks, keys, visit)
		if err != nil || !restart {
			return err
		}
		if try == maxTries {
			return fmt.Errorf("redisstore: Holders: the store lost its data %d times during the call", try)
		}
	}
}

// enterAll enters every shard's generation, so that the losses the
// shards found and did not report yet are reported together, as one
// error (wrapping kvindex.ErrBackendLost) naming how many shards lost
// their data; nil when none did.
func (s *sharded) enterAll() error {
	var errs []error
	for _, sh := range s.shards {
		if _, err := sh.enter("Holders"); err != nil {
			errs = append(errs, err)
		}
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("redisstore: %d of %d shards: %w", len(errs), len(s.shards), errors.Join(errs...))
}

// visitRows merges the shards' answers key by key and visits them; restart
// when a shard's generation was dropped before the first key was visited.
func (s *sharded) visitRows(walks []shardWalk, keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) (restart bool, err error) {
	n := uint64(len(s.shards))
	var hs []kvindex.Holder
	end := 0 // the furthest key a shard's answer reaches (all of them, from Holders)
	for i := range walks {
		end = max(end, len(walks[i].rows))
	}
	for j := range keys[:end] {
		hs = hs[:0]
		for i, sh := range s.shards {
			w := &walks[i]
			if j >= len(w.rows) {
				continue // PrefixHolders: the shard's engines stopped before j
			}
			from := len(hs)
			if hs, err = parseHolders(w.rows[j], w.cache.epochs, hs); err != nil {
				return false, fmt.Errorf("redisstore: Holders: shard %s: key %d: %v", sh.prefix, j, err)
			}
			for k := from; k < len(hs); k++ {
				h := &hs[k]
				if h.Engine >= 1<<31 || h.Medium >= mediumSpan {
					return false, fmt.Errorf("redisstore: Holders: shard %s: key %d: engine %d or medium %d out of range", sh.prefix, j, h.Engine, h.Medium)
				}
				w.g.handOut(h.Engine)
				e := uint64(h.Engine) + uint64(w.g.ebase)
				if e >= sh.engineLimit() {
					return false, fmt.Errorf("redisstore: Holders: shard %s: key %d: engine id %d out of range", sh.prefix, j, e)
				}
				h.Engine = uint32(e*n + uint64(i))
				h.Medium = uint16((uint64(h.Medium)+uint64(w.g.mbase))*n + uint64(i))
			}
		}
		// As in store.Holders: the ids are handed out before the
		// generations are checked to be current.
		for i, sh := range s.shards {
			if sh.cur.Load() != walks[i].g {
				if j > 0 {
					if _, err := sh.enter("Holders"); err != nil {
						return false, err
					}
					return false, errors.New("redisstore: Holders: the store lost its data during the walk")
				}
				return true, nil
			}
		}
		if !visit(j, hs) {
			return false, nil
		}
	}
	return false, nil
}

// EngineName implements kvindex.Backend: the shard is the id modulo the
// number of shards.
func (s *sharded) EngineName(id uint32) string {
	n := uint32(len(s.shards))
	return s.shards[id%n].EngineName(id / n)
}

// MediumName implements kvindex.Backend, as EngineName.
func (s *sharded) MediumName(id uint16) string {
	n := uint16(len(s.shards))
	return s.shards[id%n].MediumName(id / n)
}

// Stats implements kvindex.Backend: the shards' gauges summed (one round
// trip per shard). Blocks counts a block once per shard holding it.
func (s *sharded) Stats() kvindex.BackendStats {
	var t kvindex.BackendStats
	for _, sh := range s.shards {
		st := sh.Stats()
		t.Entries += st.Entries
		t.Blocks += st.Blocks
		t.Mappings += st.Mappings
		t.Engines += st.Engines
		t.Capacity += st.Capacity
		t.Evicted += st.Evicted
	}
	return t
}

// SavePosition implements kvindex.PositionStore: positions live in shard
// 0.
func (s *sharded) SavePosition(source string, p kvevents.Position) error {
	return s.shards[0].SavePosition(source, p)
}

// DropPosition implements kvindex.PositionStore (shard 0).
func (s *sharded) DropPosition(source string) error {
	return s.shards[0].DropPosition(source)
}

// Positions implements kvindex.PositionStore (shard 0).
func (s *sharded) Positions() (map[string]kvevents.Position, error) {
	return s.shards[0].Positions()
}

// Close closes the shards and the client the store dialed. The data stays
// in Redis.
func (s *sharded) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	for _, sh := range s.shards {
		sh.Close()
	}
	if s.own {
		s.client.Close()
	}
	return nil
}

// StatsOf returns the counters of a backend New made, beyond
// kvindex.BackendStats (of a sharded one: summed over its shards); false
// when be is not one.
func StatsOf(be kvindex.Backend) (Stats, bool) {
	switch s := be.(type) {
	case *store:
		return s.ownStats(), true
	case *sharded:
		var t Stats
		for _, sh := range s.shards {
			o := sh.ownStats()
			t.Calls += o.Calls
			t.Errors += o.Errors
			t.NotWriter += o.NotWriter
			t.Takeovers += o.Takeovers
			t.Recovered += o.Recovered
			t.Losses += o.Losses
		}
		t.Calls += s.calls.Load()
		t.Errors += s.errs.Load()
		t.Shards, t.Cluster = len(s.shards), s.shards[0].cluster
		return t, true
	}
	return Stats{}, false
}
