package kvindex

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
)

// defaultCapacity is the entry capacity of a memory backend made with
// capacity 0: about 256 MiB of index at ≤ 64 bytes per entry.
const defaultCapacity = 1 << 22

// maxEngines is how many live engines one memory backend tracks (16-bit
// numbers; a departed engine's number is reused by a later new engine).
const maxEngines = 1 << 16

// memEntry is one (block, engine, medium, group) entry: 40 bytes. A Score
// reads entries without the lock (view): bnext and epoch, which the writer
// changes while the entry is reachable, are written with atomic stores;
// the other fields a reader reads are set before the entry is published
// (by an atomic store of a slot or of a bnext) and kept until it is
// reused, which waits for the readers that may still see it (grace).
type memEntry struct {
	key          Key
	hash         uint64 // the engine's hash of the block
	bnext, bprev uint32 // the block's chain of entries (0: none)
	fnext, fprev uint32 // store order, oldest first (eviction)
	epoch        uint32 // the engine's loss epoch when last stored
	engine       uint16
	medium       uint8
	group        uint8
}

const chunkBits = 16
const chunkLen = 1 << chunkBits

// chunk is chunkLen entries of the arena.
type chunk [chunkLen]memEntry

type memEngine struct {
	name string
	n    int64 // entries
	free bool  // a departed engine's number, on freeEngines for reuse
}

// epochPage is the loss epochs of 256 engine numbers.
type epochPage [256]atomic.Uint32

// memory is the in-memory Backend.
type memory struct {
	mu       sync.RWMutex
	capacity int64

	chunks []*chunk                 // entry id i is chunks[i>>chunkBits][i&(chunkLen-1)]; id 0 is nil
	arena  atomic.Pointer[[]*chunk] // chunks, for readers (view)
	next   uint32                   // next never-used id
	free   uint32                   // free list through bnext
	head   uint32                   // oldest entry
	tail   uint32                   // newest entry

	// Reclamation (grace): an entry unlinked in phase p waits in limbo[p&1]
	// until no Score that began in phase p is left.
	grace grace
	phase uint32 // grace.phase, the writer's copy
	limbo [2][]uint32

	blocks blockTable // key → first entry of the block's chain
	maps   mapTable   // (engine, hash) → first entry of that group

	engines []memEngine
	// The engines' loss epochs, by number (epochOf): read by Scores
	// without the lock.
	epochs [maxEngines / 256]atomic.Pointer[epochPage]
	// gen is odd while the writer changes what a number means (a number
	// freed or reused, an epoch set back): a Score that saw it change
	// walks again (walk).
	gen         atomic.Uint64
	engineIDs   map[string]uint16 // the live engines
	freeEngines []uint16          // numbers of departed engines, for reuse (retire)
	mediums     []string
	mediumIDs   map[string]uint8
	// Copies of the names, replaced (never changed) when a name is added
	// or an engine number freed or reused, so EngineName and MediumName
	// need no lock, and a Score resolves the numbers it walked with the
	// copy of its walk (walk): a number reused since names its new engine
	// in later copies only.
	engineNames, mediumNames atomic.Pointer[[]string]

	entries, nblocks, mappings int64
	evicted                    uint64
	closed                     atomic.Bool

	sink uint32 // what touch loaded, so that the loads stay

	midApply func()         // tests only: runs in applyLocked after its first op
	midWalk  func(base int) // tests only: runs in walkOnce once the heads of keys[base:] are found
}

// NewMemory returns the in-memory Backend, holding at most capacity
// (block, engine, medium, group) entries: past it the oldest entries (by
// first store) are evicted, and counted. Zero means 4,194,304 (about
// 256 MiB at ≤ 64 bytes per entry); at most 67,108,861. It tracks at most
// 65,536 engines at once: a departed engine's (kvevents.UpdateDeparted)
// number goes to the next new engine name; past the cap a new engine is
// refused (counted in Stats.Errors, logged once as a WARN).
func NewMemory(capacity int) (Backend, error) {
	if capacity == 0 {
		capacity = defaultCapacity
	}
	if capacity < 0 || capacity > maxCapacity {
		return nil, fmt.Errorf("kvindex: memory capacity %d out of range 1..%d", capacity, maxCapacity)
	}
	return newMemory(int64(capacity)), nil
}

func newMemory(capacity int64) *memory {
	m := &memory{capacity: capacity, engineIDs: map[string]uint16{}, mediumIDs: map[string]uint8{}, next: 1}
	var none []*chunk
	m.arena.Store(&none)
	m.blocks.init(m)
	m.maps.init(m)
	return m
}

func (m *memory) e(id uint32) *memEntry {
	return &m.chunks[id>>chunkBits][id&(chunkLen-1)]
}

// epochOf returns engine eid's loss epoch.
func (m *memory) epochOf(eid uint16) uint32 { return m.epochs[eid>>8].Load()[eid&255].Load() }

// setEpoch sets engine eid's loss epoch.
func (m *memory) setEpoch(eid uint16, epoch uint32) { m.epochs[eid>>8].Load()[eid&255].Store(epoch) }

func (m *memory) alloc() uint32 {
	if m.free == 0 && m.next >= tomb {
		// Every id is live or in limbo (a capacity near the largest and
		// Scores slow to finish): wait for the Scores, which end.
		for m.free == 0 {
			if !m.reclaim() {
				runtime.Gosched()
			}
		}
	}
	if id := m.free; id != 0 {
		m.free = m.e(id).bnext
		*m.e(id) = memEntry{}
		return id
	}
	id := m.next
	if int(id>>chunkBits) == len(m.chunks) {
		m.chunks = append(m.chunks, new(chunk))
		cs := m.chunks
		m.arena.Store(&cs)
	}
	m.next++
	return id
}

func (m *memory) engineID(name string, create bool) (uint16, bool, error) {
	if id, ok := m.engineIDs[name]; ok {
		return id, true, nil
	}
	if !create {
		return 0, false, nil
	}
	if n := len(m.freeEngines); n > 0 {
		id := m.freeEngines[n-1]
		m.freeEngines = m.freeEngines[:n-1]
		m.gen.Add(1)
		m.engines[id] = memEngine{name: name}
		m.setEpoch(id, 0)
		m.engineIDs[name] = id
		publishAt(&m.engineNames, int(id), name)
		m.gen.Add(1)
		return id, true, nil
	}
	if len(m.engines) >= maxEngines {
		return 0, false, fmt.Errorf("%w: %d engines", errTooManyEngines, maxEngines)
	}
	id := uint16(len(m.engines))
	if m.epochs[id>>8].Load() == nil {
		m.epochs[id>>8].Store(new(epochPage))
	}
	m.engines = append(m.engines, memEngine{name: name})
	m.engineIDs[name] = id
	publish(&m.engineNames, name)
	return id, true, nil
}

// errTooManyEngines is Apply's error for a new engine name while
// maxEngines engines are live (departed ones' numbers are reused).
var errTooManyEngines = errors.New("kvindex: the in-memory backend tracks at most 65536 live engines; a new engine is refused")

// retire frees engine's number for a later new engine once the engine
// departed and holds nothing (its OpClear applied): the number leaves the
// names (a new copy of them) and goes on freeEngines. An engine still
// holding entries keeps its number.
func (m *memory) retire(engine string) {
	m.lock()
	defer m.mu.Unlock()
	eid, ok := m.engineIDs[engine]
	if !ok || m.closed.Load() || m.engines[eid].n != 0 {
		return
	}
	m.gen.Add(1)
	defer m.gen.Add(1)
	delete(m.engineIDs, engine)
	m.engines[eid] = memEngine{free: true}
	m.freeEngines = append(m.freeEngines, eid)
	publishAt(&m.engineNames, int(eid), "")
}

func (m *memory) mediumID(name string) (uint8, bool) {
	if id, ok := m.mediumIDs[name]; ok {
		return id, true
	}
	if len(m.mediums) >= kvkey.MaxMediums || len(name) > kvkey.MaxMediumLen || name == "" {
		return 0, false
	}
	id := uint8(len(m.mediums))
	m.mediums = append(m.mediums, name)
	m.mediumIDs[name] = id
	publish(&m.mediumNames, name)
	return id, true
}

func (m *memory) Resolve(engine string, hashes []uint64, keys []Key, found []bool) error {
	if len(keys) != len(hashes) || len(found) != len(hashes) {
		return fmt.Errorf("kvindex: Resolve: %d hashes, %d keys, %d found", len(hashes), len(keys), len(found))
	}
	m.rlock()
	defer m.mu.RUnlock()
	return m.resolveLocked(engine, hashes, keys, found)
}

// resolveLocked is Resolve with m.mu held.
func (m *memory) resolveLocked(engine string, hashes []uint64, keys []Key, found []bool) error {
	if m.closed.Load() {
		return ErrClosed
	}
	eid, ok, _ := m.engineID(engine, false)
	if ok {
		// The probes' slots first, all at once (touch).
		var sink uint32
		ms := m.maps.slots
		for _, h := range hashes {
			sink += ms[int(mapHash(eid, h))&(len(ms)-1)]
		}
		m.sink = sink
	}
	for i, h := range hashes {
		keys[i], found[i] = 0, false
		if !ok {
			continue
		}
		if id := m.maps.find(eid, h); id != 0 {
			keys[i], found[i] = m.e(id).key, true
		}
	}
	return nil
}

// spinTries bounds how often lock and rlock yield and retry before they
// sleep on the lock.
const spinTries = 16

// lock takes the write lock, yielding and retrying a few times first: a
// batch of another engine, Holders or Stats holds the lock for
// microseconds to tens of microseconds, and sleeping on it (a futex wait
// and wake per batch, on both sides) cost more than half the ingest rate
// while queries took the read lock (BENCHMARKS.md; Score takes no lock
// since: walk).
func (m *memory) lock() {
	for i := 0; i < spinTries; i++ {
		if m.mu.TryLock() {
			return
		}
		runtime.Gosched()
	}
	m.mu.Lock()
}

// rlock takes the read lock the same way.
func (m *memory) rlock() {
	for i := 0; i < spinTries; i++ {
		if m.mu.TryRLock() {
			return
		}
		runtime.Gosched()
	}
	m.mu.RLock()
}

func (m *memory) Apply(engine string, ops []Op) (Counts, error) {
	m.lock()
	defer m.mu.Unlock()
	return m.applyLocked(engine, ops)
}

// applyLocked is Apply with m.mu held for writing.
func (m *memory) applyLocked(engine string, ops []Op) (Counts, error) {
	var c Counts
	if m.closed.Load() {
		return c, ErrClosed
	}
	eid, _, err := m.engineID(engine, true)
	if err != nil {
		return c, err
	}
	m.reclaim()
	m.touch(eid, ops)
	for i := range ops {
		if i == 1 && m.midApply != nil {
			m.midApply()
		}
		op := &ops[i]
		switch op.Kind {
		case OpStore:
			if op.Group < 0 || op.Group > kvkey.MaxGroup {
				c.Rejected++
				continue
			}
			med, ok := m.mediumID(op.Medium)
			if !ok {
				c.Rejected++
				continue
			}
			m.store(eid, op.Hash, op.Key, med, uint8(op.Group), &c)
		case OpRemove:
			med, ok := m.mediumIDs[op.Medium]
			if !ok || op.Group < 0 || op.Group > kvkey.MaxGroup {
				c.UnknownRemovals++
				continue
			}
			m.remove(eid, op.Hash, med, uint8(op.Group), &c)
		case OpClear:
			c.Cleared += uint64(m.clear(eid))
			m.setEpoch(eid, m.epochOf(eid)+1)
		case OpLost:
			m.setEpoch(eid, m.epochOf(eid)+1)
		default:
			return c, fmt.Errorf("kvindex: unknown op kind %d", op.Kind)
		}
	}
	return c, nil
}

// touch loads, before ops are applied, what their probes will read first:
// for each store the home slots of its mapping and of its block, for each
// removal the home slot of its mapping, then the entry that slot names and
// its block's home slot. These loads do not depend on one another, so the
// cache misses of a batch's ops (tables and arena far larger than the
// caches) overlap instead of coming one after another; the probes then
// find the lines in the cache. Loading a line the ops do not need (a slot
// further along the run, a store of a block that exists) is a hint
// missed, nothing more.
func (m *memory) touch(eid uint16, ops []Op) {
	var sink uint32
	ms, bs := m.maps.slots, m.blocks.slots
	mmask, bmask := len(ms)-1, len(bs)-1
	removes := false
	for i := range ops {
		switch op := &ops[i]; op.Kind {
		case OpStore:
			sink += ms[int(mapHash(eid, op.Hash))&mmask] + bs[int(op.Key)&bmask]
		case OpRemove:
			sink += ms[int(mapHash(eid, op.Hash))&mmask]
			removes = true
		}
	}
	if removes {
		for i := range ops {
			op := &ops[i]
			if op.Kind != OpRemove {
				continue
			}
			hv := mapHash(eid, op.Hash)
			if s := ms[int(hv)&mmask]; s&^idMask == fpOf(hv) && s != tomb && s&idMask != 0 && s&idMask < m.next {
				sink += bs[int(m.e(s&idMask).key)&bmask]
			}
		}
	}
	m.sink = sink
}

// store applies OpStore.
func (m *memory) store(eid uint16, h uint64, k Key, med, group uint8, c *Counts) {
	first := m.maps.find(eid, h)
	if first != 0 && m.e(first).key != k {
		c.Remapped++
		c.Removed += uint64(m.dropGroup(first))
		first = 0
	}
	epoch := m.epochOf(eid)
	if first != 0 {
		for id := first; id != 0; {
			e := m.e(id)
			if e.engine != eid || e.hash != h {
				break
			}
			if e.medium == med && e.group == group {
				atomic.StoreUint32(&e.epoch, epoch)
				c.Refreshed++
				return
			}
			id = e.bnext
		}
	}
	id := m.alloc()
	e := m.e(id)
	*e = memEntry{key: k, hash: h, epoch: epoch, engine: eid, medium: med, group: group}
	if first != 0 {
		// Join the group right after its first entry: a group stays
		// contiguous in its block's chain.
		f := m.e(first)
		e.bprev, e.bnext = first, f.bnext
		if f.bnext != 0 {
			m.e(f.bnext).bprev = id
		}
		atomic.StoreUint32(&f.bnext, id) // publishes e
	} else {
		head, ok := m.blocks.find(k)
		if ok {
			e.bnext = head
			m.e(head).bprev = id
			m.blocks.set(k, id)
		} else {
			m.blocks.insert(k, id)
			m.nblocks++
		}
		m.maps.insert(eid, h, id)
		m.mappings++
	}
	// Newest at the tail of the store order.
	e.fprev = m.tail
	if m.tail != 0 {
		m.e(m.tail).fnext = id
	} else {
		m.head = id
	}
	m.tail = id
	m.entries++
	m.engines[eid].n++
	c.Added++
	for m.entries > m.capacity && m.head != 0 {
		m.unlink(m.head)
		c.Evicted++
		m.evicted++
	}
}

// remove applies OpRemove.
func (m *memory) remove(eid uint16, h uint64, med, group uint8, c *Counts) {
	for id := m.maps.find(eid, h); id != 0; {
		e := m.e(id)
		if e.engine != eid || e.hash != h {
			break
		}
		if e.medium == med && e.group == group {
			m.unlink(id)
			c.Removed++
			return
		}
		id = e.bnext
	}
	c.UnknownRemovals++
}

// dropGroup removes every entry of the group starting at first; it returns
// how many.
func (m *memory) dropGroup(first uint32) int {
	e := m.e(first)
	eid, h := e.engine, e.hash
	n := 0
	for id := first; id != 0; {
		e := m.e(id)
		if e.engine != eid || e.hash != h {
			break
		}
		nx := e.bnext
		m.unlink(id)
		n++
		// unlink moved the mapping to nx if nx is of the group.
		id = nx
	}
	return n
}

// clear removes every entry of the engine; it returns how many.
func (m *memory) clear(eid uint16) int {
	n := 0
	var firsts []uint32
	m.maps.each(eid, func(id uint32) { firsts = append(firsts, id) })
	for _, id := range firsts {
		n += m.dropGroup(id)
	}
	return n
}

// unlink removes entry id from its block chain, its group mapping and the
// store order, and frees it.
func (m *memory) unlink(id uint32) {
	e := m.e(id)
	// Group mapping: if id is its group's first entry, the next entry of
	// the group (if any) becomes first.
	if e.bprev == 0 || m.e(e.bprev).engine != e.engine || m.e(e.bprev).hash != e.hash {
		if e.bnext != 0 && m.e(e.bnext).engine == e.engine && m.e(e.bnext).hash == e.hash {
			m.maps.repoint(e.engine, e.hash, e.bnext)
		} else {
			m.maps.remove(e.engine, e.hash)
			m.mappings--
		}
	}
	// Block chain.
	if e.bprev != 0 {
		atomic.StoreUint32(&m.e(e.bprev).bnext, e.bnext)
	} else if e.bnext != 0 {
		m.blocks.set(e.key, e.bnext)
	} else {
		m.blocks.remove(e.key)
		m.nblocks--
	}
	if e.bnext != 0 {
		m.e(e.bnext).bprev = e.bprev
	}
	// Store order.
	if e.fprev != 0 {
		m.e(e.fprev).fnext = e.fnext
	} else {
		m.head = e.fnext
	}
	if e.fnext != 0 {
		m.e(e.fnext).fprev = e.fprev
	} else {
		m.tail = e.fprev
	}
	m.entries--
	m.engines[e.engine].n--
	m.release(id)
}

func (m *memory) Holders(keys []Key, visit func(i int, holders []Holder) bool) error {
	var buf [32]Holder
	m.rlock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return ErrClosed
	}
	for i, k := range keys {
		hs := buf[:0]
		head, ok := m.blocks.find(k)
		if ok {
			for id := head; id != 0; {
				e := m.e(id)
				hs = append(hs, Holder{Engine: uint32(e.engine), Medium: uint16(e.medium),
					Trusted: e.epoch == m.epochOf(e.engine)})
				id = e.bnext
			}
		}
		if !visit(i, hs) {
			return nil
		}
	}
	return nil
}

// publish appends name to the names p holds: in place when the backing
// array has room (readers of the old slice never look past its length),
// else in a copy of twice the size.
func publish(p *atomic.Pointer[[]string], name string) {
	var cur []string
	if old := p.Load(); old != nil {
		cur = *old
	}
	if len(cur) == cap(cur) {
		cur = append(make([]string, 0, 2*cap(cur)+8), cur...)
	}
	cur = append(cur, name)
	p.Store(&cur)
}

// publishAt sets the name of number id (< the names' length) in a new
// copy of the names p holds: a copy taken before keeps the old name.
func publishAt(p *atomic.Pointer[[]string], id int, name string) {
	cur := slices.Clone(*p.Load())
	cur[id] = name
	p.Store(&cur)
}

func (m *memory) EngineName(id uint32) string {
	if p := m.engineNames.Load(); p != nil && int(id) < len(*p) {
		return (*p)[id]
	}
	return ""
}

func (m *memory) MediumName(id uint16) string {
	if p := m.mediumNames.Load(); p != nil && int(id) < len(*p) {
		return (*p)[id]
	}
	return ""
}

func (m *memory) Stats() BackendStats {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return BackendStats{Entries: m.entries, Blocks: m.nblocks, Mappings: m.mappings, Engines: int64(len(m.engineIDs)),
		Capacity: m.capacity, Evicted: m.evicted, Bytes: m.bytes()}
}

func (m *memory) bytes() int64 {
	return int64(len(m.chunks))*chunkLen*40 + m.blocks.bytes() + m.maps.bytes()
}

func (m *memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed.Store(true)
	m.chunks, m.engines = nil, nil
	var none []*chunk
	m.arena.Store(&none)
	m.limbo = [2][]uint32{}
	m.blocks.init(m)
	m.maps.init(m)
	return nil
}
