package kvindex

// Two open-addressing tables (linear probing, backward-shift deletion, load
// at most 3/4) whose slots hold entry ids, not keys: the key of a slot is
// read from the entry it names. That keeps the index at 4 to 8 bytes per
// slot instead of a Go map's 20 or more per element, which is how an entry
// stays within 64 bytes all told.

const minTableBits = 10

// blockTable maps a block's local key to the first entry of its chain.
// A slot is fp<<32 | id, fp the key's high 32 bits; a slot's home is a
// function of fp alone, so moving slots never reads the arena.
type blockTable struct {
	m     *memory
	slots []uint64
	bits  uint
	n     int
}

func (t *blockTable) init(m *memory) {
	t.m, t.bits, t.n = m, minTableBits, 0
	t.slots = make([]uint64, 1<<minTableBits)
}

func (t *blockTable) bytes() int64 { return int64(len(t.slots)) * 8 }

func (t *blockTable) home(fp uint32) uint64 {
	return uint64((fp*0x9e3779b1)>>(32-t.bits)) & uint64(len(t.slots)-1)
}

func (t *blockTable) find(k Key) (uint32, bool) {
	fp := uint32(k >> 32)
	mask := uint64(len(t.slots) - 1)
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		if uint32(s>>32) == fp && t.m.e(uint32(s)).key == k {
			return uint32(s), true
		}
	}
}

func (t *blockTable) slot(k Key) uint64 {
	fp := uint32(k >> 32)
	mask := uint64(len(t.slots) - 1)
	for i := t.home(fp); ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return ^uint64(0)
		}
		if uint32(s>>32) == fp && t.m.e(uint32(s)).key == k {
			return i
		}
	}
}

// set points k's slot (which must exist) at id, whose key is k.
func (t *blockTable) set(k Key, id uint32) {
	if i := t.slot(k); i != ^uint64(0) {
		t.slots[i] = uint64(uint32(k>>32))<<32 | uint64(id)
	}
}

// insert adds k (not present) → id.
func (t *blockTable) insert(k Key, id uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	t.put(uint64(uint32(k>>32))<<32 | uint64(id))
	t.n++
}

func (t *blockTable) put(s uint64) {
	mask := uint64(len(t.slots) - 1)
	i := t.home(uint32(s >> 32))
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *blockTable) grow() {
	old := t.slots
	t.bits++
	t.slots = make([]uint64, 1<<t.bits)
	for _, s := range old {
		if s != 0 {
			t.put(s)
		}
	}
}

func (t *blockTable) remove(k Key) {
	i := t.slot(k)
	if i == ^uint64(0) {
		return
	}
	mask := uint64(len(t.slots) - 1)
	// Backward shift: pull later slots of the run back over the hole when
	// their home allows it.
	j := i
	for {
		j = (j + 1) & mask
		s := t.slots[j]
		if s == 0 {
			break
		}
		h := t.home(uint32(s >> 32))
		// s may move to i if i lies cyclically in [h, j).
		if (j-h)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
	if t.bits > minTableBits && t.n*16 < len(t.slots) {
		t.shrink()
	}
}

func (t *blockTable) shrink() {
	old := t.slots
	t.bits--
	t.slots = make([]uint64, 1<<t.bits)
	for _, s := range old {
		if s != 0 {
			t.put(s)
		}
	}
}

// mapTable maps (engine, engine hash) to the first entry of that group.
// A slot is the entry id; its key is read from the entry.
type mapTable struct {
	m     *memory
	slots []uint32
	bits  uint
	n     int
}

func (t *mapTable) init(m *memory) {
	t.m, t.bits, t.n = m, minTableBits, 0
	t.slots = make([]uint32, 1<<minTableBits)
}

func (t *mapTable) bytes() int64 { return int64(len(t.slots)) * 4 }

func (t *mapTable) home(eid uint16, h uint64) uint64 {
	x := (h ^ uint64(eid)*k1) * k0
	return (x >> (64 - t.bits)) & uint64(len(t.slots)-1)
}

func (t *mapTable) homeOf(id uint32) uint64 {
	e := t.m.e(id)
	return t.home(e.engine, e.hash)
}

func (t *mapTable) slot(eid uint16, h uint64) uint64 {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(eid, h); ; i = (i + 1) & mask {
		id := t.slots[i]
		if id == 0 {
			return ^uint64(0)
		}
		if e := t.m.e(id); e.hash == h && e.engine == eid {
			return i
		}
	}
}

func (t *mapTable) find(eid uint16, h uint64) uint32 {
	if i := t.slot(eid, h); i != ^uint64(0) {
		return t.slots[i]
	}
	return 0
}

func (t *mapTable) repoint(eid uint16, h uint64, id uint32) {
	if i := t.slot(eid, h); i != ^uint64(0) {
		t.slots[i] = id
	}
}

func (t *mapTable) insert(eid uint16, h uint64, id uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(t.bits + 1)
	}
	t.put(t.home(eid, h), id)
	t.n++
}

func (t *mapTable) put(i uint64, id uint32) {
	mask := uint64(len(t.slots) - 1)
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = id
}

func (t *mapTable) resize(bits uint) {
	old := t.slots
	t.bits = bits
	t.slots = make([]uint32, 1<<bits)
	for _, id := range old {
		if id != 0 {
			t.put(t.homeOf(id), id)
		}
	}
}

func (t *mapTable) remove(eid uint16, h uint64) {
	i := t.slot(eid, h)
	if i == ^uint64(0) {
		return
	}
	mask := uint64(len(t.slots) - 1)
	j := i
	for {
		j = (j + 1) & mask
		id := t.slots[j]
		if id == 0 {
			break
		}
		hm := t.homeOf(id)
		if (j-hm)&mask >= (j-i)&mask {
			t.slots[i] = id
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
	if t.bits > minTableBits && t.n*16 < len(t.slots) {
		t.resize(t.bits - 1)
	}
}

// each calls f with the first entry of every group of engine eid.
func (t *mapTable) each(eid uint16, f func(id uint32)) {
	for _, id := range t.slots {
		if id != 0 && t.m.e(id).engine == eid {
			f(id)
		}
	}
}
