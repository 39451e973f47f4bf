package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/redisstore"
)

// kv-index --share-ingest (issue 41): replicas on one Redis index split the
// engines between them by the writer leases (redisstore.Rebalance), each
// subscribing only to the engines it holds, so that ingest grows with the
// replicas. Every round (every --redis-lease-ttl/3) a replica heartbeats,
// renews its leases, takes free ones up to its quota (a dead peer's, once
// its lease expired; their entries become uncertain: no continuity), and
// hands back the engines over its quota when peers joined: it stops
// following the engine first (its handler drops the engine's updates from
// then on, after the ones under way returned), then releases the lease, so
// two replicas never write one engine and none is held by a replica that
// does not follow it.

// kvShareUsage is --share-ingest's help.
const kvShareUsage = "split the --connect engines with the other kv-index replicas of this --redis index by writer leases: follow only the engines this replica holds, take a stopped replica's over, hand engines back when replicas join (implies --redis-lease)"

// kvShareStats is /stats' "share" object.
type kvShareStats struct {
	Writer     string   `json:"writer"`
	Members    int      `json:"members"`
	Quota      int      `json:"quota"`
	Following  []string `json:"following"`
	Rounds     uint64   `json:"rounds"`
	Failures   uint64   `json:"failures"`
	Taken      uint64   `json:"taken"`
	HandedBack uint64   `json:"handed_back"`
}

// kvShare follows the engines this replica holds.
type kvShare struct {
	be     kvindex.Backend
	sub    *kvevents.Subscriber
	x      *kvindex.Index
	logger *slog.Logger
	writer string
	every  time.Duration
	srcs   map[string]kvevents.Source
	names  []string

	// mu is held for reading by handle across an update's apply, for
	// writing when an engine stops being followed.
	mu     sync.RWMutex
	follow map[string]bool
	split  redisstore.Split

	rounds, failures, taken, handed atomic.Uint64
}

// checkShare checks --share-ingest against the other flags.
func (fl *kvIndexFlags) checkShare() error {
	if !fl.share {
		return nil
	}
	if fl.redisURL == "" {
		return usagef("--share-ingest needs --redis (the replicas share its index and leases)")
	}
	if fl.disc.any() {
		return usagef("--share-ingest follows the --connect engines; --sources-dns and --sources-file are not supported with it yet")
	}
	for _, s := range fl.srcs.list {
		if s.Bind || s.FanIn {
			return usagef("--share-ingest follows --connect engines only: %s is a --bind or --fan-in endpoint (its engine is not named the same on every replica)", s.Live)
		}
	}
	if len(fl.srcs.list) == 0 {
		return usagef("--share-ingest needs the engines to split: --connect ADDR (repeatable, the same list on every replica)")
	}
	return nil
}

// newKVShare returns --share-ingest's state (nil without on) for the
// engines srcs (each replica lists the same), writer this replica's writer
// id, ttl the lease TTL (0: redisstore's default, 10s).
func newKVShare(on bool, be kvindex.Backend, srcs []kvevents.Source, writer string, ttl time.Duration, logger *slog.Logger) *kvShare {
	if !on {
		return nil
	}
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	k := &kvShare{be: be, logger: logger, writer: writer, every: ttl / 3,
		srcs: map[string]kvevents.Source{}, follow: map[string]bool{}}
	for _, s := range srcs {
		k.srcs[s.Name] = s
		k.names = append(k.names, s.Name)
	}
	return k
}

// initial returns the sources to follow from the start: all of srcs
// without --share-ingest (k nil), none with it (followed as the leases
// say, by start).
func (k *kvShare) initial(srcs []kvevents.Source) []kvevents.Source {
	if k == nil {
		return srcs
	}
	return nil
}

// wrap returns h behind the gate of enter (h itself without
// --share-ingest).
func (k *kvShare) wrap(h func(context.Context, kvevents.Update) error) func(context.Context, kvevents.Update) error {
	if k == nil {
		return h
	}
	return func(ctx context.Context, u kvevents.Update) error {
		done, ok := k.enter(u)
		if !ok {
			return nil
		}
		defer done()
		return h(ctx, u)
	}
}

// enter is the handler's gate: an update of an engine not followed (handed
// back, a late delivery) is dropped, and so is every UpdateDeparted (in
// this mode only handing an engine back removes a source: the engine did
// not leave). done ends the update's apply.
func (k *kvShare) enter(u kvevents.Update) (done func(), ok bool) {
	if u.Kind == kvevents.UpdateDeparted {
		return nil, false
	}
	k.mu.RLock()
	if !k.follow[u.Source] {
		k.mu.RUnlock()
		return nil, false
	}
	return k.mu.RUnlock, true
}

// start does the first round at once and the next ones every k.every in
// a goroutine, until ctx ends; wait waits for it to end (having left the
// membership: its engines released for the others to take at once). On a
// nil k (no --share-ingest) it does nothing.
func (k *kvShare) start(ctx context.Context, sub *kvevents.Subscriber, x *kvindex.Index) (wait func()) {
	if k == nil {
		return func() {}
	}
	k.sub, k.x = sub, x
	k.round()
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.run(ctx)
	}()
	return func() { <-done }
}

// run does a round every k.every until ctx ends, then leaves.
func (k *kvShare) run(ctx context.Context) {
	t := time.NewTicker(k.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := redisstore.Leave(k.be); err != nil {
				k.logger.Warn("kv-index share: leaving failed; the others take this replica's engines when its leases expire", "err", err)
			}
			return
		case <-t.C:
			k.round()
		}
	}
}

// round is one Rebalance: hand back what is over the quota or no longer
// held, follow what is held and not followed yet.
func (k *kvShare) round() {
	k.rounds.Add(1)
	sp, err := redisstore.Rebalance(k.be, k.names)
	if err != nil {
		if k.failures.Add(1) == 1 || k.failures.Load()%100 == 0 {
			k.logger.Warn("kv-index share: rebalance failed; the engines followed stay followed", "err", err, "failures", k.failures.Load())
		}
		return
	}
	k.mu.Lock()
	k.split = sp
	var stop []string
	for name := range k.follow {
		if !slices.Contains(sp.Held, name) || slices.Contains(sp.Excess, name) {
			stop = append(stop, name)
		}
	}
	k.mu.Unlock()
	slices.Sort(stop)
	for _, name := range stop {
		k.stop(name, slices.Contains(sp.Held, name))
	}
	for _, name := range sp.Excess {
		if !slices.Contains(stop, name) {
			if err := redisstore.Release(k.be, name); err != nil {
				k.logger.Warn("kv-index share: releasing an engine's lease failed", "source", name, "err", err)
			}
		}
	}
	for _, name := range sp.Held {
		k.mu.RLock()
		followed := k.follow[name]
		k.mu.RUnlock()
		if !followed && !slices.Contains(sp.Excess, name) {
			k.follow1(name, slices.Contains(sp.Taken, name), sp)
		}
	}
}

// stop stops following name: no update of it is applied after the gate
// closes (the ones under way are waited for), then the source goes and,
// when held, the lease is released.
func (k *kvShare) stop(name string, held bool) {
	k.mu.Lock()
	delete(k.follow, name)
	k.mu.Unlock()
	if err := k.sub.Remove(name); err != nil {
		k.logger.Warn("kv-index share: removing a source failed", "source", name, "err", err)
	}
	if err := redisstore.Release(k.be, name); err != nil {
		k.logger.Warn("kv-index share: releasing an engine's lease failed", "source", name, "err", err)
	}
	k.handed.Add(1)
	k.logger.Info("kv-index share: engine handed back", "source", name, "lease_held", held)
}

// follow1 follows name, resuming from the position the shared store keeps
// (the previous writer's: the subscriber proves the continuity or makes
// the entries uncertain); without one, the engine's entries are made
// uncertain first (taking a known engine's lease already did).
func (k *kvShare) follow1(name string, taken bool, sp redisstore.Split) {
	src := k.srcs[name]
	var pos map[string]kvevents.Position
	if ps, ok := k.be.(kvindex.PositionStore); ok {
		var err error
		if pos, err = ps.Positions(); err != nil {
			k.logger.Warn("kv-index share: reading the positions failed; the engine starts from what its publisher holds", "source", name, "err", err)
		}
	}
	if p, ok := pos[name]; ok {
		src.Resume = &p
	} else if err := k.x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: name}); err != nil {
		k.logger.Warn("kv-index: making a source's kept entries uncertain failed", "source", name, "err", err)
	}
	k.mu.Lock()
	k.follow[name] = true
	k.mu.Unlock()
	if err := k.sub.Add(src); err != nil {
		k.logger.Warn("kv-index share: following an engine failed; its lease is released", "source", name, "err", err)
		k.mu.Lock()
		delete(k.follow, name)
		k.mu.Unlock()
		redisstore.Release(k.be, name)
		return
	}
	k.taken.Add(1)
	var resume any
	if src.Resume != nil {
		resume = src.Resume.Seq
	}
	k.logger.Info("kv-index share: following", "source", name, "endpoint", k.sub.Endpoint(name), "taken_over", taken,
		"resume_after_seq", resume, "members", sp.Members, "quota", sp.Quota)
}

// stats is /stats' "share" object (nil without --share-ingest).
func (k *kvShare) stats() *kvShareStats {
	if k == nil {
		return nil
	}
	k.mu.RLock()
	defer k.mu.RUnlock()
	st := &kvShareStats{Writer: k.writer, Members: k.split.Members, Quota: k.split.Quota, Following: []string{},
		Rounds: k.rounds.Load(), Failures: k.failures.Load(), Taken: k.taken.Load(), HandedBack: k.handed.Load()}
	for name := range k.follow {
		st.Following = append(st.Following, name)
	}
	slices.Sort(st.Following)
	return st
}
