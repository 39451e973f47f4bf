package kvindex

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSnapshotRestart measures an in-memory index's restart: writing
// its snapshot (Close's write), the file's size and loading it (New), at
// 1M and 10M entries (100 engines, one medium, keys and hashes spread
// over the tables). One restart per run whatever b.N: run it with
// -benchtime=1x. Reported: write-s, load-s, bytes/entry, MB.
func BenchmarkSnapshotRestart(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("entries=%dM", n/1_000_000), func(b *testing.B) {
			quiet := slog.New(slog.DiscardHandler)
			path := filepath.Join(b.TempDir(), "kv.snap")
			x, err := New(Config{Capacity: n, SnapshotFile: path, Logger: quiet, SnapshotInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			m := x.be.(*memory)
			ops := make([]Op, 0, 1000)
			for i := 0; i < n; i += 1000 {
				ops = ops[:0]
				for j := i; j < i+1000 && j < n; j++ {
					ops = append(ops, Op{Kind: OpStore, Hash: uint64(j), Key: Key(uint64(j)*0x9e3779b97f4a7c15 + 1), Medium: "GPU"})
				}
				if _, err := m.Apply(fmt.Sprint("engine-", (i/1000)%100), ops); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			t0 := time.Now()
			if err := x.Close(); err != nil {
				b.Fatal(err)
			}
			write := time.Since(t0)
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			t0 = time.Now()
			y, err := New(Config{SnapshotFile: path, Capacity: n, Logger: quiet, SnapshotInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			load := time.Since(t0)
			b.StopTimer()
			if got := y.Stats().Backend.Entries; got != int64(n) {
				b.Fatalf("loaded %d entries, want %d", got, n)
			}
			close(y.snapStop) // no write on this Close
			<-y.snapDone
			y.snapStop = nil
			y.Close()
			b.ReportMetric(write.Seconds(), "write-s")
			b.ReportMetric(load.Seconds(), "load-s")
			b.ReportMetric(float64(fi.Size())/float64(n), "bytes/entry")
			b.ReportMetric(float64(fi.Size())/1e6, "MB")
		})
	}
}
