package redisstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

func trusted(t *testing.T, s *store, k kvindex.Key) []bool {
	t.Helper()
	var out []bool
	if err := s.Holders([]kvindex.Key{k}, func(_ int, hs []kvindex.Holder) bool {
		for _, h := range hs {
			out = append(out, h.Trusted)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriterLease: with WriterIDs one indexer writes an engine at a time;
// the other's Apply writes nothing; when the lease lapses the other takes
// it over and the engine's entries become uncertain until stored again.
func TestWriterLease(t *testing.T) {
	prefix := "{" + redistest.Prefix(t) + "}"
	const ttl = 300 * time.Millisecond
	a := newStore(t, Config{Prefix: prefix, WriterID: "a", LeaseTTL: ttl})
	b := newStore(t, Config{Prefix: prefix, WriterID: "b", LeaseTTL: ttl})
	store := kvindex.Op{Kind: kvindex.OpStore, Hash: 1, Key: 11, Medium: "GPU"}
	if _, err := a.Apply("e", []kvindex.Op{store}); err != nil {
		t.Fatal(err)
	}
	c, err := b.Apply("e", []kvindex.Op{{Kind: kvindex.OpClear}})
	if err != nil || c != (kvindex.Counts{}) || b.ownStats().NotWriter != 1 {
		t.Fatalf("second writer: %+v %v %+v, want nothing done, no error, counted", c, err, b.ownStats())
	}
	if got := trusted(t, a, 11); len(got) != 1 || !got[0] {
		t.Fatalf("after refused clear: %v, want one trusted holder", got)
	}
	// a keeps its lease alive by renewal alone, well past the TTL.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		before := b.ownStats().NotWriter
		if _, err := b.Apply("e", nil); err != nil || b.ownStats().NotWriter != before+1 {
			t.Fatalf("b became writer while a renews: %v %+v", err, b.ownStats())
		}
		time.Sleep(ttl / 5)
	}
	// a stops (Close ends renewal); b takes over once the lease lapses.
	a.Close()
	bound := time.Now().Add(20 * ttl)
	for {
		before := b.ownStats().NotWriter
		if _, err := b.Apply("e", nil); err != nil {
			t.Fatalf("takeover: %v", err)
		}
		if b.ownStats().NotWriter == before {
			break // applied as the writer
		}
		if time.Now().After(bound) {
			t.Fatalf("b never took the lease over: %+v", b.ownStats())
		}
		time.Sleep(ttl / 5)
	}
	if st := b.ownStats(); st.Takeovers != 1 || st.NotWriter == 0 {
		t.Fatalf("stats %+v, want 1 takeover and refusals", st)
	}
	if got := trusted(t, b, 11); len(got) != 1 || got[0] {
		t.Fatalf("after takeover: %v, want one uncertain holder", got)
	}
	if c, err := b.Apply("e", []kvindex.Op{store}); err != nil || c.Refreshed != 1 {
		t.Fatalf("re-store: %+v %v", c, err)
	}
	if got := trusted(t, b, 11); len(got) != 1 || !got[0] {
		t.Fatalf("after re-store: %v, want trusted", got)
	}
}

func TestRefusedAndErrors(t *testing.T) {
	s := newStore(t, Config{})
	c, err := s.Apply("e", []kvindex.Op{
		{Kind: kvindex.OpStore, Hash: 1, Key: 1, Medium: "GPU"},
		{Kind: kvindex.OpStore, Hash: 2, Key: 2, Medium: strings.Repeat("x", 65)},
		{Kind: kvindex.OpStore, Hash: 5, Key: 5, Medium: "GPU", Group: 256},
		{Kind: kvindex.OpStore, Hash: 3, Key: 3, Medium: "GPU"},
	})
	if err != nil || c.Added != 2 || c.Rejected != 2 {
		t.Fatalf("unusable stores: %+v %v (want 2 added, 2 rejected, no error)", c, err)
	}
	if _, err := s.Apply("e", []kvindex.Op{{Kind: 99}}); err == nil || !strings.Contains(err.Error(), "unknown kind 99") {
		t.Fatalf("unknown op kind: %v", err)
	}
	keys, found := make([]kvindex.Key, 3), make([]bool, 3)
	if err := s.Resolve("e", []uint64{1, 2, 3}, keys, found); err != nil || !found[0] || found[1] || !found[2] || keys[0] != 1 {
		t.Fatalf("Resolve: %v %v %v", keys, found, err)
	}
	if err := s.Resolve("nobody", []uint64{1}, keys[:1], found[:1]); err != nil || found[0] {
		t.Fatalf("Resolve of an unknown engine: %v %v", found, err)
	}
	if err := s.Resolve("e", []uint64{1}, keys, found); err == nil {
		t.Fatal("Resolve with mismatched lengths accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without URL or Client accepted")
	}
	if _, err := New(Config{URL: "unix:///nonexistent/redis.sock", Timeout: time.Second}); err == nil {
		t.Fatal("New on a missing socket accepted")
	}
	// The config convention: a negative field is refused, naming the
	// field and the value, before any connection is tried.
	for cfg, want := range map[*Config]string{
		{URL: "unix:///nonexistent/redis.sock", Capacity: -3}:           "Config.Capacity -3",
		{URL: "unix:///nonexistent/redis.sock", Timeout: -time.Second}:  "Config.Timeout -1s",
		{URL: "unix:///nonexistent/redis.sock", LeaseTTL: -time.Second}: "Config.LeaseTTL -1s",
	} {
		if _, err := New(*cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v): %v, want an error naming %q", *cfg, err, want)
		}
	}
	if st, ok := StatsOf(s); !ok || st.Calls == 0 {
		t.Errorf("StatsOf(a store): %+v %v", st, ok)
	}
	if _, ok := StatsOf(nil); ok {
		t.Error("StatsOf(nil) reports a store")
	}
	s.Close()
	if _, err := s.Apply("e", nil); !errors.Is(err, kvindex.ErrClosed) {
		t.Fatalf("Apply after Close: %v", err)
	}
	if err := s.Holders([]kvindex.Key{1}, func(int, []kvindex.Holder) bool { return true }); !errors.Is(err, kvindex.ErrClosed) {
		t.Fatalf("Holders after Close: %v", err)
	}
}

// TestHoldersStopsAtGap: the script stops after the first empty key, and
// a caller that goes on past it still sees every later key.
func TestHoldersStopsAtGap(t *testing.T) {
	s := newStore(t, Config{})
	if _, err := s.Apply("e", []kvindex.Op{
		{Kind: kvindex.OpStore, Hash: 1, Key: 1, Medium: "GPU"},
		{Kind: kvindex.OpStore, Hash: 3, Key: 3, Medium: "CPU"},
	}); err != nil {
		t.Fatal(err)
	}
	calls := s.ownStats().Calls
	var seen []int
	if err := s.Holders([]kvindex.Key{1, 2, 3, 4}, func(i int, hs []kvindex.Holder) bool {
		seen = append(seen, i*10+len(hs))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 10, 21, 30}; !slices.Equal(seen, want) {
		t.Fatalf("visits %v, want %v", seen, want)
	}
	if n := s.ownStats().Calls - calls; n != 2 {
		t.Fatalf("%d round trips, want 2 (one stops at the gap, one reads the rest)", n)
	}
	if s.MediumName(0) != "" || s.EngineName(999) != "" {
		t.Fatal("names of unknown ids")
	}
}

// TestEpochCacheAcrossStores: a reader's cached engine epochs follow
// another process's writes: a lost range makes its entries uncertain, a
// new engine's entries are trusted.
func TestEpochCacheAcrossStores(t *testing.T) {
	prefix := "{" + redistest.Prefix(t) + "}"
	w := newStore(t, Config{Prefix: prefix})
	r := newStore(t, Config{Prefix: prefix})
	if _, err := w.Apply("e1", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 10, Medium: "GPU"}}); err != nil {
		t.Fatal(err)
	}
	if got := trusted(t, r, 10); !slices.Equal(got, []bool{true}) {
		t.Fatalf("before: %v", got)
	}
	if _, err := w.Apply("e1", []kvindex.Op{{Kind: kvindex.OpLost}}); err != nil {
		t.Fatal(err)
	}
	if got := trusted(t, r, 10); !slices.Equal(got, []bool{false}) {
		t.Fatalf("after the other store's lost range: %v, want uncertain", got)
	}
	if _, err := w.Apply("e2", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 2, Key: 20, Medium: "GPU"}}); err != nil {
		t.Fatal(err)
	}
	if got := trusted(t, r, 20); !slices.Equal(got, []bool{true}) {
		t.Fatalf("a new engine of the other store: %v, want trusted", got)
	}
}

// TestFailedApplyLeavesDoubt: a batch whose call fails (here: the server
// pauses writes past the store's timeout, so the batch may still run
// after the error) leaves the engine in doubt; its next batch that gets
// through first makes its entries uncertain.
func TestFailedApplyLeavesDoubt(t *testing.T) {
	srv := redistest.StartT(t)
	s := newStore(t, Config{URL: srv.URL(), Timeout: 200 * time.Millisecond})
	admin := newStore(t, Config{URL: srv.URL()})
	if _, err := s.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 10, Medium: "GPU"}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := admin.client.Do(ctx, admin.client.B().ClientPause().Timeout(1500).Write().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 3, Key: 30, Medium: "GPU"}}); err == nil {
		t.Fatal("Apply during a write pause longer than the timeout succeeded")
	}
	// After the pause, the next batch goes through and starts with OpLost.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.Apply("e", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 2, Key: 20, Medium: "GPU"}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Apply never went through after the pause: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Block 10 was not in the failed batch, but what else that batch (or
	// one the client could not confirm) changed is unknown.
	if got := trusted(t, s, 10); !slices.Equal(got, []bool{false}) {
		t.Fatalf("block 10 after a failed batch: %v, want uncertain", got)
	}
	if got := trusted(t, s, 20); !slices.Equal(got, []bool{true}) {
		t.Fatalf("block 20 stored after recovery: %v, want trusted", got)
	}
	if st := s.ownStats(); st.Recovered != 1 || st.Errors == 0 {
		t.Fatalf("stats %+v", st)
	}
}
