package kvindex_test

import (
	"sync/atomic"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

func newMemory(t *testing.T, capacity int) kvindex.Backend {
	b, err := kvindex.NewMemory(capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestMemoryConformance runs the backend conformance suite (hand-written
// rules and the model-based property test) against the memory backend.
func TestMemoryConformance(t *testing.T) {
	kvindextest.Run(t, newMemory, kvindextest.Options{})
}

// opaque hides the memory backend's type, so the index takes the generic
// path (Backend.Holders) a remote backend takes.
type opaque struct{ kvindex.Backend }

// TestGenericPathConformance runs the suite on the memory backend through
// the Backend interface alone (Score's generic Holders walk, not the
// in-memory fast path).
func TestGenericPathConformance(t *testing.T) {
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return opaque{newMemory(t, capacity)}
	}, kvindextest.Options{})
}

// prefixOnly is opaque with a PrefixHolders that leaves out everything
// kvindex.PrefixWalker allows: at key i, every holder whose engine missed
// one of the keys before it; and it stops after the first key it reports
// no holder for. calls counts the PrefixHolders calls.
type prefixOnly struct {
	opaque
	calls *atomic.Int64
}

func (p prefixOnly) PrefixHolders(keys []kvindex.Key, visit func(i int, holders []kvindex.Holder) bool) error {
	p.calls.Add(1)
	held := map[uint32]int{} // engine -> keys held in a row from keys[0]
	var kept []kvindex.Holder
	stop := false
	err := p.Holders(keys, func(i int, hs []kvindex.Holder) bool {
		kept = kept[:0]
		for _, h := range hs {
			if held[h.Engine] >= i {
				held[h.Engine] = i + 1
				kept = append(kept, h)
			}
		}
		if !visit(i, kept) || len(kept) == 0 {
			stop = true
		}
		return !stop
	})
	return err
}

// TestPrefixWalkerConformance runs the suite through the generic path with
// a kvindex.PrefixWalker that leaves out every holder it may: Score's
// answers stay the same, and Score takes PrefixHolders when a backend has
// it.
func TestPrefixWalkerConformance(t *testing.T) {
	var calls atomic.Int64
	kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
		return prefixOnly{opaque{newMemory(t, capacity)}, &calls}
	}, kvindextest.Options{})
	if calls.Load() == 0 {
		t.Fatal("Score never called PrefixHolders")
	}
}
