package redisstore

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closingM{m}, goleak.Cleanup(func(code int) { redistest.Stop(); os.Exit(code) }))
}

// closingM runs the tests, then closes what the benchmarks kept for the
// whole run (before goleak looks for goroutines).
type closingM struct{ m *testing.M }

func (c closingM) Run() int {
	code := c.m.Run()
	if closeShardFixture() {
		// A cluster client closes the connections a topology refresh
		// dropped 5 s later, in a goroutine of its own: wait for them to
		// be closed (their goroutines gone).
		buf := make([]byte, 1<<20)
		poll.WaitFor(mainT{}, 15*time.Second, "rueidis's delayed connection closes", func() bool {
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "github.com/redis/rueidis.")
		})
	}
	return code
}

// mainT is poll's T outside a test: a timeout is printed (goleak then
// reports the goroutines).
type mainT struct{}

func (mainT) Helper() {}

func (mainT) Fatalf(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }

// newStore returns a store on the test binary's redis-server under a
// prefix of its own.
func newStore(t testing.TB, cfg Config) *store {
	t.Helper()
	srv := redistest.Require(t)
	if cfg.URL == "" && cfg.Client == nil {
		cfg.URL = srv.URL()
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "{" + redistest.Prefix(t) + "}"
	}
	s, err := open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
