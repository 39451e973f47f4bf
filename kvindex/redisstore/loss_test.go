package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
	"github.com/zmqguard/zmqguard/kvindex"
)

// lossBound bounds how long a test waits for a restarted server to answer
// a call again (the client reconnects on its own).
const lossBound = 30 * time.Second

// loseData makes srv lose every key, as how says: "restart" (the process
// killed and started again on the same socket, without persistence),
// "flushall" or "flushdb".
func loseData(t *testing.T, srv *redistest.Server, admin *store, how string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lossBound)
	defer cancel()
	var err error
	switch how {
	case "restart":
		err = srv.Restart()
	case "flushall":
		err = admin.client.Do(ctx, admin.client.B().Flushall().Build()).Error()
	case "flushdb":
		err = admin.client.Do(ctx, admin.client.B().Flushdb().Build()).Error()
	default:
		t.Fatalf("loseData %q", how)
	}
	if err != nil {
		t.Fatalf("%s: %v", how, err)
	}
}

// retry runs call until it returns nil or an error wrapping
// kvindex.ErrBackendLost, which it counts in *lost; other errors (a
// restarted server's closed connection) are retried for at most lossBound.
func retry(t *testing.T, what string, lost *int, call func() error) {
	t.Helper()
	deadline := time.Now().Add(lossBound)
	for {
		err := call()
		switch {
		case err == nil:
			return
		case errors.Is(err, kvindex.ErrBackendLost):
			*lost++
			continue // the loss is reported once; the call works after it
		case time.Now().After(deadline):
			t.Fatalf("%s: still failing after %v: %v", what, lossBound, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeOps returns the stores of blocks keys (engine hashes 1, 2, ...,
// chained) on GPU.
func storeOps(keys []kvindex.Key) []kvindex.Op {
	ops := make([]kvindex.Op, len(keys))
	for i, k := range keys {
		ops[i] = kvindex.Op{Kind: kvindex.OpStore, Hash: uint64(i + 1), Key: k, Medium: "GPU"}
	}
	return ops
}

// holderNames returns, per key, the engine names s gives its holders.
func holderNames(s *store, keys []kvindex.Key) ([][]string, error) {
	out := make([][]string, len(keys))
	err := s.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		for _, h := range hs {
			out[i] = append(out[i], s.EngineName(h.Engine))
		}
		return true
	})
	return out, err
}

// TestLossTwoBackends: two backends on one Redis follow different engines
// and know both engines' ids. Redis loses its data (a restart without
// persistence, FLUSHALL, FLUSHDB) and the engines are stored again in the
// other order, so their ids are swapped: without a generation each backend
// names the other backend's engine as the holder of its prompt, with no
// error. With it, each backend reports the loss once (ErrBackendLost),
// drops its tables and names every holder right.
func TestLossTwoBackends(t *testing.T) {
	for _, how := range []string{"restart", "flushall", "flushdb"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.StartT(t)
			prefix := "{" + redistest.Prefix(t) + "}"
			a := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
			b := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
			admin := newStore(t, Config{URL: srv.URL(), Prefix: prefix})
			keys := map[string][]kvindex.Key{"engine-a": {101, 102, 103, 104}, "engine-b": {201, 202, 203, 204}}
			lost := map[*store]int{}
			wrong := 0
			apply := func(s *store, engine string) {
				t.Helper()
				n := lost[s]
				retry(t, "Apply "+engine, &n, func() error { _, err := s.Apply(engine, storeOps(keys[engine])); return err })
				lost[s] = n
			}
			// check: every holder s names for engine's keys is engine, and
			// every key has one.
			check := func(s *store, engine string) {
				t.Helper()
				var names [][]string
				n := lost[s]
				retry(t, "Holders", &n, func() (err error) { names, err = holderNames(s, keys[engine]); return err })
				lost[s] = n
				for i, ns := range names {
					if len(ns) != 1 {
						t.Errorf("key %d of %s: holders %q, want one", keys[engine][i], engine, ns)
					}
					for _, name := range ns {
						if name != engine {
							wrong++
							t.Errorf("key %d of %s: holder named %q", keys[engine][i], engine, name)
						}
					}
				}
			}
			apply(a, "engine-a") // id 1
			apply(b, "engine-b") // id 2
			for _, s := range []*store{a, b} {
				check(s, "engine-a")
				check(s, "engine-b")
			}
			loseData(t, srv, admin, how)
			if how == "flushall" {
				// a's first call after the loss is a read.
				var names [][]string
				n := 0
				retry(t, "Holders after the loss", &n, func() (err error) { names, err = holderNames(a, keys["engine-a"]); return err })
				lost[a] += n
				if len(names[0]) != 0 {
					t.Errorf("after the loss a reads holders %q of a lost key", names[0])
				}
			}
			apply(b, "engine-b") // now id 1
			apply(a, "engine-a") // now id 2
			for _, s := range []*store{a, b} {
				check(s, "engine-a")
				check(s, "engine-b")
			}
			if wrong != 0 {
				t.Errorf("%d holders named with another engine's name", wrong)
			}
			if lost[a] != 1 || lost[b] != 1 {
				t.Errorf("ErrBackendLost returned %d times by a, %d by b; want once each", lost[a], lost[b])
			}
			// Later calls work on the new generation, without a loss.
			before := fmt.Sprint(lost[a], lost[b])
			apply(a, "engine-a")
			check(b, "engine-a")
			if after := fmt.Sprint(lost[a], lost[b]); after != before {
				t.Errorf("losses %s after the recovery, want %s", after, before)
			}
		})
	}
}

// TestLossOneBackendReported: one backend, Redis loses its data. The next
// batch continues a prefix stored before the loss: its parent no longer
// resolves, and without a generation nothing says why (every call
// succeeds, the continuation is an unknown parent). With it, the first
// call after the loss returns ErrBackendLost (the index then resyncs its
// sources), and the calls after it work.
func TestLossOneBackendReported(t *testing.T) {
	for _, how := range []string{"restart", "flushall"} {
		t.Run(how, func(t *testing.T) {
			srv := redistest.StartT(t)
			s := newStore(t, Config{URL: srv.URL()})
			admin := newStore(t, Config{URL: srv.URL()})
			if _, err := s.Apply("e", storeOps([]kvindex.Key{11, 12, 13, 14})); err != nil {
				t.Fatal(err)
			}
			loseData(t, srv, admin, how)
			// The continuation's batch first resolves its parent (hash 4).
			keys, found := make([]kvindex.Key, 1), make([]bool, 1)
			deadline := time.Now().Add(lossBound)
			var err error
			for {
				err = s.Resolve("e", []uint64{4}, keys, found)
				if err == nil || errors.Is(err, kvindex.ErrBackendLost) || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond) // the client reconnecting
			}
			if !errors.Is(err, kvindex.ErrBackendLost) {
				t.Fatalf("first Resolve after the loss: found %v, error %v; want an error wrapping ErrBackendLost", found[0], err)
			}
			// After a restart a pooled connection may still fail once with a
			// transport error (a broken pipe) once the loss was reported: the
			// caller retries those. What must not come is a second loss.
			if err := retryTransport(t, func() error { return s.Resolve("e", []uint64{4}, keys, found) }); err != nil || found[0] {
				t.Fatalf("Resolve after the reported loss: found %v, %v; want not found, no error", found[0], err)
			}
			tries := 0
			var c kvindex.Counts
			if err := retryTransport(t, func() (err error) {
				tries++
				c, err = s.Apply("e", storeOps([]kvindex.Key{11, 12}))
				return err
			}); err != nil || c.Added != 2 && tries == 1 {
				// (A retried Apply may find its first try applied: its
				// reply, not its script, was lost; the holders below tell.)
				t.Fatalf("Apply after the reported loss: %+v %v", c, err)
			}
			names, err := holderNames(s, []kvindex.Key{11, 12, 13})
			if err != nil || len(names[0]) != 1 || names[0][0] != "e" || len(names[2]) != 0 {
				t.Fatalf("holders after the re-store: %q %v", names, err)
			}
		})
	}
}

// retryTransport calls f until it returns nil or an error wrapping
// kvindex.ErrBackendLost (returned: a second loss report is a failure for
// the caller to see), retrying transport errors for at most lossBound.
func retryTransport(t *testing.T, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(lossBound)
	for {
		err := f()
		if err == nil || errors.Is(err, kvindex.ErrBackendLost) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
