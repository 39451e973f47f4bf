package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// flushAll empties the server s is on.
func flushAll(t *testing.T, s *store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lossBound)
	defer cancel()
	if err := s.client.Do(ctx, s.client.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// TestPositions: positions live in Redis under the prefix, shared by the
// stores of one prefix and by no other; they belong to the generation:
// after a loss they are gone, and the loss is reported once.
func TestPositions(t *testing.T) {
	srv := redistest.StartT(t)
	prefix := "{" + redistest.Prefix(t) + "}"
	a := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
	b := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
	other := newStore(t, Config{URL: srv.URL()})
	var ps kvindex.PositionStore = a // what the index asserts
	want := map[string]kvevents.Position{
		"tcp://10.0.0.1:5557": {Seq: 7, Digest: 1<<64 - 1},
		"engine:b":            {Seq: 0, Digest: 0},
	}
	for src, p := range want {
		if err := ps.SavePosition(src, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SavePosition("engine:b", kvevents.Position{Seq: 9, Digest: 3}); err != nil {
		t.Fatal(err)
	}
	want["engine:b"] = kvevents.Position{Seq: 9, Digest: 3}
	if got, err := b.Positions(); err != nil || !maps.Equal(got, want) {
		t.Fatalf("another store of the prefix reads %v %v, want %v", got, err, want)
	}
	if got, err := other.Positions(); err != nil || len(got) != 0 {
		t.Fatalf("a store of another prefix reads %v %v, want none", got, err)
	}
	if err := b.DropPosition("engine:b"); err != nil {
		t.Fatal(err)
	}
	if err := b.DropPosition("never saved"); err != nil {
		t.Fatal(err)
	}
	delete(want, "engine:b")
	if got, err := a.Positions(); err != nil || !maps.Equal(got, want) {
		t.Fatalf("after DropPosition: %v %v, want %v", got, err, want)
	}
	// A value that is not "seq:digest" is refused, naming the source.
	ctx := context.Background()
	if err := a.client.Do(ctx, a.client.B().Hset().Key(prefix+"pos").FieldValue().FieldValue("bad", "7:x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Positions(); err == nil || !strings.Contains(err.Error(), `"bad"`) || !strings.Contains(err.Error(), `"7:x"`) {
		t.Fatalf("a bad position: %v", err)
	}
	if err := a.DropPosition("bad"); err != nil {
		t.Fatal(err)
	}
	// The loss: gone with the data, reported once per store.
	flushAll(t, a)
	if _, err := a.Positions(); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("Positions after FLUSHALL: %v, want ErrBackendLost", err)
	}
	if got, err := a.Positions(); err != nil || len(got) != 0 {
		t.Fatalf("Positions after the reported loss: %v %v, want none", got, err)
	}
	if err := b.SavePosition("s", kvevents.Position{Seq: 1, Digest: 2}); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("SavePosition of the other store after FLUSHALL: %v, want ErrBackendLost", err)
	}
	if err := b.SavePosition("s", kvevents.Position{Seq: 1, Digest: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Positions(); err != nil || !maps.Equal(got, map[string]kvevents.Position{"s": {Seq: 1, Digest: 2}}) {
		t.Fatalf("positions of the new generation: %v %v", got, err)
	}
	if a.ownStats().Losses != 1 || b.ownStats().Losses != 1 {
		t.Fatalf("losses %d, %d; want 1 each", a.ownStats().Losses, b.ownStats().Losses)
	}
	a.Close()
	if _, err := a.Positions(); !errors.Is(err, kvindex.ErrClosed) {
		t.Fatalf("Positions after Close: %v", err)
	}
	if err := a.SavePosition("s", kvevents.Position{}); !errors.Is(err, kvindex.ErrClosed) {
		t.Fatalf("SavePosition after Close: %v", err)
	}
	if err := a.DropPosition("s"); !errors.Is(err, kvindex.ErrClosed) {
		t.Fatalf("DropPosition after Close: %v", err)
	}
}

// TestIDsOfALostGeneration: an engine or medium id handed out before a
// loss never names an engine or medium of the data after it, even one
// whose Redis id is the same: the new generation's ids start above the old
// ones, and the old ones name nothing.
func TestIDsOfALostGeneration(t *testing.T) {
	srv := redistest.StartT(t)
	s := newStore(t, Config{URL: srv.URL()})
	if _, err := s.Apply("old-engine", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 10, Medium: "OLD-MEDIUM"}}); err != nil {
		t.Fatal(err)
	}
	var old kvindex.Holder
	if err := s.Holders([]kvindex.Key{10}, func(_ int, hs []kvindex.Holder) bool { old = hs[0]; return false }); err != nil {
		t.Fatal(err)
	}
	if s.EngineName(old.Engine) != "old-engine" || s.MediumName(old.Medium) != "OLD-MEDIUM" {
		t.Fatalf("before the loss: %+v names %q %q", old, s.EngineName(old.Engine), s.MediumName(old.Medium))
	}
	flushAll(t, s)
	// Another store writes the new generation first: its engine and medium
	// take Redis ids 1, as the old ones had.
	w := newStore(t, Config{URL: srv.URL(), Prefix: s.prefix})
	if _, err := w.Apply("new-engine", []kvindex.Op{{Kind: kvindex.OpStore, Hash: 1, Key: 20, Medium: "NEW-MEDIUM"}}); err != nil {
		t.Fatal(err)
	}
	// s has not seen the loss yet: the old ids still name the old
	// generation's engine (from the cache), never the new one.
	if n := s.EngineName(old.Engine); n == "new-engine" {
		t.Fatalf("old id %d names %q", old.Engine, n)
	}
	var cur kvindex.Holder
	lost := 0
	retry(t, "Holders", &lost, func() error {
		return s.Holders([]kvindex.Key{20}, func(_ int, hs []kvindex.Holder) bool { cur = hs[0]; return false })
	})
	if lost != 1 {
		t.Fatalf("loss reported %d times, want 1", lost)
	}
	if cur.Engine == old.Engine || cur.Medium == old.Medium {
		t.Fatalf("the new generation's holder %+v reuses an id of the old one %+v", cur, old)
	}
	if s.EngineName(cur.Engine) != "new-engine" || s.MediumName(cur.Medium) != "NEW-MEDIUM" {
		t.Fatalf("new ids %+v name %q %q", cur, s.EngineName(cur.Engine), s.MediumName(cur.Medium))
	}
	if n, m := s.EngineName(old.Engine), s.MediumName(old.Medium); n != "" || m != "" {
		t.Fatalf("old ids %+v name %q %q after the loss, want nothing", old, n, m)
	}
	if st := s.ownStats(); st.Losses != 1 {
		t.Fatalf("stats %+v, want 1 loss", st)
	}
}

// TestLossFoundByACallWithoutError: a loss that EngineName or Stats finds
// (they return no error) is reported by the store's next call that
// returns one, once.
func TestLossFoundByACallWithoutError(t *testing.T) {
	srv := redistest.StartT(t)
	s := newStore(t, Config{URL: srv.URL()})
	if _, err := s.Apply("e", storeOps([]kvindex.Key{10})); err != nil {
		t.Fatal(err)
	}
	flushAll(t, s)
	if n := s.EngineName(99); n != "" { // an id not cached: a lookup
		t.Fatalf("EngineName(99) = %q", n)
	}
	if st := s.ownStats(); st.Losses != 1 {
		t.Fatalf("EngineName did not find the loss: %+v", st)
	}
	if _, err := s.Apply("e", storeOps([]kvindex.Key{10})); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("the next Apply: %v, want ErrBackendLost", err)
	}
	if _, err := s.Apply("e", storeOps([]kvindex.Key{10})); err != nil {
		t.Fatal(err)
	}
	flushAll(t, s)
	if st := s.Stats(); st.Entries != 0 {
		t.Fatalf("Stats after FLUSHALL: %+v", st)
	}
	if st := s.ownStats(); st.Losses != 2 {
		t.Fatalf("Stats did not find the loss: %+v", st)
	}
	keys, found := make([]kvindex.Key, 1), make([]bool, 1)
	if err := s.Resolve("e", []uint64{1}, keys, found); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("the next Resolve: %v, want ErrBackendLost", err)
	}
	if err := s.Resolve("e", []uint64{1}, keys, found); err != nil || found[0] {
		t.Fatalf("Resolve after the report: %v %v", found[0], err)
	}
}

// TestLossDropsLeases: a writer's leases are data of the lost generation:
// after the loss the writer takes its engine's lease again as a new one,
// not as a takeover, and renews only what it holds in the new generation.
func TestLossDropsLeases(t *testing.T) {
	srv := redistest.StartT(t)
	s := newStore(t, Config{URL: srv.URL(), WriterID: "w", LeaseTTL: 300 * time.Millisecond})
	if _, err := s.Apply("e", storeOps([]kvindex.Key{10})); err != nil {
		t.Fatal(err)
	}
	flushAll(t, s)
	if _, err := s.Apply("e", storeOps([]kvindex.Key{10})); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("Apply after FLUSHALL: %v, want ErrBackendLost", err)
	}
	s.mu.RLock()
	n := len(s.leased)
	s.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d leases kept after the loss", n)
	}
	if c, err := s.Apply("e", storeOps([]kvindex.Key{10})); err != nil || c.Added != 1 {
		t.Fatalf("Apply in the new generation: %+v %v", c, err)
	}
	if st := s.ownStats(); st.Takeovers != 0 || st.NotWriter != 0 || st.Losses != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLossesUnderConcurrentCalls: two backends follow one engine each and
// score both engines' prompts from several goroutines while Redis is
// flushed again and again. No holder is ever named with the other
// engine's name, each loss is reported at most once per backend, and the
// backends work after the last one.
func TestLossesUnderConcurrentCalls(t *testing.T) {
	srv := redistest.StartT(t)
	prefix := "{" + redistest.Prefix(t) + "}"
	a := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
	b := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
	admin := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
	keys := map[string][]kvindex.Key{"engine-a": {101, 102, 103}, "engine-b": {201, 202, 203}}
	const flushes, rounds = 8, 40
	var (
		mu       sync.Mutex
		wrong    []string
		reported = map[*store]int{}
	)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, f := range []struct {
		s      *store
		engine string
	}{{a, "engine-a"}, {b, "engine-b"}} {
		wg.Add(2)
		go func() { // the writer
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := f.s.Apply(f.engine, storeOps(keys[f.engine]))
				if errors.Is(err, kvindex.ErrBackendLost) {
					mu.Lock()
					reported[f.s]++
					mu.Unlock()
				}
			}
		}()
		go func() { // the reader, of both engines' prompts
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for engine, ks := range keys {
					names, err := holderNames(f.s, ks)
					if errors.Is(err, kvindex.ErrBackendLost) {
						mu.Lock()
						reported[f.s]++
						mu.Unlock()
					}
					for _, ns := range names {
						for _, n := range ns {
							if n != engine && n != "" {
								mu.Lock()
								wrong = append(wrong, fmt.Sprintf("%s named %s", engine, n))
								mu.Unlock()
							}
						}
					}
				}
			}
		}()
	}
	// waitFor waits, at most lossBound, until both backends found n losses
	// and made calls after it.
	waitFor := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(lossBound)
		for a.ownStats().Losses < n || b.ownStats().Losses < n {
			if time.Now().After(deadline) {
				t.Fatalf("losses found: %d, %d; want %d", a.ownStats().Losses, b.ownStats().Losses, n)
			}
			time.Sleep(time.Millisecond)
		}
		calls := a.ownStats().Calls + b.ownStats().Calls
		for a.ownStats().Calls+b.ownStats().Calls < calls+rounds && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	for i := 0; i < flushes; i++ {
		waitFor(uint64(i))
		flushAll(t, admin)
	}
	waitFor(flushes)
	close(stop)
	wg.Wait()
	if len(wrong) != 0 {
		t.Fatalf("%d wrong names, first: %s", len(wrong), wrong[0])
	}
	// Each loss is reported once: by the goroutines, or, for one not
	// reported yet, by the next call.
	for name, s := range map[string]*store{"a": a, "b": b} {
		lost := 0
		retry(t, "Apply", &lost, func() error { _, err := s.Apply("x", storeOps([]kvindex.Key{1})); return err })
		if st := s.ownStats(); st.Losses != flushes || uint64(reported[s]+lost) != st.Losses {
			t.Errorf("%s: %d losses found, %d reported by the goroutines and %d after; want %d found, each reported once",
				name, st.Losses, reported[s], lost, flushes)
		}
		if _, err := s.Apply("x", storeOps([]kvindex.Key{1})); err != nil {
			t.Errorf("%s: Apply after the losses: %v", name, err)
		}
	}
}
