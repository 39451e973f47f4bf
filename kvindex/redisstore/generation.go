package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/kvindex"
)

// generation is one life of the index's data in Redis, as this store saw
// it: the token stored at the prefix's "gen" key, and the tables the store
// learned while the token held. When Redis loses its data the generation
// is dropped whole, so no table of the lost data answers again.
//
// The ids a store hands out (Holder.Engine, Holder.Medium) are Redis's ids
// plus the generation's bases. Redis hands out ids from 1 again after a
// loss; the bases of a new generation are above every id the previous one
// handed out, so an id read before a loss never names an engine of the
// data after it (EngineName answers "" for it).
type generation struct {
	token string
	ebase uint32 // Holder.Engine = ebase + the engine's Redis id
	mbase uint16 // Holder.Medium = mbase + the medium's Redis id (1..64)
	// espan is one more than the largest Redis engine id handed out in
	// this generation (the next generation's ebase is ebase + espan).
	espan atomic.Uint32
	// Under store.mu:
	enames map[uint32]string // Redis engine id → name
	mnames map[uint16]string // Redis medium id → name
	// ep caches the engines' epochs at a version of the epv counter.
	ep atomic.Pointer[epochCache]
}

// mediumSpan is the room a generation's medium ids take (Redis gives at
// most 64 mediums the ids 1..64).
const mediumSpan = 65

// handOut records that the Redis engine id rid was handed out in g.
func (g *generation) handOut(rid uint32) {
	for {
		cur := g.espan.Load()
		if rid < cur || g.espan.CompareAndSwap(cur, rid+1) {
			return
		}
	}
}

// bucketDigits returns how many trailing decimal digits of a block key
// name its bucket hash (b:<digits>): the fewest that make 10^d buckets at
// least capacity/128, so that at full capacity a bucket holds at most
// about 128 blocks of one entry (Redis keeps a hash of up to 128 short
// fields as a compact listpack: hash-max-listpack-entries).
func bucketDigits(capacity int) int {
	d, n := 1, 10
	for n < capacity/128 && d < 12 {
		d, n = d+1, n*10
	}
	return d
}

// mapSplit returns how many mappings an engine's map bucket holds before
// the engine's maps move to a level of 10 times more buckets: 128, the
// most fields Redis keeps in a compact listpack (hash-max-listpack-entries);
// tests set less.
func (s *store) mapSplit() int {
	if s.cfg.mapSplit > 0 {
		return s.cfg.mapSplit
	}
	return 128
}

// engineLimit is the bound of the engine ids the store hands out (Redis's
// id plus the generation's base): 2³¹, or less for a shard of a sharded
// store, whose ids are multiplied by the number of shards.
func (s *store) engineLimit() uint64 {
	if s.cfg.engineLimit > 0 {
		return s.cfg.engineLimit
	}
	return 1 << 31
}

// mediumLimit is the bound of the medium ids the store hands out: 2¹⁶, or
// less for a shard of a sharded store.
func (s *store) mediumLimit() int {
	if s.cfg.mediumLimit > 0 {
		return s.cfg.mediumLimit
	}
	return 1 << 16
}

// newToken returns a random 128-bit generation token.
func newToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// establish adopts the generation Redis holds for the prefix, writing a
// new token first when there is none (a new store, or one that lost its
// data), and makes it the store's current generation unless another call
// already did.
func (s *store) establish() (*generation, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	tok, err := s.establishS.Exec(ctx, s.client, s.keys, []string{s.prefix, newToken(), strconv.Itoa(bucketDigits(s.cfg.Capacity)), strconv.Itoa(s.mapSplit())}).ToString()
	if err := s.count(err); err != nil {
		return nil, fmt.Errorf("redisstore: generation key %sgen: %w", s.prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == nil {
		s.gen = &generation{token: tok, ebase: s.ebase, mbase: s.mbase,
			enames: map[uint32]string{}, mnames: map[uint16]string{}}
		s.cur.Store(s.gen)
	}
	return s.gen, nil
}

// enter returns the generation a call runs in, establishing one after a
// loss. When a loss was detected and not reported yet, this call reports
// it: it returns the loss error instead (once per loss).
func (s *store) enter(call string) (*generation, error) {
	s.mu.RLock()
	g, pending := s.gen, s.pending
	s.mu.RUnlock()
	if pending {
		s.mu.Lock()
		pending, s.pending = s.pending, false
		g = s.gen
		s.mu.Unlock()
		if pending {
			return nil, fmt.Errorf("redisstore: %s: %w: the generation key %sgen was missing or changed "+
				"(a restart without persistence, FLUSHALL or FLUSHDB, a failover to an empty replica); "+
				"the store dropped its tables and goes on in a new generation", call, kvindex.ErrBackendLost, s.prefix)
		}
	}
	if g != nil {
		return g, nil
	}
	return s.establish()
}

// lose drops generation g, which a call found lost (its token missing or
// changed in Redis): every table learned under it goes, with the leases
// and doubts, the next generation's id bases are set above every id g
// handed out, and the loss waits to be reported by the next call that
// returns an error. It does nothing when g was dropped already.
func (s *store) lose(g *generation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g == nil || s.gen != g {
		return
	}
	s.gen, s.pending = nil, true
	s.cur.Store(nil)
	// Redis ids are below 1<<31 (see Holders); past 1<<31 handed out over
	// many losses the bases start again at 0.
	if next := uint64(g.ebase) + uint64(g.espan.Load()); next < s.engineLimit() {
		s.ebase = uint32(next)
	} else {
		s.ebase = 0
	}
	if next := int(g.mbase) + mediumSpan; next+mediumSpan <= s.mediumLimit() {
		s.mbase = uint16(next)
	} else {
		s.mbase = 0
	}
	clear(s.leased)
	clear(s.doubt)
	s.losses.Add(1)
}

// maxTries bounds how often one call starts again after finding its
// generation lost by another call of the store (which reported it).
const maxTries = 3

// run runs f in the store's generation. f reports lost when its script
// found the generation's token missing or changed (and did nothing): the
// generation is dropped, and the call reports the loss (ErrBackendLost) or,
// when another call of the store reported it, runs f again in the new
// generation.
func (s *store) run(call string, f func(g *generation) (lost bool, err error)) error {
	for try := 1; ; try++ {
		g, err := s.enter(call)
		if err != nil {
			return err
		}
		lost, err := f(g)
		if !lost {
			return err
		}
		s.lose(g)
		if try == maxTries {
			return fmt.Errorf("redisstore: %s: the store lost its data %d times during the call", call, try)
		}
	}
}

// learnEngine records an engine's Redis id in g, while g is current.
func (s *store) learnEngine(g *generation, name string, rid uint32) {
	s.mu.Lock()
	if s.gen == g {
		g.enames[rid] = name
		g.handOut(rid)
	}
	s.mu.Unlock()
}

// EngineName implements kvindex.Backend (one script call the first time
// an id is seen; "" when Redis cannot answer, and for an id of a
// generation the store dropped).
func (s *store) EngineName(id uint32) string {
	s.mu.RLock()
	g := s.gen
	var n string
	ok := false
	if g != nil && id >= g.ebase {
		n, ok = g.enames[id-g.ebase]
	}
	s.mu.RUnlock()
	if ok {
		return n
	}
	if g == nil || id < g.ebase || id-g.ebase >= 1<<31 {
		return ""
	}
	rid := id - g.ebase
	n = s.lookupName(g, "ename", uint64(rid))
	if n == "" {
		return ""
	}
	s.mu.Lock()
	if s.gen == g {
		g.enames[rid] = n
		g.handOut(rid)
	} else {
		n = ""
	}
	s.mu.Unlock()
	return n
}

// MediumName implements kvindex.Backend, as EngineName.
func (s *store) MediumName(id uint16) string {
	s.mu.RLock()
	g := s.gen
	var n string
	ok := false
	if g != nil && id >= g.mbase {
		n, ok = g.mnames[id-g.mbase]
	}
	s.mu.RUnlock()
	if ok {
		return n
	}
	if g == nil || id < g.mbase || id-g.mbase >= mediumSpan {
		return ""
	}
	rid := id - g.mbase
	n = s.lookupName(g, "mname", uint64(rid))
	if n == "" {
		return ""
	}
	s.mu.Lock()
	if s.gen == g {
		g.mnames[rid] = n
	} else {
		n = ""
	}
	s.mu.Unlock()
	return n
}

// lookupName reads the name of Redis id rid in table, in generation g; ""
// when there is none, Redis cannot answer or g is lost (then dropped).
func (s *store) lookupName(g *generation, table string, rid uint64) string {
	if s.isClosed() {
		return ""
	}
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := s.name.Exec(ctx, s.client, s.keys, []string{s.prefix, g.token, table, strconv.FormatUint(rid, 10)}).ToArray()
	if s.count(err) != nil {
		return ""
	}
	if len(res) == 0 {
		s.lose(g)
		return ""
	}
	if len(res) != 2 {
		return ""
	}
	n, _ := res[1].ToString() // nil: no such id
	return n
}
