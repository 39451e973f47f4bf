package kvindex_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// TestConfigConvention: zero fields take their documented defaults; a
// negative or out-of-range field is refused with an error that names the
// field and the value.
func TestConfigConvention(t *testing.T) {
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if st := x.Stats(); st.Backend.Capacity != 1<<22 {
		t.Fatalf("zero Capacity gave %d entries, want 4194304", st.Backend.Capacity)
	}
	// Zero BlockSize: 16 before any store names one.
	toks := kvmodel.Tokens(1, 64)
	if r, err := x.Score(kvindex.ScoreRequest{Tokens: toks}); err != nil || r.PromptBlocks != 4 {
		t.Fatalf("zero BlockSize: %+v %v, want 4 blocks of 16", r, err)
	}
	for _, c := range []struct {
		cfg  kvindex.Config
		want string
	}{
		{kvindex.Config{Capacity: -1}, "Config.Capacity -1"},
		{kvindex.Config{Capacity: 1 << 30}, "Config.Capacity 1073741824"},
		{kvindex.Config{BlockSize: -16}, "Config.BlockSize -16"},
		{kvindex.Config{BlockSize: kvindex.MaxBlockSize + 1}, "Config.BlockSize 65537"},
	} {
		if _, err := kvindex.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v): %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	if _, err := kvindex.NewMemory(-1); err == nil || !strings.Contains(err.Error(), "-1") {
		t.Errorf("NewMemory(-1): %v", err)
	}
	m, err := kvindex.NewMemory(0)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if c := m.Stats().Capacity; c != 1<<22 {
		t.Errorf("NewMemory(0) holds %d, want 4194304", c)
	}
}

// failing is a backend whose every call fails.
type failing struct{ kvindex.Backend }

var errDown = errors.New("backend down")

func (failing) Resolve(string, []uint64, []kvindex.Key, []bool) error { return errDown }
func (failing) Apply(string, []kvindex.Op) (kvindex.Counts, error) {
	return kvindex.Counts{}, errDown
}

// TestBackendFailureLogBounded: a backend that fails every batch writes
// one line per second at most, not one per batch, and the next line says
// how many were held back.
func TestBackendFailureLogBounded(t *testing.T) {
	var buf bytes.Buffer
	mem, err := kvindex.NewMemory(0)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	x, err := kvindex.New(kvindex.Config{Backend: failing{mem}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const batches = 200
	t0 := time.Now()
	for i := range batches {
		ev := kvmodel.Store([]uint64{uint64(i) + 1}, int64(i), kvmodel.Tokens(1, 16), 16, "GPU", 0)
		if err := x.ApplyEvents("e", []kvevents.Event{ev}); !errors.Is(err, errDown) {
			t.Fatalf("batch %d: %v, want the backend's error", i, err)
		}
	}
	elapsed := time.Since(t0)
	lines := strings.Count(buf.String(), "\n")
	if lines < 1 || lines > 1+int(elapsed/time.Second) {
		t.Fatalf("%d lines for %d failures in %v, want 1 per second:\n%s", lines, batches, elapsed, buf.String())
	}
	if !strings.Contains(buf.String(), "component=kvindex") || !strings.Contains(buf.String(), "err=\"backend down\"") {
		t.Fatalf("line lacks component or err: %s", buf.String())
	}
	if st := x.Stats(); st.Errors != batches {
		t.Fatalf("Stats.Errors %d, want %d", st.Errors, batches)
	}
}
