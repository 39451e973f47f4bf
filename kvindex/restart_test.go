package kvindex_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// logBuf is a slog destination safe for concurrent lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(ln, substr) {
			out = append(out, ln)
		}
	}
	return out
}

func newLogger() (*slog.Logger, *logBuf) {
	b := &logBuf{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// restartDoc is a 4-block prompt of 16-token blocks; doc(k) differs from
// doc(j) from the first token.
func restartDoc(k int) []int64 {
	toks := make([]int64, 64)
	for i := range toks {
		toks[i] = int64(k*1000 + i + 1)
	}
	return toks
}

// storeUpdate is a batch of engine storing doc k's first n blocks, with a
// position (seq, a digest derived from it).
func storeUpdate(engine string, k, n int, seq uint64) kvevents.Update {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = uint64(k*100 + i + 1)
	}
	ev := kvmodel.Store(hs, -1, restartDoc(k)[:n*16], 16, "GPU", 0)
	return kvevents.Update{Kind: kvevents.UpdateBatch, Source: engine, Seq: seq,
		Batch: &kvevents.Batch{Source: engine, Seq: seq, Digest: seq*7919 + 1, Events: []kvevents.Event{ev}}}
}

func mustApply(t testing.TB, x *kvindex.Index, u kvevents.Update) {
	t.Helper()
	if err := x.Apply(u); err != nil {
		t.Fatal(err)
	}
}

func mustScore(t *testing.T, x *kvindex.Index, req kvindex.ScoreRequest) kvindex.ScoreResult {
	t.Helper()
	r, err := x.Score(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPositions: Apply records each source's last applied batch; a reset
// forgets it; ApplyEvents (no position) leaves it.
func TestPositions(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	mustApply(t, x, storeUpdate("a", 1, 2, 5))
	mustApply(t, x, storeUpdate("a", 1, 3, 6))
	mustApply(t, x, storeUpdate("b", 2, 1, 9))
	want := map[string]kvevents.Position{"a": {Seq: 6, Digest: 6*7919 + 1}, "b": {Seq: 9, Digest: 9*7919 + 1}}
	if got := x.Positions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("positions %v, want %v", got, want)
	}
	mustApply(t, x, kvevents.Update{Kind: kvevents.UpdateLost, Source: "a", From: 7, To: 9})
	if got := x.Positions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a lost range moved a position: %v, want %v", got, want)
	}
	mustApply(t, x, kvevents.Update{Kind: kvevents.UpdateReset, Source: "b", Seq: 0})
	delete(want, "b")
	if got := x.Positions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after b's reset: %v, want %v", got, want)
	}
}

// snapshotWorld fills an index: engine a holds doc 1 (4 blocks, certain),
// b holds doc 2 (3 blocks) then loses a range (uncertain), c holds doc 3
// through ApplyEvents only (no position), d was reset.
func snapshotWorld(t testing.TB, x *kvindex.Index) {
	mustApply(t, x, storeUpdate("a", 1, 4, 10))
	mustApply(t, x, storeUpdate("b", 2, 3, 20))
	mustApply(t, x, kvevents.Update{Kind: kvevents.UpdateLost, Source: "b", From: 21, To: 23})
	if err := x.ApplyEvents("c", storeUpdate("c", 3, 2, 0).Batch.Events); err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, storeUpdate("d", 1, 2, 3))
	mustApply(t, x, kvevents.Update{Kind: kvevents.UpdateReset, Source: "d"})
}

// TestSnapshotRestart: an index restarted from its snapshot answers as
// before, with its positions; an engine with no position (continuity
// unprovable) comes back uncertain. Fails without Config.SnapshotFile: a
// restarted index knew nothing.
func TestSnapshotRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	logger, logs := newLogger()
	cfg := kvindex.Config{SnapshotFile: path, Logger: logger, BlockSize: 8}
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	snapshotWorld(t, x)
	var before []kvindex.ScoreResult
	for k := 1; k <= 3; k++ {
		before = append(before, mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(k)}))
	}
	posBefore, stBefore := x.Positions(), x.Stats()
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x.Stats().Snapshots != 1 {
		t.Fatalf("Close wrote %d snapshots, want 1", x.Stats().Snapshots)
	}

	y, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if got := y.Positions(); !reflect.DeepEqual(got, posBefore) {
		t.Fatalf("positions after restart %v, want %v", got, posBefore)
	}
	st := y.Stats()
	if st.Backend.Entries != stBefore.Backend.Entries || st.Backend.Mappings != stBefore.Backend.Mappings ||
		st.Backend.Blocks != stBefore.Backend.Blocks || st.Backend.Engines != stBefore.Backend.Engines {
		t.Fatalf("backend after restart %+v, before %+v", st.Backend, stBefore.Backend)
	}
	// Until each source's feed proves continuity (its first batch after
	// the resume), every engine's entries are uncertain: the engine may
	// have dropped blocks while the index was down.
	uncertain := func(r kvindex.ScoreResult) kvindex.ScoreResult {
		r.Engines = slices.Clone(r.Engines)
		for i := range r.Engines {
			r.Engines[i].Blocks, r.Engines[i].Tokens = 0, 0
			r.Engines[i].Tiers = slices.Clone(r.Engines[i].Tiers)
			for j := range r.Engines[i].Tiers {
				r.Engines[i].Tiers[j].Blocks, r.Engines[i].Tiers[j].Tokens = 0, 0
			}
		}
		return r
	}
	for k := 1; k <= 3; k++ {
		if got, want := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(k)}), uncertain(before[k-1]); !reflect.DeepEqual(got, want) {
			t.Fatalf("doc %d after restart, before the proof:\n%+v\nwant %+v", k, got, want)
		}
	}
	// The first batches delivered (a proven resume): a, b and c get their
	// trust back, c never (no position: continuity unprovable).
	for _, e := range []string{"a", "b", "c"} {
		mustApply(t, y, kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Seq: 30, Batch: &kvevents.Batch{Seq: 30, Digest: 1}})
	}
	for k := 1; k <= 3; k++ {
		got := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(k)})
		want := before[k-1]
		if k == 3 {
			want = uncertain(want)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("doc %d after restart and proof:\n%+v\nwant %+v", k, got, want)
		}
		if k == 1 && (len(got.Engines) != 1 || got.Engines[0].Engine != "a" || got.Engines[0].Blocks != 4) {
			t.Fatalf("doc 1 after restart: %+v, want a certain 4 blocks", got)
		}
	}
	// The block size seen (16) survived: a request without one is scored
	// in 16s, not Config.BlockSize's 8.
	if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(1)}); r.PromptBlocks != 4 {
		t.Fatalf("prompt blocks %d after restart, want 4 (block size 16 kept)", r.PromptBlocks)
	}
	if n := len(logs.lines("snapshot loaded")); n != 1 {
		t.Fatalf("%d 'snapshot loaded' lines, want 1:\n%s", n, logs.lines(""))
	}
	// Ingest goes on after a restart: b re-stores its blocks, certain again.
	mustApply(t, y, storeUpdate("b", 2, 3, 24))
	if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(2)}); r.Engines[0].Blocks != 3 {
		t.Fatalf("b after re-store: %+v", r)
	}
}

// TestSnapshotPeriodic: the snapshot is written every SnapshotInterval,
// not only on Close.
func TestSnapshotPeriodic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	x, err := kvindex.New(kvindex.Config{SnapshotFile: path, SnapshotInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	mustApply(t, x, storeUpdate("a", 1, 4, 10))
	deadline := time.Now().Add(20 * time.Second)
	for x.Stats().Snapshots < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no periodic snapshot in 20 s: %+v", x.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// What is on disk now loads (a copy: x still writes its file).
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.snap")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	y, err := kvindex.New(kvindex.Config{SnapshotFile: cp})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(1)}); len(r.Engines) != 1 || r.Engines[0].MaybeBlocks != 4 {
		t.Fatalf("periodic snapshot loaded: %+v", r)
	}
	// The periodic writer may be half-way through its next file until
	// Close, which waits for it: no temporary file is left after that.
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp*")); len(m) != 0 {
		t.Fatalf("temporary files left after Close: %v", m)
	}
}

func TestSnapshotConfig(t *testing.T) {
	if _, err := kvindex.New(kvindex.Config{SnapshotFile: "x", SnapshotInterval: -time.Second}); err == nil || !strings.Contains(err.Error(), "SnapshotInterval") {
		t.Fatalf("negative interval: %v", err)
	}
	if _, err := kvindex.New(kvindex.Config{SnapshotFile: "x", Backend: opaque{newMemory(t, 0)}}); err == nil || !strings.Contains(err.Error(), "in-memory") {
		t.Fatalf("shared backend with a snapshot: %v", err)
	}
	full := newMemory(t, 0)
	if _, err := full.Apply("a", []kvindex.Op{{Kind: kvindex.OpLost}}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvindex.New(kvindex.Config{SnapshotFile: "x", Backend: full}); err == nil || !strings.Contains(err.Error(), "empty backend") {
		t.Fatalf("a backend in use with a snapshot: %v", err)
	}
}

// validSnapshot returns the bytes of a snapshot of snapshotWorld.
func validSnapshot(t testing.TB) []byte {
	path := filepath.Join(t.TempDir(), "kv.snap")
	x, err := kvindex.New(kvindex.Config{SnapshotFile: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	snapshotWorld(t, x)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// resum recomputes a snapshot's trailing checksum after an edit.
func resum(b []byte) []byte {
	b = bytes.Clone(b)
	n := len(b) - 8
	binary.LittleEndian.PutUint64(b[n:], crc64.Checksum(b[:n], crc64.MakeTable(crc64.ECMA)))
	return b
}

// TestSnapshotRefused: a corrupt, truncated, foreign, newer, other-seed
// snapshot is refused with one ERROR line naming the file and the reason;
// the index starts empty and works. Each case fails when its check is
// taken out (the load would go on, or fail otherwise).
func TestSnapshotRefused(t *testing.T) {
	good := validSnapshot(t)
	flip := bytes.Clone(good)
	flip[len(flip)/2] ^= 0x40
	future := bytes.Clone(good)
	binary.LittleEndian.PutUint32(future[8:], 2)
	hugeCount := bytes.Clone(good)
	binary.LittleEndian.PutUint32(hugeCount[24:], 1<<31) // the models count
	badEngine := bytes.Clone(good)
	binary.LittleEndian.PutUint16(badEngine[len(badEngine)-8-24+20:], 200) // the last entry's engine
	badEngine = resum(badEngine)
	cases := []struct {
		name, reason string
		data         []byte
		cfg          kvindex.Config
	}{
		{"corrupt", "checksum mismatch", flip, kvindex.Config{}},
		{"truncated", "truncated", good[:len(good)-30], kvindex.Config{}},
		{"truncated header", "not a kvindex snapshot", good[:5], kvindex.Config{}},
		{"empty", "not a kvindex snapshot", nil, kvindex.Config{}},
		{"foreign", "not a kvindex snapshot (magic", append([]byte("PK\x03\x04xxxx"), good[8:]...), kvindex.Config{}},
		{"future version", "format version 2 is newer than this build's 1", future, kvindex.Config{}},
		{"other seed", "another seed", good, kvindex.Config{Seed: 99}},
		{"huge count", "corrupt: 2147483648 models", hugeCount, kvindex.Config{}},
		{"trailing bytes", "corrupt: bytes after the checksum", append(bytes.Clone(good), 0), kvindex.Config{}},
		{"entry of no engine", "corrupt: entry", badEngine, kvindex.Config{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kv.snap")
			if err := os.WriteFile(path, c.data, 0o600); err != nil {
				t.Fatal(err)
			}
			logger, logs := newLogger()
			c.cfg.SnapshotFile, c.cfg.Logger = path, logger
			x, err := kvindex.New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			st := x.Stats()
			if st.SnapshotRefused != 1 || st.Backend.Entries != 0 || len(x.Positions()) != 0 {
				t.Fatalf("refused %d, entries %d, positions %v: want 1, 0, none", st.SnapshotRefused, st.Backend.Entries, x.Positions())
			}
			lines := logs.lines("level=ERROR")
			if len(lines) != 1 || !strings.Contains(lines[0], "snapshot refused") || !strings.Contains(lines[0], path) || !strings.Contains(lines[0], c.reason) {
				t.Fatalf("log lines %q, want one ERROR naming %s and %q", lines, path, c.reason)
			}
			mustApply(t, x, storeUpdate("a", 1, 2, 1))
			if r := mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(1)}); len(r.Engines) != 1 || r.Engines[0].Blocks != 2 {
				t.Fatalf("index after a refused snapshot: %+v", r)
			}
		})
	}
}

// TestSnapshotCapacity: a snapshot of more entries than the capacity
// keeps the newest.
func TestSnapshotCapacity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	if err := os.WriteFile(path, validSnapshot(t), 0o600); err != nil {
		t.Fatal(err)
	}
	x, err := kvindex.New(kvindex.Config{SnapshotFile: path, Capacity: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if n := x.Stats().Backend.Entries; n != 3 {
		t.Fatalf("%d entries, want 3", n)
	}
}

// lossy is a shared backend (over the memory one) that can lose its data:
// after lose, its next call returns ErrBackendLost (wrapped) once, with
// its store replaced by an empty one, as a Redis backend does after a
// restart without persistence. It keeps positions (PositionStore).
type lossy struct {
	t    *testing.T
	mu   sync.Mutex
	be   kvindex.Backend
	pos  map[string]kvevents.Position
	lost atomic.Bool
}

func newLossy(t *testing.T) *lossy {
	return &lossy{t: t, be: newMemory(t, 0), pos: map[string]kvevents.Position{}}
}

func (l *lossy) lose() { l.lost.Store(true) }

func (l *lossy) inner() (kvindex.Backend, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost.Swap(false) {
		l.be = newMemory(l.t, 0)
		l.pos = map[string]kvevents.Position{}
		return nil, fmt.Errorf("lossy: generation changed: %w", kvindex.ErrBackendLost)
	}
	return l.be, nil
}

func (l *lossy) Resolve(e string, h []uint64, k []kvindex.Key, f []bool) error {
	be, err := l.inner()
	if err != nil {
		return err
	}
	return be.Resolve(e, h, k, f)
}

func (l *lossy) Apply(e string, ops []kvindex.Op) (kvindex.Counts, error) {
	be, err := l.inner()
	if err != nil {
		return kvindex.Counts{}, err
	}
	return be.Apply(e, ops)
}

func (l *lossy) Holders(k []kvindex.Key, visit func(int, []kvindex.Holder) bool) error {
	be, err := l.inner()
	if err != nil {
		return err
	}
	return be.Holders(k, visit)
}

func (l *lossy) EngineName(id uint32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.be.EngineName(id)
}

func (l *lossy) MediumName(id uint16) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.be.MediumName(id)
}

func (l *lossy) Stats() kvindex.BackendStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.be.Stats()
}

func (l *lossy) Close() error { return nil }

func (l *lossy) SavePosition(s string, p kvevents.Position) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pos[s] = p
	return nil
}

func (l *lossy) Positions() (map[string]kvevents.Position, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]kvevents.Position{}
	for k, v := range l.pos {
		out[k] = v
	}
	return out, nil
}

func (l *lossy) DropPosition(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pos, s)
	return nil
}

// TestPositionStore: with a PositionStore backend, positions are saved
// there after each batch, dropped on reset, and a new index over the same
// store (a restarted kv-index, a new replica) starts from them.
func TestPositionStore(t *testing.T) {
	be := newLossy(t)
	x, err := kvindex.New(kvindex.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, storeUpdate("a", 1, 2, 4))
	mustApply(t, x, storeUpdate("b", 2, 2, 8))
	mustApply(t, x, kvevents.Update{Kind: kvevents.UpdateReset, Source: "b"})
	want := map[string]kvevents.Position{"a": {Seq: 4, Digest: 4*7919 + 1}}
	if got, _ := be.Positions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("store's positions %v, want %v", got, want)
	}
	x.Close()
	y, err := kvindex.New(kvindex.Config{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if got := y.Positions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a new index's positions %v, want %v", got, want)
	}
}

// TestBackendLost: when the shared backend lost its data, the index drops
// what it cached (positions, block sizes), logs one ERROR, counts it and
// calls OnBackendLost (outside its locks: the callback applies a reset,
// which would deadlock under an engine's lock) so that every source is
// resynced; the resync's resets and replays make the index exact again.
// Fails on the code before: nothing noticed, nothing counted, no resync.
func TestBackendLost(t *testing.T) {
	be := newLossy(t)
	logger, logs := newLogger()
	var x *kvindex.Index
	resynced := make(chan struct{}, 4)
	x, err := kvindex.New(kvindex.Config{Backend: be, Logger: logger, OnBackendLost: func() {
		// What a subscriber's Resync leads to: each source's reset, then
		// its replay from the start.
		for _, e := range []string{"a", "b"} {
			if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: e}); err != nil {
				t.Error(err)
			}
		}
		resynced <- struct{}{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	mustApply(t, x, storeUpdate("a", 1, 4, 1))
	mustApply(t, x, storeUpdate("b", 2, 4, 1))
	be.lose()
	err = x.Apply(storeUpdate("a", 1, 4, 2))
	if !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("apply after the loss: %v, want ErrBackendLost", err)
	}
	select {
	case <-resynced:
	case <-time.After(20 * time.Second):
		t.Fatal("OnBackendLost not called within 20 s")
	}
	st := x.Stats()
	if st.BackendLosses != 1 {
		t.Fatalf("BackendLosses %d, want 1", st.BackendLosses)
	}
	if lines := logs.lines("level=ERROR"); len(lines) != 1 || !strings.Contains(lines[0], "lost its data") {
		t.Fatalf("ERROR lines %q, want one naming the loss", lines)
	}
	if p := x.Positions(); len(p) != 0 {
		t.Fatalf("positions kept after the loss: %v", p)
	}
	// The replay re-establishes a; b's blocks are known to no one.
	mustApply(t, x, storeUpdate("a", 1, 4, 1))
	r := mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(1)})
	if len(r.Engines) != 1 || r.Engines[0].Engine != "a" || r.Engines[0].Blocks != 4 {
		t.Fatalf("after the resync: %+v", r)
	}
	if r := mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(2)}); len(r.Engines) != 0 {
		t.Fatalf("b's lost blocks still scored: %+v", r)
	}
}

// TestScoreCandidates: ScoreRequest.Engines limits the answer to the
// candidates.
func TestScoreCandidates(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	mustApply(t, x, storeUpdate("a", 1, 4, 1))
	mustApply(t, x, storeUpdate("b", 1, 2, 1))
	r := mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(1), Engines: []string{"b", "zz"}})
	if len(r.Engines) != 1 || r.Engines[0].Engine != "b" || r.Engines[0].Blocks != 2 {
		t.Fatalf("candidates b, zz: %+v", r)
	}
	if r := mustScore(t, x, kvindex.ScoreRequest{Tokens: restartDoc(1)}); len(r.Engines) != 2 || r.Engines[0].Engine != "a" {
		t.Fatalf("no candidates: %+v", r)
	}
}

// TestUnknownModel: a request for a model no engine serves says so and is
// counted.
func TestUnknownModel(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{Model: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if r := mustScore(t, x, kvindex.ScoreRequest{Model: "m1", Tokens: restartDoc(1)}); r.UnknownModel {
		t.Fatal("m1 reported unknown")
	}
	if r := mustScore(t, x, kvindex.ScoreRequest{Model: "m2", Tokens: restartDoc(1)}); !r.UnknownModel {
		t.Fatal("m2 not reported unknown")
	}
	if n := x.Stats().UnknownModels; n != 1 {
		t.Fatalf("UnknownModels %d, want 1", n)
	}
	y, err := kvindex.New(kvindex.Config{ModelOf: func(e string) string { return "model-" + e }})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	mustApply(t, y, storeUpdate("a", 1, 1, 1))
	if r := mustScore(t, y, kvindex.ScoreRequest{Model: "model-a", Tokens: restartDoc(1)}); r.UnknownModel || len(r.Engines) != 1 {
		t.Fatalf("model-a: %+v", r)
	}
	if r := mustScore(t, y, kvindex.ScoreRequest{Model: "model-b", Tokens: restartDoc(1)}); !r.UnknownModel {
		t.Fatalf("model-b: %+v", r)
	}
}

// TestSnapshotResumeUnproven: after a restart from a snapshot, a source
// whose feed cannot prove continuity (a lost range comes first) stays
// uncertain even when batches follow, and one whose engine restarted (a
// reset) is cleared. Fails if a loaded snapshot's entries were trusted at
// once, or got their trust back after a lost range.
func TestSnapshotResumeUnproven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	cfg := kvindex.Config{SnapshotFile: path, Logger: slog.New(slog.DiscardHandler)}
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, storeUpdate("a", 1, 4, 10))
	mustApply(t, x, storeUpdate("b", 2, 4, 10))
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	for k, e := range map[int]string{1: "a", 2: "b"} {
		if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(k)}); len(r.Engines) != 1 || r.Engines[0].Engine != e ||
			r.Engines[0].Blocks != 0 || r.Engines[0].MaybeBlocks != 4 {
			t.Fatalf("doc %d right after the load: %+v, want %s maybe 4, certain 0", k, r, e)
		}
	}
	mustApply(t, y, kvevents.Update{Kind: kvevents.UpdateLost, Source: "a", From: 11, To: 15})
	mustApply(t, y, kvevents.Update{Kind: kvevents.UpdateBatch, Source: "a", Seq: 15, Batch: &kvevents.Batch{Seq: 15, Digest: 3}})
	if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(1)}); r.Engines[0].Blocks != 0 || r.Engines[0].MaybeBlocks != 4 {
		t.Fatalf("a after an unproven resume: %+v, want maybe 4, certain 0", r)
	}
	mustApply(t, y, kvevents.Update{Kind: kvevents.UpdateReset, Source: "b"})
	if r := mustScore(t, y, kvindex.ScoreRequest{Tokens: restartDoc(2)}); len(r.Engines) != 0 {
		t.Fatalf("b after a reset: %+v, want nothing", r)
	}
}

// TestSnapshotRestartTwice: an index restarted twice while an engine
// stays idle (no batch between the restarts) still gives the engine's
// entries their trust back on its first proven batch, but not when a lost
// range came between.
func TestSnapshotRestartTwice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	cfg := kvindex.Config{SnapshotFile: path, Logger: slog.New(slog.DiscardHandler)}
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, storeUpdate("a", 1, 4, 10))
	mustApply(t, x, storeUpdate("b", 2, 4, 10))
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// b: a lost range, then a batch, then a loss again before the next
	// restart (its epoch moves on; nothing of the first load is kept).
	mustApply(t, y, kvevents.Update{Kind: kvevents.UpdateLost, Source: "b", From: 11, To: 12})
	if err := y.Close(); err != nil {
		t.Fatal(err)
	}
	z, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	for _, e := range []string{"a", "b"} {
		mustApply(t, z, kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Seq: 11, Batch: &kvevents.Batch{Seq: 11, Digest: 5}})
	}
	if r := mustScore(t, z, kvindex.ScoreRequest{Tokens: restartDoc(1)}); len(r.Engines) != 1 || r.Engines[0].Blocks != 4 {
		t.Fatalf("a after two restarts and a proven resume: %+v, want certain 4", r)
	}
	if r := mustScore(t, z, kvindex.ScoreRequest{Tokens: restartDoc(2)}); len(r.Engines) != 1 || r.Engines[0].Blocks != 0 || r.Engines[0].MaybeBlocks != 4 {
		t.Fatalf("b after a lost range between restarts: %+v, want maybe 4, certain 0", r)
	}
}

// TestSnapshotThroughOptionalInterface (issue 40): the Index finds what the
// in-memory backend can do beyond Backend (the snapshot, the one-lock
// apply, the direct Score walk) by its optional interfaces, not its
// concrete type: a type embedding it is snapshotted and restored like it,
// while a Backend with only the interface's methods (opaque) is still
// refused a SnapshotFile (TestSnapshotConfig).
func TestSnapshotThroughOptionalInterface(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.snap")
	cfg := kvindex.Config{SnapshotFile: path, Logger: slog.New(slog.DiscardHandler), BlockSize: 8}
	cfg.Backend = kvindex.Embedded(newMemory(t, 0))
	x, err := kvindex.New(cfg)
	if err != nil {
		t.Fatalf("a backend embedding the in-memory one refused a snapshot: %v", err)
	}
	snapshotWorld(t, x)
	before := x.Stats().Backend
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Backend = kvindex.Embedded(newMemory(t, 0))
	y, err := kvindex.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if after := y.Stats().Backend; after.Entries != before.Entries || after.Engines != before.Engines || after.Entries == 0 {
		t.Fatalf("restored %+v, snapshotted %+v", after, before)
	}
}
