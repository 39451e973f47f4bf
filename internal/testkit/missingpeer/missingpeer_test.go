package missingpeer

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMessage(t *testing.T) {
	got := Message("TestX", "redis-server not found", "redis-server")
	want := "MISSING PEER: TestX: redis-server not found; install it with `apt-get install redis-server`"
	if got != want {
		t.Fatalf("%q, want %q", got, want)
	}
}

// recorder is a testing.TB that records Skip and Fatal instead of ending
// the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()        {}
func (r *recorder) Name() string   { return "TestPeer" }
func (r *recorder) Skip(a ...any)  { r.skipped = fmt.Sprint(a...) }
func (r *recorder) Fatal(a ...any) { r.failed = fmt.Sprint(a...) }

// TestSkipOrFail: without CI a missing peer skips with the marker; with CI
// set it fails, with the marker too.
func TestSkipOrFail(t *testing.T) {
	const msg = "MISSING PEER: TestPeer: nothing; install it with `apt-get install pkg`"
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Skip(r, "nothing", "pkg")
	if r.skipped != msg || r.failed != "" {
		t.Errorf("without CI: skipped %q, failed %q", r.skipped, r.failed)
	}
	t.Setenv("CI", "1")
	r = &recorder{TB: t}
	Skip(r, "nothing", "pkg")
	if r.skipped != "" || r.failed != msg+" (CI is set: a missing peer is a failure, not a skip)" {
		t.Errorf("with CI: skipped %q, failed %q", r.skipped, r.failed)
	}
}
