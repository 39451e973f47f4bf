package kvindex_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
)

// FuzzSnapshot feeds bytes to the snapshot loader (kvindex.New with
// Config.SnapshotFile): whatever they are, New neither panics nor fails,
// the index is empty or holds what the bytes describe, and a snapshot it
// loaded is written back and loads to the same state. The loader checks
// every count before reading or allocating for it (a count of 2³¹ models
// in 20 bytes is refused, not allocated).
func FuzzSnapshot(f *testing.F) {
	f.Add(validSnapshot(f))
	f.Add([]byte("ZGKVSNAP\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "kv.snap")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := kvindex.Config{SnapshotFile: path, Capacity: 1 << 12, Logger: slog.New(slog.DiscardHandler)}
		x, err := kvindex.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		st := x.Stats()
		if st.SnapshotRefused != 0 && (st.Backend.Entries != 0 || len(x.Positions()) != 0) {
			t.Fatalf("refused, yet %d entries and positions %v", st.Backend.Entries, x.Positions())
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if st.SnapshotRefused != 0 {
			return
		}
		y, err := kvindex.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Close()
		st2 := y.Stats()
		if st2.SnapshotRefused != 0 || st2.Backend.Entries != st.Backend.Entries || st2.Backend.Mappings != st.Backend.Mappings ||
			st2.Backend.Blocks != st.Backend.Blocks || st2.Backend.Engines != st.Backend.Engines {
			t.Fatalf("written back and loaded: %+v, first load %+v", st2.Backend, st.Backend)
		}
	})
}
