package redisstore

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { redistest.Stop() }))
}

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
