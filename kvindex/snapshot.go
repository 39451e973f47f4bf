package kvindex

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// The snapshot file (Config.SnapshotFile), little-endian throughout:
//
//	magic    8 bytes "ZGKVSNAP"
//	version  u32 (snapshotVersion)
//	flags    u32 (bit 0: engine-key mode)
//	seed     u64 (Config.Seed)
//	spaces   u32 n ≤ maxSnapModels, then n × (model str, u8 k ≤ 8, k × u32 block size)
//	sources  u32 n ≤ maxEngines, then n × (name str, u64 seq, u64 digest)
//	media    u32 n ≤ MaxMediums, then n × str (1..MaxMediumLen bytes)
//	engines  u32 n ≤ maxEngines, then n × (name str, u32 loss epoch)
//	entries  u64 n ≤ maxCapacity, then n × (u64 key, u64 engine hash,
//	         u32 epoch, u16 engine, u8 medium, u8 group), oldest first
//	crc      u64: CRC-64 (ECMA) of every byte before it
//
// A str is a u32 length ≤ maxSnapName and the bytes. Every count is
// checked against its bound before anything is read or allocated for it,
// and nothing is allocated in proportion to a count: entries are stored
// one by one into a fresh backend, which is used only once the whole file
// (checksum and end of file included) was read.

const (
	snapshotMagic   = "ZGKVSNAP"
	snapshotVersion = 1
	snapFlagKeys    = 1
	maxSnapName     = 1 << 16
	maxSnapModels   = 1 << 16
	maxSnapSizes    = 8
	snapEntryLen    = 24
)

var snapTable = crc64.MakeTable(crc64.ECMA)

// snapshotError is why a snapshot was refused.
type snapshotError struct{ reason string }

func (e *snapshotError) Error() string { return e.reason }

func refusedf(format string, a ...any) error {
	return &snapshotError{fmt.Sprintf(format, a...)}
}

// snapState is what a snapshot holds besides the backend.
type snapState struct {
	spaces map[string][]int
	pos    map[string]kvevents.Position
	// pending: engines loaded and not resumed yet (written with their
	// loaded epoch, so that a second restart keeps what the first kept).
	pending map[string]pendingTrust
}

// snapReader reads a snapshot, summing what it reads.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash64
	buf [snapEntryLen]byte
	err error
}

func (r *snapReader) read(n int) []byte {
	if r.err != nil {
		return r.buf[:n]
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.err = err
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			r.err = refusedf("truncated")
		}
		return b
	}
	r.crc.Write(b)
	return b
}

func (r *snapReader) u8() uint8   { return r.read(1)[0] }
func (r *snapReader) u32() uint32 { return binary.LittleEndian.Uint32(r.read(4)) }
func (r *snapReader) u64() uint64 { return binary.LittleEndian.Uint64(r.read(8)) }

// count reads a u32 count and checks it against max.
func (r *snapReader) count(what string, max int) int {
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(max) {
		r.err = refusedf("corrupt: %d %s, at most %d", n, what, max)
		return 0
	}
	return int(n)
}

// str reads a string of at most max bytes (checked before it is read).
func (r *snapReader) str(what string, max int) string {
	n := r.u32()
	if r.err != nil {
		return ""
	}
	if uint64(n) > uint64(max) {
		r.err = refusedf("corrupt: %s of %d bytes, at most %d", what, n, max)
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		r.err = refusedf("truncated")
		return ""
	}
	r.crc.Write(b)
	return string(b)
}

// readSnapshot reads a snapshot into m, a fresh memory backend. seed and
// keys are the index's: a snapshot of another seed or key mode is refused
// (its keys would never match). size, when above 0, is the file's size:
// the tables are made for the entries it can really hold (never for what
// its count claims). An error other than a *snapshotError is the
// reader's.
func readSnapshot(in io.Reader, m *memory, seed uint64, keys bool, size int64) (snapState, error) {
	st := snapState{spaces: map[string][]int{}, pos: map[string]kvevents.Position{}}
	r := &snapReader{r: bufio.NewReaderSize(in, 1<<20), crc: crc64.New(snapTable)}
	magic := r.read(8)
	if r.err != nil {
		return st, refusedf("not a kvindex snapshot (%v)", r.err)
	}
	if string(magic) != snapshotMagic {
		return st, refusedf("not a kvindex snapshot (magic %x, want %x)", magic, snapshotMagic)
	}
	if v := r.u32(); r.err == nil && v != snapshotVersion {
		if v > snapshotVersion {
			return st, refusedf("format version %d is newer than this build's %d", v, snapshotVersion)
		}
		return st, refusedf("corrupt: format version %d", v)
	}
	flags := r.u32()
	fseed := r.u64()
	if r.err != nil {
		return st, r.err
	}
	if flags&^snapFlagKeys != 0 {
		return st, refusedf("corrupt: unknown flags %#x", flags)
	}
	if (flags&snapFlagKeys != 0) != keys {
		return st, refusedf("written in another key mode (engine-key mode %v, this index %v)", flags&snapFlagKeys != 0, keys)
	}
	if fseed != seed {
		return st, refusedf("written with another seed (%d, this index %d)", fseed, seed)
	}
	nm := r.count("models", maxSnapModels)
	for i := 0; i < nm && r.err == nil; i++ {
		model := r.str("a model name", maxSnapName)
		k := int(r.u8())
		if r.err == nil && (k == 0 || k > maxSnapSizes) {
			r.err = refusedf("corrupt: %d block sizes of a model, want 1..%d", k, maxSnapSizes)
		}
		var sizes []int
		for j := 0; j < k && r.err == nil; j++ {
			bs := int(r.u32())
			if r.err == nil && (bs <= 0 || bs > MaxBlockSize || len(sizes) > 0 && bs <= sizes[len(sizes)-1]) {
				r.err = refusedf("corrupt: block size %d", bs)
			}
			sizes = append(sizes, bs)
		}
		if _, dup := st.spaces[model]; dup && r.err == nil {
			r.err = refusedf("corrupt: model listed twice")
		}
		st.spaces[model] = sizes
	}
	np := r.count("sources", maxEngines)
	for i := 0; i < np && r.err == nil; i++ {
		name := r.str("a source name", maxSnapName)
		p := kvevents.Position{Seq: r.u64(), Digest: r.u64()}
		if _, dup := st.pos[name]; dup && r.err == nil {
			r.err = refusedf("corrupt: source listed twice")
		}
		st.pos[name] = p
	}
	nmed := r.count("media", kvkey.MaxMediums)
	for i := 0; i < nmed && r.err == nil; i++ {
		name := r.str("a medium name", kvkey.MaxMediumLen)
		if r.err != nil {
			break
		}
		if _, dup := m.mediumIDs[name]; dup {
			r.err = refusedf("corrupt: medium listed twice")
		} else if _, ok := m.mediumID(name); !ok {
			r.err = refusedf("corrupt: empty medium name")
		}
	}
	ne := r.count("engines", maxEngines)
	for i := 0; i < ne && r.err == nil; i++ {
		name := r.str("an engine name", maxSnapName)
		epoch := r.u32()
		if r.err != nil {
			break
		}
		if _, dup := m.engineIDs[name]; dup {
			r.err = refusedf("corrupt: engine listed twice")
			break
		}
		id, _, _ := m.engineID(name, true)
		m.setEpoch(id, epoch)
	}
	n := r.u64()
	if r.err == nil && n > maxCapacity {
		r.err = refusedf("corrupt: %d entries, at most %d", n, maxCapacity)
	}
	if r.err == nil && size > 0 {
		bound := min(n, uint64(size)/snapEntryLen, uint64(m.capacity))
		m.blocks.presize(int(bound))
		m.maps.presize(int(bound))
	}
	var c Counts
	for i := uint64(0); i < n && r.err == nil; i++ {
		b := r.read(snapEntryLen)
		if r.err != nil {
			break
		}
		k, h := Key(binary.LittleEndian.Uint64(b)), binary.LittleEndian.Uint64(b[8:])
		epoch := binary.LittleEndian.Uint32(b[16:])
		eid, med, group := binary.LittleEndian.Uint16(b[20:]), b[22], b[23]
		if int(eid) >= len(m.engines) || int(med) >= len(m.mediums) {
			r.err = refusedf("corrupt: entry %d names engine %d of %d or medium %d of %d", i, eid, len(m.engines), med, len(m.mediums))
			break
		}
		c = Counts{}
		m.store(eid, h, k, med, group, &c)
		if c.Added != 1 || c.Remapped != 0 {
			r.err = refusedf("corrupt: entry %d repeats or contradicts an earlier one", i)
			break
		}
		m.e(m.tail).epoch = epoch
	}
	if r.err != nil {
		return st, r.err
	}
	want := r.crc.Sum64()
	var tail [8]byte
	if _, err := io.ReadFull(r.r, tail[:]); err != nil {
		return st, refusedf("truncated")
	}
	if got := binary.LittleEndian.Uint64(tail[:]); got != want {
		return st, refusedf("checksum mismatch (file %016x, computed %016x)", got, want)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		if err != nil {
			return st, err
		}
		return st, refusedf("corrupt: bytes after the checksum")
	}
	return st, nil
}

// snapWriter writes a snapshot, summing what it writes.
type snapWriter struct {
	w   *bufio.Writer
	crc hash.Hash64
	b   []byte
}

func (w *snapWriter) flush() {
	w.w.Write(w.b)
	w.crc.Write(w.b)
	w.b = w.b[:0]
}

func (w *snapWriter) u8(v uint8)   { w.b = append(w.b, v) }
func (w *snapWriter) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *snapWriter) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *snapWriter) str(s string) {
	w.u32(uint32(len(s)))
	w.b = append(w.b, s...)
	if len(w.b) >= 1<<12 {
		w.flush()
	}
}

// encodeSnapshot writes m's state, st's spaces and positions. It holds m's
// read lock while it writes the backend: Apply waits, Score goes on.
func encodeSnapshot(out io.Writer, m *memory, seed uint64, keys bool, st snapState) error {
	w := &snapWriter{w: bufio.NewWriterSize(out, 1<<20), crc: crc64.New(snapTable), b: make([]byte, 0, 1<<13)}
	w.b = append(w.b, snapshotMagic...)
	w.u32(snapshotVersion)
	flags := uint32(0)
	if keys {
		flags |= snapFlagKeys
	}
	w.u32(flags)
	w.u64(seed)
	models := slices.Sorted(func(yield func(string) bool) {
		for k := range st.spaces {
			if !yield(k) {
				return
			}
		}
	})
	w.u32(uint32(len(models)))
	for _, model := range models {
		w.str(model)
		w.u8(uint8(len(st.spaces[model])))
		for _, bs := range st.spaces[model] {
			w.u32(uint32(bs))
		}
	}
	w.u32(uint32(len(st.pos)))
	for name, p := range st.pos {
		w.str(name)
		w.u64(p.Seq)
		w.u64(p.Digest)
	}
	m.rlock()
	defer m.mu.RUnlock()
	if m.closed.Load() {
		return ErrClosed
	}
	w.u32(uint32(len(m.mediums)))
	for _, name := range m.mediums {
		w.str(name)
	}
	// Departed engines' numbers (free) are left out: the live engines are
	// written densely, their entries renumbered to match (the loader
	// numbers engines in the order listed).
	ids := make([]uint16, len(m.engines))
	w.u32(uint32(len(m.engineIDs)))
	live := uint16(0)
	for i, e := range m.engines {
		if e.free {
			continue
		}
		ids[i] = live
		live++
		w.str(e.name)
		epoch := m.epochOf(uint16(i))
		if p, ok := st.pending[e.name]; ok && epoch == p.bumped {
			epoch = p.old // still as loaded: nothing stored or lost since
		}
		w.u32(epoch)
	}
	w.u64(uint64(m.entries))
	for id := m.head; id != 0; {
		e := m.e(id)
		w.u64(uint64(e.key))
		w.u64(e.hash)
		w.u32(e.epoch)
		w.b = binary.LittleEndian.AppendUint16(w.b, ids[e.engine])
		w.u8(e.medium)
		w.u8(e.group)
		if len(w.b) >= 1<<12 {
			w.flush()
		}
		id = e.fnext
	}
	w.flush()
	w.w.Write(binary.LittleEndian.AppendUint64(nil, w.crc.Sum64()))
	return w.w.Flush()
}

// writeSnapshot writes the snapshot file atomically: a temporary file in
// its directory, fsync, rename, fsync of the directory.
func (x *Index) writeSnapshot() (err error) {
	x.snapMu.Lock()
	defer x.snapMu.Unlock()
	defer func() {
		if err != nil {
			x.st.snapshotErrors.Add(1)
			x.fails.Error("snapshot", "kvindex: writing the snapshot failed", slog.String("file", x.cfg.SnapshotFile), slog.Any(ratelog.KeyErr, err))
		} else {
			x.st.snapshots.Add(1)
		}
	}()
	snap := x.be.(snapshotter) // New refuses a SnapshotFile for any other
	// Positions before entries: a position never ahead of the entries
	// written (a resume from an older position replays, and a batch
	// applied twice changes nothing).
	st := snapState{pos: x.Positions(), spaces: map[string][]int{}}
	x.posMu.Lock()
	st.pending = maps.Clone(x.pending)
	x.posMu.Unlock()
	x.spaceMu.RLock()
	for k, v := range x.spaces {
		st.spaces[k] = slices.Clone(v)
	}
	x.spaceMu.RUnlock()
	path := x.cfg.SnapshotFile
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = snap.writeSnapshot(f, x.seed, x.cfg.Keys != nil, st); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// loadSnapshot loads Config.SnapshotFile, if there is one, into a fresh
// backend, and uses it only when the whole file was read and checked;
// otherwise one line says why and the index starts empty. Sources in the
// snapshot without a position (their continuity cannot be proven) have
// their entries made uncertain.
func (x *Index) loadSnapshot() {
	path := x.cfg.SnapshotFile
	snap := x.be.(snapshotter) // New refuses a SnapshotFile for any other
	start := time.Now()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		x.log.Info("kvindex: no snapshot yet, starting empty", slog.String("file", path))
		return
	}
	refuse := func(reason string) {
		x.st.snapshotRefused.Add(1)
		x.log.Error("kvindex: snapshot refused, starting empty", slog.String("file", path), slog.String("reason", reason))
	}
	if err != nil {
		refuse(err.Error())
		return
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	st, err := snap.loadSnapshot(f, x.seed, x.cfg.Keys != nil, size)
	if err != nil {
		refuse(err.Error())
		return
	}
	x.spaceMu.Lock()
	x.spaces = st.spaces
	x.spaceMu.Unlock()
	x.posMu.Lock()
	x.pos = st.pos
	x.posMu.Unlock()
	// Every engine's entries are uncertain until its feed proves it is
	// the run the snapshot followed: an engine with a position gets its
	// trust back with the first batch delivered after the resume (the
	// subscriber delivers one only once continuity is proven; else a lost
	// range or a reset comes first); one without stays uncertain.
	uncertain := snap.suspendTrust(st.pos, x.pending)
	x.npending.Store(int64(len(x.pending)))
	bst := x.be.Stats()
	x.log.Info("kvindex: snapshot loaded", slog.String("file", path), slog.Int64("entries", bst.Entries),
		slog.Int64("engines", bst.Engines), slog.Int("positions", len(st.pos)),
		slog.Int("engines_without_position", uncertain), slog.Duration("took", time.Since(start)))
}

// pendingTrust is an engine loaded from a snapshot whose continuity is not
// proven yet: its loss epoch was old, is bumped until the proof.
type pendingTrust struct{ old, bumped uint32 }

// resumed settles engine's pending trust on its first update after a
// snapshot's load: a batch (continuity proven) gives the snapshot's
// entries their trust back, anything else leaves them uncertain. Called in
// the engine's turn, before the update is applied.
func (x *Index) resumed(engine string, proven bool) {
	if x.npending.Load() == 0 {
		return
	}
	x.posMu.Lock()
	p, ok := x.pending[engine]
	delete(x.pending, engine)
	x.npending.Store(int64(len(x.pending)))
	x.posMu.Unlock()
	if !ok || !proven {
		return
	}
	x.be.(snapshotter).restoreTrust(engine, p) // pending only after a snapshot's load
}

// adopt makes m (empty, not yet shared) hold f's state.
func (m *memory) adopt(f *memory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen.Add(1)
	defer m.gen.Add(1)
	m.chunks, m.next, m.free, m.head, m.tail = f.chunks, f.next, f.free, f.head, f.tail
	// f was never shared: what it unlinked while loading is free now.
	for _, l := range f.limbo {
		for _, id := range l {
			*m.e(id) = memEntry{bnext: m.free}
			m.free = id
		}
	}
	cs := m.chunks
	m.arena.Store(&cs)
	m.blocks.adopt(&f.blocks.idTable, m)
	m.maps.adopt(&f.maps.idTable, m)
	m.engines, m.engineIDs, m.mediums, m.mediumIDs = f.engines, f.engineIDs, f.mediums, f.mediumIDs
	for i := range m.epochs {
		m.epochs[i].Store(f.epochs[i].Load())
	}
	m.freeEngines = f.freeEngines
	m.engineNames.Store(f.engineNames.Load())
	m.mediumNames.Store(f.mediumNames.Load())
	m.entries, m.nblocks, m.mappings, m.evicted = f.entries, f.nblocks, f.mappings, f.evicted
}

// snapshotLoop writes the snapshot every Config.SnapshotInterval until
// Close.
func (x *Index) snapshotLoop() {
	defer close(x.snapDone)
	t := time.NewTicker(x.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-x.snapStop:
			return
		case <-t.C:
			x.writeSnapshot()
		}
	}
}
