package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// unix:///path/to/redis.sock[?db=N].
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
}

// store is a kvindex.Backend on Redis or Valkey.
type store struct {
	cfg     Config
	client  rueidis.Client
	own     bool
	apply   *rueidis.Lua
	holders *rueidis.Lua
	renew   *rueidis.Lua
	prefix  string

	mu      sync.RWMutex
	eids    map[string]uint32 // engine name → Redis id
	enames  map[uint32]string
	mnames  map[uint16]string
	leased  map[uint32]bool // engines whose lease this store holds
	doubt   map[string]bool // engines whose last Apply failed
	closed  bool
	stop    chan struct{}
	stopped chan struct{}

	calls, errs, notWriter, takeovers, recovered atomic.Uint64

	// ep caches the engines' epochs at a version of the epv counter.
	ep atomic.Pointer[epochCache]
}

// epochCache is the engines' epochs by id, as of version ver.
type epochCache struct {
	ver    string
	epochs []string
}

var _ kvindex.Backend = (*store)(nil)

// New connects (or adopts cfg.Client) and returns a kvindex.Backend on
// Redis. It fills the defaults of cfg's zero fields first, then checks the
// result.
func New(cfg Config) (kvindex.Backend, error) {
	s, err := open(cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// StatsOf returns the counters of a backend New made, beyond
// kvindex.BackendStats; false when be is not one.
func StatsOf(be kvindex.Backend) (Stats, bool) {
	s, ok := be.(*store)
	if !ok {
		return Stats{}, false
	}
	return s.ownStats(), true
}

func open(cfg Config) (*store, error) {
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
		return nil, errors.New("redisstore: set exactly one of Config.URL and Config.Client")
	case cfg.Capacity < 0:
		return nil, fmt.Errorf("redisstore: Config.Capacity %d is negative", cfg.Capacity)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("redisstore: Config.Timeout %v is negative", cfg.Timeout)
	case cfg.LeaseTTL < 30*time.Millisecond:
		return nil, fmt.Errorf("redisstore: Config.LeaseTTL %v is under 30ms", cfg.LeaseTTL)
	}
	s := &store{cfg: cfg, client: cfg.Client, prefix: cfg.Prefix,
		apply:   rueidis.NewLuaScript(applyScript),
		holders: rueidis.NewLuaScriptReadOnly(holdersScript),
		renew:   rueidis.NewLuaScript(renewScript),
		eids:    map[string]uint32{}, enames: map[uint32]string{}, mnames: map[uint16]string{}, leased: map[uint32]bool{}, doubt: map[string]bool{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	if s.client == nil {
		opt, err := rueidis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: URL %q: %v", cfg.URL, err)
		}
		opt.DisableCache = true // no client-side caching: every read sees the server
		if opt.Dialer.Timeout == 0 {
			opt.Dialer.Timeout = cfg.Timeout
		}
		opt.ConnWriteTimeout = cfg.Timeout
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, fmt.Errorf("redisstore: connect %q: %v", cfg.URL, err)
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

// engineID returns the Redis id of engine, reading it once.
func (s *store) engineID(ctx context.Context, engine string) (uint32, bool, error) {
	s.mu.RLock()
	id, ok := s.eids[engine]
	s.mu.RUnlock()
	if ok {
		return id, true, nil
	}
	v, err := s.client.Do(ctx, s.client.B().Hget().Key(s.prefix+"eid").Field(engine).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return 0, false, s.count(nil)
	}
	if err := s.count(err); err != nil {
		return 0, false, fmt.Errorf("redisstore: engine id of %q: %w", engine, err)
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, false, fmt.Errorf("redisstore: engine id %q of %q: %v", v, engine, err)
	}
	s.learnEngine(engine, uint32(n))
	return uint32(n), true, nil
}

func (s *store) learnEngine(name string, id uint32) {
	s.mu.Lock()
	s.eids[name], s.enames[id] = id, name
	s.mu.Unlock()
}

// Resolve implements kvindex.Backend: one HMGET of the engine's map.
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
	ctx, cancel := s.ctx()
	defer cancel()
	eid, ok, err := s.engineID(ctx, engine)
	if err != nil || !ok {
		return err
	}
	fields := make([]string, len(hashes))
	for i, h := range hashes {
		fields[i] = strconv.FormatUint(h, 10)
	}
	vals, err := s.client.Do(ctx, s.client.B().Hmget().Key(s.mapKey(eid)).Field(fields...).Build()).ToArray()
	if err := s.count(err); err != nil {
		return fmt.Errorf("redisstore: Resolve %q: %w", engine, err)
	}
	if len(vals) != len(hashes) {
		return fmt.Errorf("redisstore: Resolve %q: %d values for %d hashes", engine, len(vals), len(hashes))
	}
	for i, v := range vals {
		str, err := v.ToString()
		if err != nil { // nil: not mapped
			continue
		}
		k, err := parseMapKey(str)
		if err != nil {
			return fmt.Errorf("redisstore: Resolve %q: %v", engine, err)
		}
		keys[i], found[i] = k, true
	}
	return nil
}

func (s *store) mapKey(eid uint32) string {
	return s.prefix + "m:" + strconv.FormatUint(uint64(eid), 10)
}

// parseMapKey reads the local key at the head of a map value ("key|mid:g|…").
func parseMapKey(v string) (kvindex.Key, error) {
	end := len(v)
	for i := 0; i < len(v); i++ {
		if v[i] == '|' {
			end = i
			break
		}
	}
	k, err := strconv.ParseUint(v[:end], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad map value %q", v)
	}
	return kvindex.Key(k), nil
}

// Apply implements kvindex.Backend: the whole batch is one script call (one
// round trip, atomic against every other writer and reader).
func (s *store) Apply(engine string, ops []kvindex.Op) (kvindex.Counts, error) {
	var c kvindex.Counts
	if s.isClosed() {
		return c, kvindex.ErrClosed
	}
	// A batch whose call failed may or may not have been applied (a
	// timeout after the server ran it, a connection lost on the way): the
	// engine's state in Redis is in doubt, as after a lost range. The next
	// batch of the engine that gets through starts with OpLost, so its
	// entries read as uncertain until stored again, never as certain hits.
	s.mu.RLock()
	doubt := s.doubt[engine]
	s.mu.RUnlock()
	args := make([]string, 0, 10+5*len(ops))
	args = append(args, s.prefix, engine, strconv.Itoa(s.cfg.Capacity), s.cfg.WriterID,
		strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10))
	if doubt {
		args = append(args, strconv.Itoa(int(kvindex.OpLost)), "0", "0", "", "0")
	}
	for _, op := range ops {
		args = append(args, strconv.Itoa(int(op.Kind)), strconv.FormatUint(op.Hash, 10),
			strconv.FormatUint(uint64(op.Key), 10), op.Medium, strconv.Itoa(op.Group))
	}
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := s.apply.Exec(ctx, s.client, nil, args).AsIntSlice()
	if err := s.count(err); err != nil {
		s.mu.Lock()
		s.doubt[engine] = true
		s.mu.Unlock()
		return c, fmt.Errorf("redisstore: Apply %q (%d ops): %w", engine, len(ops), err)
	}
	if len(res) != 11 {
		return c, fmt.Errorf("redisstore: Apply %q: script answered %d values", engine, len(res))
	}
	if doubt && res[9] != 2 { // applied (not refused as another writer's engine)
		s.mu.Lock()
		delete(s.doubt, engine)
		s.mu.Unlock()
		s.recovered.Add(1)
	}
	eid := uint32(res[0])
	s.learnEngine(engine, eid)
	c = kvindex.Counts{Added: uint64(res[1]), Refreshed: uint64(res[2]), Removed: uint64(res[3]),
		UnknownRemovals: uint64(res[4]), Cleared: uint64(res[5]), Remapped: uint64(res[6]), Evicted: uint64(res[7]),
		Rejected: uint64(res[8])}
	switch res[9] {
	case 0, 3:
		if s.cfg.WriterID != "" {
			s.mu.Lock()
			s.leased[eid] = true
			s.mu.Unlock()
		}
		if res[9] == 3 {
			s.takeovers.Add(1)
		}
		return c, nil
	case 1:
		i := res[10]
		if doubt {
			i-- // the OpLost put first
		}
		if i >= 0 && int(i) < len(ops) {
			return c, fmt.Errorf("redisstore: op %d has unknown kind %d", i, ops[i].Kind)
		}
		return c, fmt.Errorf("redisstore: op %d has an unknown kind", i)
	case 2:
		s.notWriter.Add(1)
		s.mu.Lock()
		delete(s.leased, eid)
		s.mu.Unlock()
		return c, nil // the writer applies it; counted in Stats.NotWriter
	}
	return c, fmt.Errorf("redisstore: Apply %q: script status %d", engine, res[9])
}

// Holders implements kvindex.Backend: one script call reads the keys in
// order up to the first key nobody holds; should visit go on past it, the
// rest is read the same way.
func (s *store) Holders(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) error {
	if s.isClosed() {
		return kvindex.ErrClosed
	}
	var hs []kvindex.Holder
	args := make([]string, 0, 2+len(keys))
	for base := 0; base < len(keys); {
		cache := s.ep.Load()
		if cache == nil {
			cache = &epochCache{}
		}
		args = append(args[:0], s.prefix, cache.ver)
		for _, k := range keys[base:] {
			args = append(args, strconv.FormatUint(uint64(k), 10))
		}
		ctx, cancel := s.ctx()
		res, err := s.holders.Exec(ctx, s.client, nil, args).ToArray()
		cancel()
		if err := s.count(err); err != nil {
			return fmt.Errorf("redisstore: Holders: %w", err)
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
			s.ep.Store(cache)
		}
		for j, r := range res[2:] {
			flat, err := r.ToString()
			if err != nil {
				return fmt.Errorf("redisstore: Holders: key %d: %v", base+j, err)
			}
			if hs, err = parseHolders(flat, cache.epochs, hs[:0]); err != nil {
				return fmt.Errorf("redisstore: Holders: key %d: %v", base+j, err)
			}
			if !visit(base+j, hs) {
				return nil
			}
		}
		base += len(res) - 2
	}
	return nil
}

// next returns the part of *s before sep and moves *s past it.
func next(s *string, sep byte) string {
	for i := 0; i < len(*s); i++ {
		if (*s)[i] == sep {
			v := (*s)[:i]
			*s = (*s)[i+1:]
			return v
		}
	}
	v := *s
	*s = ""
	return v
}

// parseEpochs reads "E,epoch,E,epoch…" into epochs indexed by engine id.
// Engine ids are handed out one by one and never forgotten, so none is
// above the number of engines listed; a larger one is refused rather than
// allocated for.
func parseEpochs(s string, epochs []string) ([]string, error) {
	limit := uint64(strings.Count(s, ",")/2 + 1)
	for s != "" {
		field := next(&s, ',')
		id, err := strconv.ParseUint(field, 10, 32)
		if err != nil || id > limit {
			return epochs, fmt.Errorf("redisstore: engine id %.20q in the epochs is not in 0..%d", field, limit)
		}
		ep := next(&s, ',')
		for uint64(len(epochs)) <= id {
			epochs = append(epochs, "")
		}
		epochs[id] = ep
	}
	return epochs, nil
}

// parseHolders reads "E:hash:M:G,epoch,…" into holders.
func parseHolders(s string, epochs []string, hs []kvindex.Holder) ([]kvindex.Holder, error) {
	for s != "" {
		field := next(&s, ',')
		ep := next(&s, ',')
		e, err1 := strconv.ParseUint(next(&field, ':'), 10, 32)
		next(&field, ':')
		m, err2 := strconv.ParseUint(next(&field, ':'), 10, 16)
		if err1 != nil || err2 != nil {
			return hs, fmt.Errorf("bad entry field")
		}
		hs = append(hs, kvindex.Holder{Engine: uint32(e), Medium: uint16(m), Trusted: e < uint64(len(epochs)) && epochs[e] == ep})
	}
	return hs, nil
}

// EngineName implements kvindex.Backend (one HGET the first time an id is
// seen; "" when Redis cannot answer).
func (s *store) EngineName(id uint32) string {
	s.mu.RLock()
	n, ok := s.enames[id]
	s.mu.RUnlock()
	if ok {
		return n
	}
	n = s.lookupName("ename", uint64(id))
	if n != "" {
		s.learnEngine(n, id)
	}
	return n
}

// MediumName implements kvindex.Backend.
func (s *store) MediumName(id uint16) string {
	s.mu.RLock()
	n, ok := s.mnames[id]
	s.mu.RUnlock()
	if ok {
		return n
	}
	n = s.lookupName("mname", uint64(id))
	if n != "" {
		s.mu.Lock()
		s.mnames[id] = n
		s.mu.Unlock()
	}
	return n
}

func (s *store) lookupName(table string, id uint64) string {
	if s.isClosed() {
		return ""
	}
	ctx, cancel := s.ctx()
	defer cancel()
	v, err := s.client.Do(ctx, s.client.B().Hget().Key(s.prefix+table).Field(strconv.FormatUint(id, 10)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		err = nil
	}
	s.count(err)
	return v
}

// Stats implements kvindex.Backend with one pipelined round trip; on an
// error it returns what it could read (Capacity at least).
func (s *store) Stats() kvindex.BackendStats {
	st := kvindex.BackendStats{Capacity: int64(s.cfg.Capacity)}
	if s.isClosed() {
		return st
	}
	ctx, cancel := s.ctx()
	defer cancel()
	b := s.client.B()
	res := s.client.DoMulti(ctx,
		b.Zcard().Key(s.prefix+"fifo").Build(),
		b.Hmget().Key(s.prefix+"st").Field("blocks", "mappings", "evicted").Build(),
		b.Hlen().Key(s.prefix+"ep").Build())
	var err error
	if st.Entries, err = res[0].AsInt64(); s.count(err) != nil {
		return st
	}
	if vals, err := res[1].ToArray(); err == nil && len(vals) == 3 {
		n0, _ := vals[0].AsInt64()
		n1, _ := vals[1].AsInt64()
		n2, _ := vals[2].AsInt64()
		st.Blocks, st.Mappings, st.Evicted = n0, n1, uint64(n2)
	}
	st.Engines, _ = res[2].AsInt64()
	return st
}

// ownStats returns the store's own counters.
func (s *store) ownStats() Stats {
	return Stats{Calls: s.calls.Load(), Errors: s.errs.Load(), NotWriter: s.notWriter.Load(), Takeovers: s.takeovers.Load(),
		Recovered: s.recovered.Load()}
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

// renewLoop renews the leases this store holds every LeaseTTL/3.
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
		args := []string{s.prefix, s.cfg.WriterID, strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10)}
		for id := range s.leased {
			args = append(args, strconv.FormatUint(uint64(id), 10))
		}
		s.mu.RUnlock()
		if len(args) == 3 {
			continue
		}
		ctx, cancel := s.ctx()
		err := s.renew.Exec(ctx, s.client, nil, args).Error()
		cancel()
		s.count(err)
	}
}
