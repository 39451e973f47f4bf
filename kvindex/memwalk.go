package kvindex

import (
	"runtime"
	"sync/atomic"
)

// The in-memory backend's read side without the lock (issue 41): a Score
// walks the tables and the arena while a batch applies. The writer
// publishes with atomic stores (table.go, memory.go) and reuses an entry
// only once no Score that may still read it is left (grace, reclaim).

// release puts an unlinked entry in limbo: a Score that began before the
// unlink may still read it (and follow its bnext), so it is reused only
// once those Scores are done (reclaim).
func (m *memory) release(id uint32) {
	m.limbo[m.phase&1] = append(m.limbo[m.phase&1], id)
}

// reclaim frees the entries unlinked in the previous phase, and starts a
// new phase, when no Score of the previous phase is left; it reports
// whether it did. Called with the write lock held, at every batch.
func (m *memory) reclaim() bool {
	prev := (m.phase + 1) & 1 // the previous phase's parity
	if m.grace.active[prev].Load() != 0 {
		return false
	}
	// A Score that began in the current phase began after every unlink
	// of the previous one: it cannot reach those entries.
	for _, id := range m.limbo[prev] {
		*m.e(id) = memEntry{bnext: m.free}
		m.free = id
	}
	m.limbo[prev] = m.limbo[prev][:0]
	if cap(m.limbo[prev]) > 1<<16 {
		m.limbo[prev] = nil
	}
	m.phase++
	m.grace.phase.Store(m.phase)
	return true
}

// grace counts the Scores reading the index without the lock, by the
// parity of the phase they began in. A phase ends (reclaim) once the Scores
// of the phase before it are done, so an entry unlinked in phase p is
// reused only after every Score that began in phase p or earlier ended.
type grace struct {
	phase  atomic.Uint32
	active [2]atomic.Int32
}

// enter counts a Score in the current phase and returns it.
func (g *grace) enter() uint32 {
	for {
		p := g.phase.Load()
		g.active[p&1].Add(1)
		if g.phase.Load() == p {
			return p
		}
		// The phase moved between the two loads: the count may have
		// gone to a phase already checked; count again.
		g.active[p&1].Add(-1)
	}
}

// exit ends a Score entered in phase p.
func (g *grace) exit(p uint32) { g.active[p&1].Add(-1) }

// walkLanes is how many blocks' chains walk follows at once.
const walkLanes = 4

// walkHolder is one entry as walk buffers it.
type walkHolder struct {
	engine  uint16
	medium  uint8
	trusted bool
}

// walkTries is how many times walk runs without the lock before it takes
// it: a walk runs again when an engine number changed meaning during it (a
// departed engine's number reused, an epoch set back), which is rare.
const walkTries = 3

// walk is Holders fused with Score's prefix walk (the in-memory fast path:
// no callback per key). It extends sc's runs with every entry of keys[0],
// keys[1], ... until a key extends no engine's run.
//
// It takes no lock: a batch applying meanwhile does not delay it, nor a
// table's rebuild (readers probe the array they loaded). What it sees of a
// batch under way is the state before or after each of its changes, never
// a freed entry (grace); so an entry it counts certain was held, at the
// engine's current loss epoch, at some moment of the walk, and a block
// removed, or made uncertain, before the Score began is never counted
// certain. Engine numbers keep their meaning for the walk (gen), so the
// names of sc.names are the names of the numbers it saw.
func (m *memory) walk(keys []Key, sc *scoreScratch) error {
	for try := 0; ; try++ {
		locked := try == walkTries
		if locked {
			// Numbers keep changing meaning under the walks: one under
			// the lock, which the writer needs to change them.
			m.lock()
		}
		g0 := m.gen.Load()
		var done bool
		var err error
		if g0&1 == 0 || locked {
			p := m.grace.enter()
			err = m.walkOnce(keys, sc)
			m.grace.exit(p)
			done = locked || m.gen.Load() == g0
		}
		if locked {
			m.mu.Unlock()
		}
		if done || err != nil {
			return err
		}
		sc.reset()
		runtime.Gosched()
	}
}

// view is a walk's access to the arena without the lock.
type view struct {
	m     *memory
	arena []*chunk
}

// e returns entry id, or nil for an id past the arena (closed meanwhile).
func (v *view) e(id uint32) *memEntry {
	c := int(id >> chunkBits)
	if c >= len(v.arena) {
		// A chunk added since the arena was loaded: published before
		// any id in it was.
		v.arena = *v.m.arena.Load()
		if c >= len(v.arena) {
			return nil
		}
	}
	return &v.arena[c][id&(chunkLen-1)]
}

// head returns the first entry of block k's chain in slots, or 0. The
// probe is bounded by the table's size: a reader sees slots of different
// moments, which need not show the empty slot ending a run.
func (v *view) head(slots []uint32, k Key) uint32 {
	hv := uint64(k)
	fp := fpOf(hv)
	mask := len(slots) - 1
	for i, n := int(hv)&mask, 0; n < len(slots); i, n = (i+1)&mask, n+1 {
		s := atomic.LoadUint32(&slots[i])
		if s == 0 {
			return 0
		}
		if s&^idMask == fp && s != tomb {
			if e := v.e(s & idMask); e != nil && e.key == k {
				return s & idMask
			}
		}
	}
	return 0
}

// walkOnce is one walk without the lock, inside a grace section. The
// chains of walkLanes consecutive blocks are followed together, so that
// their pointer chases overlap instead of waiting on one another (a block
// held by a thousand engines is a chain of a thousand entries stored at
// different times, each a cache miss); then the blocks are applied in
// order.
func (m *memory) walkOnce(keys []Key, sc *scoreScratch) error {
	if m.closed.Load() {
		return ErrClosed
	}
	v := view{m: m, arena: *m.arena.Load()}
	slots := *m.blocks.pub.Load()
	// The names of the numbers this walk sees, as of the walk: Score
	// resolves them from this copy, never from a later one in which a
	// number departed and reused names another engine (walk retries when
	// a number changed meaning meanwhile).
	sc.names = m.engineNames.Load()
	if sc.names != nil && len(sc.byEngine) < len(*sc.names) {
		sc.byEngine = append(sc.byEngine, make([]int32, len(*sc.names)-len(sc.byEngine))...)
	}
	for base := 0; base < len(keys); base += walkLanes {
		n := min(walkLanes, len(keys)-base)
		var cur [walkLanes]uint32
		for l := 0; l < n; l++ {
			cur[l] = v.head(slots, keys[base+l])
			sc.lanes[l] = sc.lanes[l][:0]
		}
		if m.midWalk != nil {
			m.midWalk(base)
		}
		for live := n; live > 0; {
			live = 0
			for l := 0; l < n; l++ {
				if id := cur[l]; id != 0 {
					e := v.e(id)
					if e == nil {
						cur[l] = 0
						continue
					}
					// The entry's epoch before the engine's: see
					// walk for why it counts certain only what was.
					ep := atomic.LoadUint32(&e.epoch)
					sc.lanes[l] = append(sc.lanes[l], walkHolder{engine: e.engine, medium: e.medium,
						trusted: ep == m.epochOf(e.engine)})
					cur[l] = atomic.LoadUint32(&e.bnext)
					live++
				}
			}
		}
		for l := 0; l < n; l++ {
			i := int32(base + l)
			ext := false
			for _, h := range sc.lanes[l] {
				if sc.step(i, uint32(h.engine), uint16(h.medium), h.trusted) {
					ext = true
				}
			}
			if !ext {
				return nil
			}
		}
	}
	return nil
}
