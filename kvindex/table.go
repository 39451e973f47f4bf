package kvindex

import (
	"math/bits"
	"sync/atomic"
)

// Two open-addressing tables (linear probing, tombstones, load at most 3/4)
// whose 4-byte slots hold an entry id (26 bits) and 6 bits of
// the key's hash; the key itself is read from the entry a slot names, and
// only when those 6 bits match (1 probe in 64 otherwise). A Go map would
// take 20 or more bytes per element; these take 5.3 to 10.7, which is how
// an entry stays within 64 bytes all told.
//
// A Score reads the tables without the index's lock (memory.go, view):
// every slot a reader may see is written with an atomic store, and a
// resize builds a new array and publishes it (pub), so a reader keeps
// probing the array it loaded, as of the resize, while the writer goes on
// in the new one.

const (
	minTableBits = 10
	idBits       = 26
	idMask       = 1<<idBits - 1
	// maxCapacity is the largest entry capacity of a memory backend
	// (entry ids are 26 bits; one more entry than the capacity exists
	// while the oldest is evicted).
	maxCapacity = idMask - 2
	// tomb marks a deleted slot: probes go on past it, inserts reuse it.
	// Deleting needs no arena reads (a backward shift would read the key
	// of every slot it moves).
	tomb = idMask
)

// idTable is one table. byKey: the block table (a block's local key → the
// first entry of its chain); else the mapping table ((engine, engine
// hash) → the first entry of that group).
type idTable struct {
	m     *memory
	byKey bool
	slots []uint32                 // the writer's (under the write lock)
	pub   atomic.Pointer[[]uint32] // the same array, for readers
	n     int                      // live slots
	dead  int                      // tombstones
}

func (t *idTable) init(m *memory, byKey bool) {
	t.m, t.byKey, t.n, t.dead = m, byKey, 0, 0
	t.setSlots(make([]uint32, 1<<minTableBits))
}

// setSlots makes s the table's array, for the writer and for readers.
func (t *idTable) setSlots(s []uint32) {
	t.slots = s
	t.pub.Store(&s)
}

// adopt takes f's table (f is not shared).
func (t *idTable) adopt(f *idTable, m *memory) {
	t.m, t.byKey, t.n, t.dead = m, f.byKey, f.n, f.dead
	t.setSlots(f.slots)
}

func (t *idTable) bytes() int64 { return int64(len(t.slots)) * 4 }

// presize grows the table to hold n slots without a resize.
func (t *idTable) presize(n int) {
	want := 1 << minTableBits
	for want*3 < (n+1)*4 {
		want *= 2
	}
	if want > len(t.slots) {
		t.resize(want)
	}
}

// mapHash mixes (engine, engine hash) with the folded 64×64→128-bit
// multiply (the local-key hash's mixer).
func mapHash(eid uint16, h uint64) uint64 {
	hi, lo := bits.Mul64(h^0x8ebc6af09c88c6e3, uint64(eid)^0x589965cc75374cc3)
	return hi ^ lo
}

// hashOf is the hash of the entry a slot names.
func (t *idTable) hashOf(id uint32) uint64 {
	e := t.m.e(id)
	if t.byKey {
		return uint64(e.key)
	}
	return mapHash(e.engine, e.hash)
}

func fpOf(hv uint64) uint32 { return uint32(hv>>58) << idBits }

// findKey returns the slot of block key k, or -1.
func (t *idTable) findKey(k Key) int {
	hv := uint64(k)
	fp := fpOf(hv)
	mask := len(t.slots) - 1
	for i := int(hv) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return -1
		}
		if s&^idMask == fp && s != tomb && t.m.e(s&idMask).key == k {
			return i
		}
	}
}

// findMap returns the slot of (eid, h), or -1.
func (t *idTable) findMap(eid uint16, h uint64) int {
	hv := mapHash(eid, h)
	fp := fpOf(hv)
	mask := len(t.slots) - 1
	for i := int(hv) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return -1
		}
		if s&^idMask == fp && s != tomb {
			if e := t.m.e(s & idMask); e.hash == h && e.engine == eid {
				return i
			}
		}
	}
}

func (t *idTable) insert(hv uint64, id uint32) {
	if (t.n+t.dead+1)*4 > len(t.slots)*3 {
		if (t.n+1)*2 > len(t.slots) {
			t.resize(len(t.slots) * 2)
		} else {
			t.resize(len(t.slots)) // clear the tombstones
		}
	}
	t.put(hv, id)
	t.n++
}

func (t *idTable) put(hv uint64, id uint32) {
	i := freeSlot(t.slots, hv)
	if t.slots[i] == tomb {
		t.dead--
	}
	atomic.StoreUint32(&t.slots[i], fpOf(hv)|id)
}

// freeSlot returns the first empty or tombstone slot of hv's run.
func freeSlot(slots []uint32, hv uint64) int {
	mask := len(slots) - 1
	i := int(hv) & mask
	for slots[i] != 0 && slots[i] != tomb {
		i = (i + 1) & mask
	}
	return i
}

// resize rebuilds the table into a new array of n slots, published when
// complete: readers meanwhile probe the old one, which the writer no
// longer changes.
func (t *idTable) resize(n int) {
	old := t.slots
	slots := make([]uint32, n)
	for _, s := range old {
		if s != 0 && s != tomb {
			hv := t.hashOf(s & idMask)
			slots[freeSlot(slots, hv)] = fpOf(hv) | s&idMask
		}
	}
	t.dead = 0
	t.setSlots(slots)
}

// removeAt empties slot i.
func (t *idTable) removeAt(i int) {
	mask := len(t.slots) - 1
	if t.slots[(i+1)&mask] == 0 {
		atomic.StoreUint32(&t.slots[i], 0) // the end of a run needs no tombstone
	} else {
		atomic.StoreUint32(&t.slots[i], tomb)
		t.dead++
	}
	t.n--
	if len(t.slots) > 1<<minTableBits && t.n*16 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// setAt points slot i at id (of the same key).
func (t *idTable) setAt(i int, id uint32) { atomic.StoreUint32(&t.slots[i], t.slots[i]&^idMask|id) }

// blockTable maps a block's key to the first entry of its chain.
type blockTable struct{ idTable }

func (t *blockTable) init(m *memory) { t.idTable.init(m, true) }

func (t *blockTable) find(k Key) (uint32, bool) {
	if i := t.findKey(k); i >= 0 {
		return t.slots[i] & idMask, true
	}
	return 0, false
}

func (t *blockTable) set(k Key, id uint32) {
	if i := t.findKey(k); i >= 0 {
		t.setAt(i, id)
	}
}

func (t *blockTable) insert(k Key, id uint32) { t.idTable.insert(uint64(k), id) }

func (t *blockTable) remove(k Key) {
	if i := t.findKey(k); i >= 0 {
		t.removeAt(i)
	}
}

// mapTable maps (engine, engine hash) to the first entry of that group.
type mapTable struct{ idTable }

func (t *mapTable) init(m *memory) { t.idTable.init(m, false) }

func (t *mapTable) find(eid uint16, h uint64) uint32 {
	if i := t.findMap(eid, h); i >= 0 {
		return t.slots[i] & idMask
	}
	return 0
}

func (t *mapTable) repoint(eid uint16, h uint64, id uint32) {
	if i := t.findMap(eid, h); i >= 0 {
		t.setAt(i, id)
	}
}

func (t *mapTable) insert(eid uint16, h uint64, id uint32) { t.idTable.insert(mapHash(eid, h), id) }

func (t *mapTable) remove(eid uint16, h uint64) {
	if i := t.findMap(eid, h); i >= 0 {
		t.removeAt(i)
	}
}

// each calls f with the first entry of every group of engine eid.
func (t *mapTable) each(eid uint16, f func(id uint32)) {
	for _, s := range t.slots {
		if s != 0 && s != tomb && t.m.e(s&idMask).engine == eid {
			f(s & idMask)
		}
	}
}
