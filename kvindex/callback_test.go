package kvindex_test

import (
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/kvindex"
)

// TestOnBackendLostCallsStatsAndClose: Config.OnBackendLost runs under no
// lock of the index and on no path Close waits for, so it may call Stats
// and Close. Fails on the code before issue 40: Close waited for the
// OnBackendLost goroutines, the caller's among them, and never returned.
func TestOnBackendLostCallsStatsAndClose(t *testing.T) {
	be := newLossy(t)
	var x *kvindex.Index
	probe := reentrytest.NewProbe(func() kvindex.Stats { return x.Stats() }, func() error { return x.Close() })
	x, err := kvindex.New(kvindex.Config{Backend: be, Logger: quiet, OnBackendLost: probe.Act})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, x, storeUpdate("a", 1, 4, 1))
	be.lose()
	if err := x.Apply(storeUpdate("a", 1, 4, 2)); !errors.Is(err, kvindex.ErrBackendLost) {
		t.Fatalf("apply after the loss: %v, want ErrBackendLost", err)
	}
	if st := probe.Closed(t, "OnBackendLost"); st.BackendLosses != 1 {
		t.Fatalf("Stats from OnBackendLost: BackendLosses %d, want 1", st.BackendLosses)
	}
	reentrytest.CloseAgain(t, x.Close)
}
