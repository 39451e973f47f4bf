package redisstore

import (
	"log/slog"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// TestDeparted: over Redis (with a writer lease), an engine's departure
// drops its entries and position in the shared store and leaves the other
// engine's; an index over the same store sees the same.
func TestDeparted(t *testing.T) {
	s := newStore(t, Config{WriterID: "w"})
	x, err := kvindex.New(kvindex.Config{Backend: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	prompt := make([]int64, 16)
	for i := range prompt {
		prompt[i] = int64(900 + i)
	}
	for i, e := range []string{"a", "b"} {
		hs := []kvevents.Hash{}
		for j := range 4 {
			hs = append(hs, kvevents.IntHash(uint64(100*(i+1)+j)))
		}
		if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateBatch, Source: e, Seq: 5, Batch: &kvevents.Batch{Seq: 5, Digest: 9,
			Events: []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: prompt, BlockHashes: hs}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: "a"}); err != nil {
		t.Fatal(err)
	}
	// A second index over the same store: what Redis holds.
	y, err := kvindex.New(kvindex.Config{Backend: newStoreOn(t, s), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	for name, idx := range map[string]*kvindex.Index{"writer": x, "reader": y} {
		r, err := idx.Score(kvindex.ScoreRequest{Tokens: prompt, BlockSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Engines) != 1 || r.Engines[0].Engine != "b" || r.Engines[0].Blocks != 4 {
			t.Fatalf("%s: %+v, want b only with 4 blocks", name, r.Engines)
		}
		if _, ok := idx.Positions()["a"]; ok {
			t.Fatalf("%s: a's position kept: %v", name, idx.Positions())
		}
		if _, ok := idx.Positions()["b"]; !ok {
			t.Fatalf("%s: b's position lost: %v", name, idx.Positions())
		}
	}
	if st := x.Stats(); st.Departed != 1 || st.Cleared != 4 || st.Backend.Entries != 4 {
		t.Fatalf("departed %d cleared %d entries %d", st.Departed, st.Cleared, st.Backend.Entries)
	}
}

// newStoreOn opens another store on s's server and prefix.
func newStoreOn(t *testing.T, s *store) *store {
	t.Helper()
	return newStore(t, Config{URL: s.cfg.URL, Prefix: s.prefix})
}

// TestDepartedReleasesLease: with writer leases, a departed engine's lease
// is released at once (another writer may write it without waiting for the
// TTL) and no longer renewed.
func TestDepartedReleasesLease(t *testing.T) {
	a := newStore(t, Config{WriterID: "a", LeaseTTL: time.Minute})
	b := newStore(t, Config{WriterID: "b", LeaseTTL: time.Minute, URL: a.cfg.URL, Prefix: a.prefix})
	x, err := kvindex.New(kvindex.Config{Backend: a, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateBatch, Source: "e", Seq: 1, Batch: &kvevents.Batch{Seq: 1,
		Events: []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: 2, TokenIDs: []int64{1, 2}, BlockHashes: []kvevents.Hash{kvevents.IntHash(5)}}}}}); err != nil {
		t.Fatal(err)
	}
	store := []kvindex.Op{{Kind: kvindex.OpStore, Hash: 6, Key: 66, Medium: "GPU"}}
	if _, err := b.Apply("e", store); err != nil || b.ownStats().NotWriter != 1 {
		t.Fatalf("b wrote a's engine: %v %+v", err, b.ownStats())
	}
	a.mu.RLock()
	held := len(a.leased)
	a.mu.RUnlock()
	if held != 1 {
		t.Fatalf("a holds %d leases, want 1", held)
	}
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: "e"}); err != nil {
		t.Fatal(err)
	}
	a.mu.RLock()
	held = len(a.leased)
	a.mu.RUnlock()
	if held != 0 {
		t.Fatalf("a still renews %d leases after the engine departed", held)
	}
	if c, err := b.Apply("e", store); err != nil || b.ownStats().NotWriter != 1 || c.Added != 1 {
		t.Fatalf("b after the departure: %+v %v %+v, want the store applied", c, err, b.ownStats())
	}
}
