package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/zmqguard/zmqguard/kvindex"
)

// Shared ingest (issue 41): replicas with writer ids split the engines by
// their leases. Each Rebalance call heartbeats the replica in a membership
// set ("members", a sorted set scored by expiry in Redis's own clock),
// computes its quota from the live members, renews the leases it holds and
// takes free ones up to the quota; what it holds over the quota it hands
// back with Release after it stopped following the engine. See the package
// doc ("Shared ingest").

// membersScript heartbeats writer ARGV[2] under prefix ARGV[1] for ARGV[3]
// ms ("0": it leaves), drops the members whose heartbeat expired, and
// returns the live members, sorted.
const membersScript = `
local K = ARGV[1] .. 'members'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', K, '-inf', now)
if ARGV[3] == '0' then
  redis.call('ZREM', K, ARGV[2])
else
  redis.call('ZADD', K, now + tonumber(ARGV[3]), ARGV[2])
end
local m = redis.call('ZRANGE', K, 0, -1)
table.sort(m)
return m
`

// leaseScript, in generation ARGV[2], renews writer ARGV[3]'s leases (for
// ARGV[4] ms) of the engines ARGV[6..] it holds and takes at most ARGV[5]
// free ones, in order. Returns {1, eid, code per engine} (an empty array
// when the generation is lost): code 0 another writer's or left free (eid
// 0 when the engine is not known), 1 held, 2 taken (a new engine), 3 taken
// over (a known engine: its entries are made uncertain first, as Apply's
// takeover does, whether or not it has any).
const leaseScript = `
local P = ARGV[1]
if redis.call('GET', P .. 'gen') ~= ARGV[2] then return {} end
local writer, ttl, want = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local EP, ST = P .. 'ep', P .. 'st'
local out = {1}
for i = 6, #ARGV do
  local name = ARGV[i]
  local eid = redis.call('HGET', P .. 'eid', name)
  local known = eid ~= false
  local code = 0
  if not eid and want > 0 then
    eid = tostring(redis.call('HINCRBY', ST, 'engines', 1))
    redis.call('HSET', P .. 'eid', name, eid)
    redis.call('HSET', P .. 'ename', eid, name)
    redis.call('HSET', EP, eid, 0)
    redis.call('INCR', P .. 'epv')
  end
  if eid then
    local own = P .. 'own:' .. eid
    local cur = redis.call('GET', own)
    if cur == writer then
      redis.call('PEXPIRE', own, ttl)
      code = 1
    elseif not cur and want > 0 then
      redis.call('SET', own, writer, 'PX', ttl)
      want = want - 1
      code = 2
      if known then
        redis.call('HINCRBY', EP, eid, 1)
        redis.call('INCR', P .. 'epv')
        redis.call('HINCRBY', ST, 'takeovers', 1)
        code = 3
      end
    end
  end
  out[#out + 1] = tonumber(eid or '0')
  out[#out + 1] = code
end
return out
`

// leaseLua runs leaseScript.
var leaseLua = rueidis.NewLuaScript(leaseScript)

// shareGate is a store's side of shared ingest: once Rebalance ran, Apply
// writes only the engines Rebalance gave the store, so that an engine
// handed back (Release) is never taken again by a late batch's Apply.
type shareGate struct {
	on   atomic.Bool
	mu   sync.RWMutex // held for reading across a gated Apply
	held map[string]bool
}

// enter reports whether the store may apply engine's batch; when it may,
// done must be called once the Apply is over.
func (g *shareGate) enter(engine string) (done func(), ok bool) {
	if !g.on.Load() {
		return func() {}, true
	}
	g.mu.RLock()
	if !g.held[engine] {
		g.mu.RUnlock()
		return nil, false
	}
	return g.mu.RUnlock, true
}

// admit is Apply's gate: false (counted in Stats.NotWriter) when shared
// ingest runs and engine is not one this store holds.
func (s *store) admit(engine string) (done func(), ok bool) {
	done, ok = s.share.enter(engine)
	if !ok {
		s.notWriter.Add(1)
	}
	return done, ok
}

// Split is one replica's share of the engines, as Rebalance found it.
type Split struct {
	// Members is the number of live replicas (this one included); Quota
	// the number of engines this one should hold.
	Members int `json:"members"`
	Quota   int `json:"quota"`
	// Held lists the engines whose lease this replica holds (in the order
	// given), Taken among them those this call took (their entries, when
	// the engine was known, were made uncertain), Excess those it should
	// hand back: stop following each, then Release it.
	Held   []string `json:"held"`
	Taken  []string `json:"taken"`
	Excess []string `json:"excess"`
}

// shareStores returns the stores of a backend New made with a WriterID.
func shareStores(b kvindex.Backend, call string) ([]*store, func(string) *store, error) {
	switch s := b.(type) {
	case *store:
		if s.cfg.WriterID == "" {
			return nil, nil, fmt.Errorf("redisstore: %s needs Config.WriterID", call)
		}
		return []*store{s}, func(string) *store { return s }, nil
	case *sharded:
		if s.shards[0].cfg.WriterID == "" {
			return nil, nil, fmt.Errorf("redisstore: %s needs Config.WriterID", call)
		}
		return s.shards, s.shard, nil
	}
	return nil, nil, fmt.Errorf("redisstore: %s: the backend is not one New made", call)
}

// Rebalance is one round of shared ingest for a store New made with a
// WriterID (on a sharded store, membership lives in shard 0). engines are
// every engine the replicas follow (each replica should list the same);
// the replica's quota is len(engines)/members, one more for the first
// len(engines)%members members by writer id. It heartbeats the replica
// (for LeaseTTL), renews the leases it holds, takes free leases up to its
// quota (a known engine's entries are made uncertain when taken: this
// replica has no continuity with what was applied before), and reports
// what to hand back: the engines held over the quota, and engines held but
// no longer listed. From the first call on, the store's Apply writes only
// the engines it holds. Call it every LeaseTTL/3 or so.
func Rebalance(b kvindex.Backend, engines []string) (Split, error) {
	var sp Split
	stores, shardOf, err := shareStores(b, "Rebalance")
	if err != nil {
		return sp, err
	}
	s0 := stores[0]
	if s0.isClosed() {
		return sp, kvindex.ErrClosed
	}
	for _, s := range stores {
		s.share.on.Store(true)
	}
	members, err := s0.heartbeat(false)
	if err != nil {
		return sp, err
	}
	var list []string
	seen := map[string]bool{}
	for _, e := range engines {
		if !seen[e] {
			seen[e] = true
			list = append(list, e)
		}
	}
	sp.Members = max(len(members), 1)
	rank := max(slices.Index(members, s0.cfg.WriterID), 0)
	sp.Quota = len(list) / sp.Members
	if rank < len(list)%sp.Members {
		sp.Quota++
	}
	byStore := map[*store][]string{}
	for _, e := range list {
		s := shardOf(e)
		byStore[s] = append(byStore[s], e)
	}
	held, taken := map[string]bool{}, map[string]bool{}
	// First renew and count what is held, then take free leases up to the
	// quota.
	for _, s := range stores {
		if len(byStore[s]) > 0 {
			if _, err := s.leases(byStore[s], 0, held, taken); err != nil {
				return sp, err
			}
		}
	}
	want := sp.Quota - len(held)
	for _, s := range stores {
		if want <= 0 {
			break
		}
		if len(byStore[s]) > 0 {
			n, err := s.leases(byStore[s], want, held, taken)
			if err != nil {
				return sp, err
			}
			want -= n
		}
	}
	for _, e := range list {
		if held[e] {
			sp.Held = append(sp.Held, e)
			if taken[e] {
				sp.Taken = append(sp.Taken, e)
			}
		}
	}
	if over := len(sp.Held) - sp.Quota; over > 0 {
		sp.Excess = append(sp.Excess, sp.Held[len(sp.Held)-over:]...)
	}
	for _, s := range stores {
		s.share.mu.RLock()
		for e := range s.share.held {
			if !seen[e] {
				sp.Excess = append(sp.Excess, e)
				sp.Held = append(sp.Held, e)
			}
		}
		s.share.mu.RUnlock()
	}
	return sp, nil
}

// heartbeat runs membersScript for the store's writer; leave removes it.
func (s *store) heartbeat(leave bool) ([]string, error) {
	ttl := strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10)
	if leave {
		ttl = "0"
	}
	ctx, cancel := s.ctx()
	defer cancel()
	m, err := s.client.Do(ctx, s.client.B().Eval().Script(membersScript).Numkeys(1).Key(s.prefix+"members").
		Arg(s.prefix, s.cfg.WriterID, ttl).Build()).AsStrSlice()
	if err := s.count(err); err != nil {
		return nil, fmt.Errorf("redisstore: membership %smembers: %w", s.prefix, err)
	}
	return m, nil
}

// leases runs leaseScript for engines (all of this store) taking at most
// want; it records the engines held in held (and the store's gate and
// lease table), those taken in taken, and drops from the gate an engine
// whose lease another writer now holds. It returns how many it took.
func (s *store) leases(engines []string, want int, held, taken map[string]bool) (int, error) {
	n := 0
	err := s.run("Rebalance", func(g *generation) (bool, error) {
		args := append([]string{s.prefix, g.token, s.cfg.WriterID, strconv.FormatInt(s.cfg.LeaseTTL.Milliseconds(), 10),
			strconv.Itoa(want)}, engines...)
		ctx, cancel := s.ctx()
		defer cancel()
		res, err := leaseLua.Exec(ctx, s.client, s.keys, args).AsIntSlice()
		if err := s.count(err); err != nil {
			return false, fmt.Errorf("redisstore: Rebalance: %w", err)
		}
		if len(res) == 0 {
			return true, nil
		}
		if len(res) != 1+2*len(engines) {
			return false, fmt.Errorf("redisstore: Rebalance: %d answers for %d engines", len(res)-1, len(engines))
		}
		s.share.mu.Lock()
		defer s.share.mu.Unlock()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.share.held == nil {
			s.share.held = map[string]bool{}
		}
		for i, e := range engines {
			eid, code := res[1+2*i], res[2+2*i]
			if eid < 0 || eid >= 1<<31 || code < 0 || code > 3 {
				return false, fmt.Errorf("redisstore: Rebalance: engine %.80q: id %d, code %d", e, eid, code)
			}
			if code == 0 {
				// Not this writer's (any more): a late batch must not
				// write it.
				delete(s.share.held, e)
				if eid > 0 && s.gen == g {
					delete(s.leased, uint32(eid))
				}
				continue
			}
			held[e] = true
			s.share.held[e] = true
			if s.gen == g {
				s.leased[uint32(eid)] = true
			}
			if code >= 2 {
				taken[e] = true
				n++
				if code == 3 {
					s.takeovers.Add(1)
				}
			}
		}
		return false, nil
	})
	return n, err
}

// Release hands engine back after Rebalance listed it in Split.Excess (or
// once the replica no longer follows it): from its return on, the store
// writes nothing of the engine (an Apply under way is waited for; a later
// one is refused and counted in Stats.NotWriter), and its lease is
// released in Redis so that another replica may take it at once.
func Release(b kvindex.Backend, engine string) error {
	_, shardOf, err := shareStores(b, "Release")
	if err != nil {
		return err
	}
	s := shardOf(engine)
	s.share.mu.Lock()
	delete(s.share.held, engine)
	s.share.mu.Unlock()
	return s.RetireEngine(engine)
}

// Leave releases every engine the store holds (as Release) and takes the
// replica out of the membership, so that the others share its engines at
// once instead of after LeaseTTL. Call it before Close when the replica
// stops.
func Leave(b kvindex.Backend) error {
	stores, _, err := shareStores(b, "Leave")
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range stores {
		s.share.on.Store(true)
		s.share.mu.Lock()
		var list []string
		for e := range s.share.held {
			list = append(list, e)
		}
		clear(s.share.held)
		s.share.mu.Unlock()
		for _, e := range list {
			errs = append(errs, s.RetireEngine(e))
		}
	}
	if _, err := stores[0].heartbeat(true); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
