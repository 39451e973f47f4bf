package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/zmqguard/zmqguard/kvindex"
)

// defaultPrefix is the key prefix of a store made with Config.Prefix "".
// Its {hash tag} keeps every key of one index in one slot.
const defaultPrefix = "{zmqguard-kvindex}:"

// defaultCapacity is kvindex's in-memory default (Config.Capacity 0).
const defaultCapacity = 1 << 22

// Config configures [New]. Exactly one of URL and Client is set.
type Config struct {
	// URL is the server's address: redis://[user:pass@]host:port[/db] or
	// unix:///path/to/redis.sock[?db=N]; for a Redis Cluster, its seed
	// addresses, redis://host:port,host:port,… (cluster mode is detected;
	// see the package doc).
	URL string
	// Client is a client to use instead of dialing URL; Close leaves it
	// open.
	Client rueidis.Client
	// Prefix starts every key of this index. Zero means
	// "{zmqguard-kvindex}:" (its {hash tag} keeps every key in one slot).
	// Two indexes (another model or block size) sharing a server need two
	// prefixes.
	Prefix string
	// Capacity is the most (block, engine, medium, group) entries held;
	// the oldest by first store are evicted. Zero means 4,194,304 (as
	// kvindex's in-memory default). Every writer of one prefix should use
	// the same capacity.
	Capacity int
	// WriterID, when set, makes this store take a lease on each engine it
	// writes (see the package doc); "" writes without leases. Use a value
	// unique to the process (NewWriterID).
	WriterID string
	// LeaseTTL is the writer lease's time to live; leases are renewed
	// every LeaseTTL/3 and on each Apply. Zero means 10 s; at least 30 ms.
	LeaseTTL time.Duration
	// Timeout bounds each Redis call. Zero means 5 s.
	Timeout time.Duration

	// Shards is how many shards the index is split into, by engine: each
	// shard is a whole index under a prefix of its own (on a cluster, its
	// own hash tag, so its own slot), an engine's batches go to the shard
	// a hash of its name picks, and Score reads every shard in one
	// pipelined round trip per node (see the package doc). Zero means 1
	// on a single server (the keys of a store without shards) and 16 on a
	// Redis Cluster; at most 256. Capacity is split evenly between the
	// shards (Capacity/Shards each; Capacity must be at least Shards).
	// Every store of one prefix must use the same Shards.
	Shards int

	// mapSplit, when set (tests), replaces the 128 mappings per bucket
	// past which an engine's map moves to more buckets.
	mapSplit int
	// engineLimit and mediumLimit, when set (a shard of a sharded store),
	// bound the ids the store hands out, below 2³¹ and 2¹⁶.
	engineLimit uint64
	mediumLimit int
}

// NewWriterID returns a random writer id.
func NewWriterID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Stats are a store's own counters, beyond kvindex.BackendStats.
type Stats struct {
	// Calls counts round trips; Errors the ones that failed.
	Calls  uint64 `json:"calls"`
	Errors uint64 `json:"errors"`
	// NotWriter counts Apply calls refused because another writer held
	// the engine's lease; Takeovers counts leases this store took over
	// from another writer (the engine's entries became uncertain).
	NotWriter uint64 `json:"not_writer"`
	Takeovers uint64 `json:"takeovers"`
	// Recovered counts engines whose Apply had failed and whose next
	// applied batch started with OpLost (their entries made uncertain).
	Recovered uint64 `json:"recovered"`
	// Losses counts the times this store found that Redis had lost its
	// data (the generation key missing or changed): each one dropped the
	// store's tables and was reported once as kvindex.ErrBackendLost.
	Losses uint64 `json:"losses"`
	// Shards is the number of shards the index is split into (1: not
	// split; Config.Shards with its default resolved); Cluster whether the
	// client found a Redis Cluster.
	Shards  int  `json:"shards"`
	Cluster bool `json:"cluster"`
}

// store is a kvindex.Backend (and a kvindex.PositionStore) on Redis or
// Valkey.
type store struct {
	cfg    Config
	client rueidis.Client
	own    bool
	prefix string
	// keys is what every script call declares as its KEYS: the generation
	// key, so that a cluster client sends the call to the node serving the
	// prefix's slot (every key of the index shares the prefix's hash tag).
	keys    []string
	cluster bool      // the client is a Redis Cluster client
	share   shareGate // shared ingest (members.go)
	// The scripts; each checks the generation token first.
	apply, holders, resolve, name, renew, establishS, posGet, posSet, retire *rueidis.Lua

	mu sync.RWMutex
	// gen is the generation the store's tables belong to; nil after a
	// loss until a call establishes the next one. cur is a copy, set with
	// it under mu, that Holders reads without the lock.
	gen *generation
	cur atomic.Pointer[generation]
	// pending: a loss was detected (and the tables dropped) but no call
	// has reported it yet; the next call that returns an error does.
	pending bool
	// ebase, mbase are the id bases of the next generation.
	ebase  uint32
	mbase  uint16
	leased map[uint32]bool // engines (Redis ids) whose lease this store holds
	doubt  map[string]bool // engines whose last Apply failed
	closed bool

	stop    chan struct{}
	stopped chan struct{}

	calls, errs, notWriter, takeovers, recovered, losses atomic.Uint64
}

// epochCache is the engines' epochs by id, as of version ver.
type epochCache struct {
	ver    string
	epochs []string
}

var (
	_ kvindex.Backend       = (*store)(nil)
	_ kvindex.PositionStore = (*store)(nil)
)

// New connects (or adopts cfg.Client) and returns a kvindex.Backend on
// Redis. It fills the defaults of cfg's zero fields first, then checks the
// result.
func New(cfg Config) (kvindex.Backend, error) {
	if cfg.Shards == 1 {
		s, err := open(cfg)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return openSharded(cfg)
}

func open(cfg Config) (*store, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	s := &store{cfg: cfg, client: cfg.Client, prefix: cfg.Prefix, keys: []string{cfg.Prefix + "gen"},
		apply:      rueidis.NewLuaScript(applyScript),
		holders:    rueidis.NewLuaScriptReadOnly(holdersScript),
		resolve:    rueidis.NewLuaScriptReadOnly(resolveScript),
		name:       rueidis.NewLuaScriptReadOnly(nameScript),
		renew:      rueidis.NewLuaScript(renewScript),
		establishS: rueidis.NewLuaScript(establishScript),
		posGet:     rueidis.NewLuaScriptReadOnly(positionsScript),
		posSet:     rueidis.NewLuaScript(savePositionScript),
		retire:     rueidis.NewLuaScript(retireScript),
		leased:     map[uint32]bool{}, doubt: map[string]bool{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	if s.client == nil {
		c, err := dial(cfg.URL, cfg.Timeout)
		if err != nil {
			return nil, err
		}
		s.client, s.own = c, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Ping().Build()).Error(); err != nil {
		if s.own {
			s.client.Close()
		}
		return nil, fmt.Errorf("redisstore: PING %s: %v", cfg.URL, err)
	}
	// rueidis detects a cluster by itself (CLUSTER SLOTS on the seeds;
	// a server with cluster support disabled gets a plain client).
	s.cluster = s.client.Mode() == rueidis.ClientModeCluster
	if s.cluster && !hasHashTag(cfg.Prefix) {
		if s.own {
			s.client.Close()
		}
		return nil, fmt.Errorf("redisstore: Config.Prefix %q has no {hash tag}: on a Redis Cluster every key of one index must fall in one slot", cfg.Prefix)
	}
	if _, err := s.establish(); err != nil {
		if s.own {
			s.client.Close()
		}
		return nil, err
	}
	if cfg.WriterID != "" {
		go s.renewLoop()
	} else {
		close(s.stopped)
	}
	return s, nil
}

func (s *store) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.Timeout)
}

func (s *store) count(err error) error {
	s.calls.Add(1)
	if err != nil {
		s.errs.Add(1)
	}
	return err
}

func (s *store) isClosed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.closed
}

// Resolve implements kvindex.Backend: one script call reads the engine's
// id and HMGETs its map, in the store's generation.
func (s *store) Resolve(engine string, hashes []uint64, keys []kvindex.Key, found []bool) error {
	if len(keys) != len(hashes) || len(found) != len(hashes) {
		return fmt.Errorf("redisstore: Resolve: %d hashes, %d keys, %d found", len(hashes), len(keys), len(found))
	}
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	for i := range keys {
		keys[i], found[i] = 0, false
	}
	if len(hashes) == 0 {
		return nil
	}
	args := make([]string, 3, 3+len(hashes))
	args[0], args[2] = s.prefix, engine
	for _, h := range hashes {
		args = append(args, strconv.FormatUint(h, 10))
	}
	return s.run("Resolve", func(g *generation) (bool, error) {
		args[1] = g.token
		ctx, cancel := s.ctx()
		defer cancel()
		vals, err := s.resolve.Exec(ctx, s.client, s.keys, args).ToArray()
		if err := s.count(err); err != nil {
			return false, fmt.Errorf("redisstore: Resolve %q: %w", engine, err)
		}
		if len(vals) == 0 {
			return true, nil
		}
		if len(vals) == 1 { // the engine is not known
			return false, nil
		}
		if len(vals)-1 != len(hashes) {
			return false, fmt.Errorf("redisstore: Resolve %q: %d values for %d hashes", engine, len(vals)-1, len(hashes))
		}
		for i, v := range vals[1:] {
			str, err := v.ToString()
			if err != nil { // nil: not mapped
				continue
			}
			k, err := parseMapKey(str)
			if err != nil {
				return false, fmt.Errorf("redisstore: Resolve %q: %v", engine, err)
			}
			keys[i], found[i] = k, true
		}
		return false, nil
	})
}

// Apply implements kvindex.Backend: the whole batch is one script call (one
// round trip, atomic against every other writer and reader).
func (s *store) Apply(engine string, ops []kvindex.Op) (kvindex.Counts, error) {
	var c kvindex.Counts
	if s.isClosed() {
		return c, kvindex.ErrClosed
	}
	done, ok := s.admit(engine) // shared ingest (members.go)
	if !ok {
		return c, nil
	}
	defer done()
	err := s.run("Apply", func(g *generation) (lost bool, err error) {
		c, lost, err = s.applyIn(g, engine, ops)
		return lost, err
	})
	return c, err
}

// applyIn runs one Apply in generation g; lost when the script found g
// lost (and applied nothing).
func (s *store) applyIn(g *generation, engine string, ops []kvindex.Op) (c kvindex.Counts, lost bool, err error) {
	// A batch whose call failed may or may not have been applied (a
	// timeout after the server ran it, a connection lost on the way): the
	// engine's state in Redis is in doubt, as after a lost range. The next
	// batch of the engine that gets through starts with OpLost, so its
	// entries read as uncertain until stored again, never as certain hits.
	s.mu.RLock()
	doubt := s.doubt[engine]
	s.mu.RUnlock()
	args := make([]string, 0, 11+5*len(ops))
	args = append(args, s.prefix, engine, strconv.Itoa(s.cfg.Capacity), s.cfg.WriterID,
		strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10), g.token)
	if doubt {
		args = append(args, strconv.Itoa(int(kvindex.OpLost)), "0", "0", "", "0")
	}
	for _, op := range ops {
		args = append(args, strconv.Itoa(int(op.Kind)), strconv.FormatUint(op.Hash, 10),
			strconv.FormatUint(uint64(op.Key), 10), op.Medium, strconv.Itoa(op.Group))
	}
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := s.apply.Exec(ctx, s.client, s.keys, args).AsIntSlice()
	if err := s.count(err); err != nil {
		s.mu.Lock()
		if s.gen == g {
			s.doubt[engine] = true
		}
		s.mu.Unlock()
		return c, false, fmt.Errorf("redisstore: Apply %q (%d ops): %w", engine, len(ops), err)
	}
	if len(res) != 11 {
		return c, false, fmt.Errorf("redisstore: Apply %q: script answered %d values", engine, len(res))
	}
	if res[9] == 4 {
		return c, true, nil
	}
	if doubt && res[9] != 2 { // applied (not refused as another writer's engine)
		s.mu.Lock()
		delete(s.doubt, engine)
		s.mu.Unlock()
		s.recovered.Add(1)
	}
	if res[0] <= 0 || res[0] >= 1<<31 {
		return c, false, fmt.Errorf("redisstore: Apply %q: engine id %d not in 1..2^31-1", engine, res[0])
	}
	eid := uint32(res[0])
	s.learnEngine(g, engine, eid)
	c = kvindex.Counts{Added: uint64(res[1]), Refreshed: uint64(res[2]), Removed: uint64(res[3]),
		UnknownRemovals: uint64(res[4]), Cleared: uint64(res[5]), Remapped: uint64(res[6]), Evicted: uint64(res[7]),
		Rejected: uint64(res[8])}
	switch res[9] {
	case 0, 3:
		if s.cfg.WriterID != "" {
			s.mu.Lock()
			if s.gen == g {
				s.leased[eid] = true
			}
			s.mu.Unlock()
		}
		if res[9] == 3 {
			s.takeovers.Add(1)
		}
		return c, false, nil
	case 1:
		i := res[10]
		if doubt {
			i-- // the OpLost put first
		}
		if i >= 0 && int(i) < len(ops) {
			return c, false, fmt.Errorf("redisstore: op %d has unknown kind %d", i, ops[i].Kind)
		}
		return c, false, fmt.Errorf("redisstore: op %d has an unknown kind", i)
	case 2:
		s.notWriter.Add(1)
		s.mu.Lock()
		delete(s.leased, eid)
		s.mu.Unlock()
		return c, false, nil // the writer applies it; counted in Stats.NotWriter
	}
	return c, false, fmt.Errorf("redisstore: Apply %q: script status %d", engine, res[9])
}

// Holders implements kvindex.Backend: one script call reads the keys in
// order up to the first key nobody holds; should visit go on past it, the
// rest is read the same way. The holders' ids are the generation's (Redis's
// ids plus its bases), handed out only while the generation is current.
func (s *store) Holders(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) error {
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	var (
		g   *generation
		hs  []kvindex.Holder
		err error
	)
	args := make([]string, 0, 3+len(keys))
	for base, try := 0, 1; base < len(keys); {
		if g == nil {
			if g, err = s.enter("Holders"); err != nil {
				return err
			}
		}
		cache := g.ep.Load()
		if cache == nil {
			cache = &epochCache{}
		}
		args = append(args[:0], s.prefix, g.token, cache.ver, "0")
		for _, k := range keys[base:] {
			args = append(args, strconv.FormatUint(uint64(k), 10))
		}
		ctx, cancel := s.ctx()
		res, err := s.holders.Exec(ctx, s.client, s.keys, args).ToArray()
		cancel()
		if err := s.count(err); err != nil {
			return fmt.Errorf("redisstore: Holders: %w", err)
		}
		if len(res) == 0 { // the generation is lost
			s.lose(g)
			if base > 0 || try == maxTries {
				// Keys were visited in the lost generation: the walk
				// cannot go on in another one.
				if _, err := s.enter("Holders"); err != nil {
					return err
				}
				return errors.New("redisstore: Holders: the store lost its data during the walk")
			}
			g = nil
			try++
			continue
		}
		if len(res) < 3 || len(res)-2 > len(keys)-base {
			return fmt.Errorf("redisstore: Holders: %d answers for %d keys", len(res)-2, len(keys)-base)
		}
		ver, err := res[0].ToString()
		if err != nil {
			return fmt.Errorf("redisstore: Holders: epoch version: %v", err)
		}
		if ver != cache.ver {
			ep, err := res[1].ToString()
			if err != nil {
				return fmt.Errorf("redisstore: Holders: epochs: %v", err)
			}
			epochs, err := parseEpochs(ep, nil)
			if err != nil {
				return err
			}
			cache = &epochCache{ver: ver, epochs: epochs}
			g.ep.Store(cache)
		}
		restart := false
		for j, r := range res[2:] {
			flat, err := r.ToString()
			if err != nil {
				return fmt.Errorf("redisstore: Holders: key %d: %v", base+j, err)
			}
			if hs, err = parseHolders(flat, cache.epochs, hs[:0]); err != nil {
				return fmt.Errorf("redisstore: Holders: key %d: %v", base+j, err)
			}
			for k := range hs {
				h := &hs[k]
				if h.Engine >= 1<<31 || h.Medium >= mediumSpan {
					return fmt.Errorf("redisstore: Holders: key %d: engine %d or medium %d out of range", base+j, h.Engine, h.Medium)
				}
				g.handOut(h.Engine)
				h.Engine += g.ebase
				h.Medium += g.mbase
			}
			// The ids are handed out (g.espan) before g is checked to be
			// current: a loss dropping g after this check sets the next
			// generation's bases above them. A loss before it: these ids
			// are of the lost data and are not visited.
			if s.cur.Load() != g {
				if base+j > 0 || try == maxTries {
					// Keys were visited in the lost generation: the walk
					// cannot go on in another one.
					if _, err := s.enter("Holders"); err != nil {
						return err
					}
					return errors.New("redisstore: Holders: the store lost its data during the walk")
				}
				g, restart = nil, true
				try++
				break
			}
			if !visit(base+j, hs) {
				return nil
			}
		}
		if restart {
			continue
		}
		base += len(res) - 2
	}
	return nil
}

// Stats implements kvindex.Backend with one pipelined round trip; on an
// error it returns what it could read (Capacity at least). The round trip
// reads the generation key too: a loss it finds is handled (and reported
// by the next call that returns an error) as any call's.
func (s *store) Stats() kvindex.BackendStats {
	st := kvindex.BackendStats{Capacity: int64(s.cfg.Capacity)}
	if s.isClosed() {
		return st
	}
	s.mu.RLock()
	g := s.gen
	s.mu.RUnlock()
	ctx, cancel := s.ctx()
	defer cancel()
	b := s.client.B()
	res := s.client.DoMulti(ctx,
		b.Hmget().Key(s.prefix+"st").Field("entries", "blocks", "mappings", "evicted").Build(),
		b.Hlen().Key(s.prefix+"ep").Build(),
		b.Get().Key(s.prefix+"gen").Build())
	vals, err := res[0].ToArray()
	if s.count(err) != nil {
		return st
	}
	if len(vals) == 4 { // a field never written is nil: 0
		n0, _ := vals[0].AsInt64()
		n1, _ := vals[1].AsInt64()
		n2, _ := vals[2].AsInt64()
		n3, _ := vals[3].AsInt64()
		st.Entries, st.Blocks, st.Mappings, st.Evicted = n0, n1, n2, uint64(n3)
	}
	st.Engines, _ = res[1].AsInt64()
	if tok, err := res[2].ToString(); g != nil && (rueidis.IsRedisNil(err) || err == nil && tok != g.token) {
		s.lose(g)
	}
	return st
}

// ownStats returns the store's own counters.
func (s *store) ownStats() Stats {
	return Stats{Calls: s.calls.Load(), Errors: s.errs.Load(), NotWriter: s.notWriter.Load(), Takeovers: s.takeovers.Load(),
		Recovered: s.recovered.Load(), Losses: s.losses.Load(), Shards: 1, Cluster: s.cluster}
}

// Close stops the lease renewal and closes the client it dialed. The data
// stays in Redis.
func (s *store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.stopped
	if s.own {
		s.client.Close()
	}
	return nil
}

// renewLoop renews the leases this store holds every LeaseTTL/3, in its
// generation (a lost one holds no lease: it is dropped).
func (s *store) renewLoop() {
	defer close(s.stopped)
	t := time.NewTicker(s.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.RLock()
		g := s.gen
		var args []string
		if g != nil {
			args = []string{s.prefix, s.cfg.WriterID, strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10), g.token}
			for id := range s.leased {
				args = append(args, strconv.FormatUint(uint64(id), 10))
			}
		}
		s.mu.RUnlock()
		if len(args) <= 4 {
			continue
		}
		ctx, cancel := s.ctx()
		n, err := s.renew.Exec(ctx, s.client, s.keys, args).AsInt64()
		cancel()
		if s.count(err) == nil && n < 0 {
			s.lose(g)
		}
	}
}

// withDefaults fills the defaults of cfg's zero fields, then checks the
// result (before anything is dialed).
func withDefaults(cfg Config) (Config, error) {
	if cfg.Capacity == 0 {
		cfg.Capacity = defaultCapacity
	}
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	switch {
	case (cfg.URL == "") == (cfg.Client == nil):
		return cfg, errors.New("redisstore: set exactly one of Config.URL and Config.Client")
	case cfg.Capacity < 0:
		return cfg, fmt.Errorf("redisstore: Config.Capacity %d is negative", cfg.Capacity)
	case cfg.Timeout < 0:
		return cfg, fmt.Errorf("redisstore: Config.Timeout %v is negative", cfg.Timeout)
	case cfg.LeaseTTL < 30*time.Millisecond:
		return cfg, fmt.Errorf("redisstore: Config.LeaseTTL %v is under 30ms", cfg.LeaseTTL)
	}
	return cfg, nil
}
