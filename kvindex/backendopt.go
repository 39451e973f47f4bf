package kvindex

import (
	"io"

	"github.com/zmqguard/zmqguard/kvevents"
)

// The Index finds what a Backend can do beyond the Backend interface
// through the optional interfaces below, by interface assertion, as
// net/http finds an http.Flusher behind a ResponseWriter (issue 40: it
// asserted the concrete *memory before). The in-memory backend (NewMemory)
// has all three. Their methods are unexported, so only this package's
// backends have them: the fast paths and the snapshot work on the
// backend's own tables. Any other Backend is used through the Backend
// interface alone, and cannot be saved to Config.SnapshotFile.

// lockedApplier is a Backend that resolves a batch's parent hashes and
// applies its ops under one write lock: the Index takes the lock once per
// batch (a Score waiting between the two would cost a lock hand-off per
// batch). Without it the Index calls Resolve, then Apply.
type lockedApplier interface {
	lock()
	unlock()
	// resolveLocked is Backend.Resolve, the lock held.
	resolveLocked(engine string, hashes []uint64, keys []Key, found []bool) error
	// applyLocked is Backend.Apply, the lock held.
	applyLocked(engine string, ops []Op) (Counts, error)
}

// holderWalker is a Backend that walks the holders of a chain of keys for
// a Score in its own tables, without Backend.Holders's callback per key.
type holderWalker interface {
	walk(keys []Key, sc *scoreScratch) error
}

// engineRetirer is a Backend that frees a departed engine's number for
// reuse by a later new engine (the in-memory backend numbers engines in
// 16 bits). The Index calls retire in the engine's turn, after the
// departure's OpClear applied.
type engineRetirer interface {
	retire(engine string)
}

// snapshotter is a Backend whose whole state Config.SnapshotFile saves and
// restores (a shared backend, such as Redis, keeps its own state).
type snapshotter interface {
	// writeSnapshot writes the backend's state and st (the Index's) to w
	// in the snapshot format (snapshot.go).
	writeSnapshot(w io.Writer, seed uint64, keys bool, st snapState) error
	// loadSnapshot reads a snapshot of size bytes (0: unknown) from r into
	// a fresh backend and takes its state only when the whole snapshot was
	// read and checked; on an error the backend is unchanged.
	loadSnapshot(r io.Reader, seed uint64, keys bool, size int64) (snapState, error)
	// suspendTrust makes every loaded engine's entries uncertain: an
	// engine with a position in pos gets a bumped epoch, recorded in
	// pending to be given back once its continuity is proven; the others
	// stay uncertain (their count is returned).
	suspendTrust(pos map[string]kvevents.Position, pending map[string]pendingTrust) (uncertain int)
	// restoreTrust gives engine its loaded entries' trust back (its epoch
	// p.old) if nothing changed its epoch since suspendTrust.
	restoreTrust(engine string, p pendingTrust)
}

var (
	_ lockedApplier = (*memory)(nil)
	_ holderWalker  = (*memory)(nil)
	_ snapshotter   = (*memory)(nil)
	_ engineRetirer = (*memory)(nil)
)

func (m *memory) unlock() { m.mu.Unlock() }

func (m *memory) writeSnapshot(w io.Writer, seed uint64, keys bool, st snapState) error {
	return encodeSnapshot(w, m, seed, keys, st)
}

func (m *memory) loadSnapshot(r io.Reader, seed uint64, keys bool, size int64) (snapState, error) {
	fresh := newMemory(m.capacity)
	st, err := readSnapshot(r, fresh, seed, keys, size)
	if err != nil {
		return snapState{}, err
	}
	m.adopt(fresh)
	return st, nil
}

func (m *memory) suspendTrust(pos map[string]kvevents.Position, pending map[string]pendingTrust) (uncertain int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen.Add(1)
	defer m.gen.Add(1)
	for i := range m.engines {
		e := &m.engines[i]
		if e.free {
			continue
		}
		epoch := m.epochOf(uint16(i))
		if _, ok := pos[e.name]; ok {
			// Half the epoch space away: no count of losses since can
			// make the engine's epoch equal bumped again.
			p := pendingTrust{old: epoch, bumped: epoch + 1<<31}
			pending[e.name] = p
			m.setEpoch(uint16(i), p.bumped)
			continue
		}
		uncertain++
		m.setEpoch(uint16(i), epoch+1)
	}
	return uncertain
}

func (m *memory) restoreTrust(engine string, p pendingTrust) {
	m.lock()
	defer m.mu.Unlock()
	if eid, ok := m.engineIDs[engine]; ok && m.epochOf(eid) == p.bumped {
		// Set back: a Score walking meanwhile walks again (gen).
		m.gen.Add(1)
		m.setEpoch(eid, p.old)
		m.gen.Add(1)
	}
}
