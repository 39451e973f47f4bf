package kvindex_test

import (
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
