package kvindex

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/kvevents"
)

// recyclePrompt is 4 blocks of 4 tokens, distinct per k.
func recyclePrompt(k int) []int64 {
	p := make([]int64, 16)
	for i := range p {
		p[i] = int64(1000*k + i)
	}
	return p
}

// recycleStore has engine store recyclePrompt(k).
func recycleStore(t testing.TB, x *Index, engine string, k int) {
	t.Helper()
	u := storeBatch(recyclePrompt(k), uint64(100*k), 1)
	u.Source = engine
	if err := x.Apply(u); err != nil {
		t.Fatalf("%s stores prompt %d: %v", engine, k, err)
	}
}

func recycleDepart(t testing.TB, x *Index, engine string) {
	t.Helper()
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateDeparted, Source: engine}); err != nil {
		t.Fatalf("%s departs: %v", engine, err)
	}
}

// recycleScore is engine → maybe blocks of prompt k.
func recycleScore(t testing.TB, x *Index, k int) map[string]int {
	t.Helper()
	r, err := x.Score(ScoreRequest{Tokens: recyclePrompt(k)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range r.Engines {
		out[e.Engine] = e.MaybeBlocks
	}
	return out
}

// TestEngineNumbersRecycled (issue 36): 70,000 distinct engine names, each
// storing then departing, are all accepted (the in-memory backend numbers
// engines in 16 bits: without reusing departed engines' numbers the
// 65,537th name is refused), and the index stays exact: a long-lived
// engine keeps its blocks, each new engine holds its own, nothing of a
// departed one is left.
func TestEngineNumbersRecycled(t *testing.T) {
	x, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	recycleStore(t, x, "keeper", 0)
	const n = 70000
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("pod-%d", i)
		recycleStore(t, x, name, 1)
		if i%7000 == 0 {
			if got := recycleScore(t, x, 1); !maps.Equal(got, map[string]int{name: 4}) {
				t.Fatalf("round %d: prompt 1 held by %v, want %s only", i, got, name)
			}
		}
		recycleDepart(t, x, name)
	}
	st := x.Stats()
	if st.Errors != 0 || st.Departed != n {
		t.Fatalf("errors %d departed %d, want 0 and %d", st.Errors, st.Departed, n)
	}
	if st.Backend.Engines != 1 || st.Backend.Entries != 4 || st.Backend.Mappings != 4 || st.Backend.Blocks != 4 {
		t.Fatalf("backend %+v, want keeper's 4 entries only", st.Backend)
	}
	if got := recycleScore(t, x, 0); !maps.Equal(got, map[string]int{"keeper": 4}) {
		t.Fatalf("prompt 0 held by %v, want keeper", got)
	}
	if got := recycleScore(t, x, 1); len(got) != 0 {
		t.Fatalf("prompt 1 held by %v after every holder departed", got)
	}
	if m := x.be.(*memory); len(m.engines) > 2 {
		t.Fatalf("%d engine numbers used for 2 engines live at once", len(m.engines))
	}
}

// TestRecycledNumberNeverMisattributed (issue 36): a Score walks engine
// numbers, then names them; an engine departing meanwhile and a new one
// reusing its number must not get the blocks the walk saw (an over-claim).
// The hook departs a and makes b (taking a's number) between the walk and
// the names. Fails when Score names the numbers with the backend's live
// names (x.be.EngineName): it reports b holding a's prompt.
func TestRecycledNumberNeverMisattributed(t *testing.T) {
	x, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	m := x.be.(*memory)
	recycleStore(t, x, "a", 1)
	aid := m.engineIDs["a"]
	fired := false
	x.afterWalk = func() {
		if fired {
			return
		}
		fired = true
		recycleDepart(t, x, "a")
		recycleStore(t, x, "b", 2)
	}
	got := recycleScore(t, x, 1)
	if !fired {
		t.Fatal("the hook did not run")
	}
	if bid, ok := m.engineIDs["b"]; !ok || bid != aid {
		t.Fatalf("b has number %d (%v), want a's %d: the test did not recycle", bid, ok, aid)
	}
	if _, ok := got["b"]; ok {
		t.Fatalf("Score reported b holding a's prompt (never stored by b): %v", got)
	}
	if !maps.Equal(got, map[string]int{"a": 4}) {
		t.Fatalf("Score during the departure: %v, want a's 4 blocks as of the walk", got)
	}
	x.afterWalk = nil
	if got := recycleScore(t, x, 1); len(got) != 0 {
		t.Fatalf("after a departed: %v", got)
	}
	if got := recycleScore(t, x, 2); !maps.Equal(got, map[string]int{"b": 4}) {
		t.Fatalf("b's prompt: %v", got)
	}
}

// TestSnapshotAfterRecycling (issue 36): a snapshot of a backend with a
// reused number and a free one loads back with the same answers; the
// loaded engines are numbered densely and new engines still arrive.
func TestSnapshotAfterRecycling(t *testing.T) {
	cfg := Config{SnapshotFile: filepath.Join(t.TempDir(), "kv.snap"), Logger: slog.New(slog.DiscardHandler)}
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for k, e := range []string{"a", "b", "c"} {
		recycleStore(t, x, e, k+1)
	}
	recycleDepart(t, x, "b")
	recycleStore(t, x, "d", 4) // b's number
	recycleStore(t, x, "d", 1)
	recycleDepart(t, x, "c") // a free number, between live ones
	m := x.be.(*memory)
	if m.engineIDs["d"] != 1 || len(m.freeEngines) != 1 || len(m.engines) != 3 {
		t.Fatalf("engines %+v ids %v free %v: not the recycled layout the test needs", m.engines, m.engineIDs, m.freeEngines)
	}
	want := map[int]map[string]int{1: {"a": 4, "d": 4}, 2: {}, 3: {}, 4: {"d": 4}}
	check := func(x *Index, when string) {
		t.Helper()
		for k, w := range want {
			if got := recycleScore(t, x, k); !maps.Equal(got, w) {
				t.Fatalf("%s: prompt %d held by %v, want %v", when, k, got, w)
			}
		}
	}
	check(x, "before")
	stBefore := x.Stats().Backend
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if st := y.Stats(); st.Backend.Entries != stBefore.Entries || st.Backend.Mappings != stBefore.Mappings ||
		st.Backend.Blocks != stBefore.Blocks || st.Backend.Engines != 2 || stBefore.Engines != 2 || st.SnapshotRefused != 0 {
		t.Fatalf("loaded %+v (snapshots refused %d), before %+v", st.Backend, st.SnapshotRefused, stBefore)
	}
	check(y, "after the restart")
	if n := len(y.be.(*memory).engines); n != 2 {
		t.Fatalf("%d engine numbers after the load, want 2 (dense)", n)
	}
	recycleStore(t, y, "e", 3)
	want[3] = map[string]int{"e": 4}
	check(y, "after e arrived")
}

// TestEngineCapLogged (issue 36): with 65,536 live engines a new one is
// refused, counted in errors and logged once as a WARN naming the cap.
func TestEngineCapLogged(t *testing.T) {
	be, err := NewMemory(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < maxEngines; i++ {
		if _, err := be.Apply(fmt.Sprintf("e%d", i), nil); err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
	}
	var logs bytes.Buffer
	x, err := New(Config{Backend: be, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	defer be.Close()
	for _, e := range []string{"late-1", "late-2"} {
		u := storeBatch(recyclePrompt(1), 100, 1)
		u.Source = e
		_ = x.Apply(u)
	}
	if st := x.Stats(); st.Errors == 0 {
		t.Fatalf("engines past the cap not counted in errors: %+v", st)
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"kvindex: the in-memory backend reached its cap of live engines"); n != 1 {
		t.Fatalf("%d cap warnings, want 1; logs:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "max_engines=65536") {
		t.Fatalf("the warning does not name the cap:\n%s", logs.String())
	}
	// A departure frees a number: the next new engine is accepted.
	recycleDepart(t, x, "e7")
	recycleStore(t, x, "late-3", 1)
	if got := recycleScore(t, x, 1); !maps.Equal(got, map[string]int{"late-3": 4}) {
		t.Fatalf("prompt 1 held by %v, want late-3", got)
	}
}
