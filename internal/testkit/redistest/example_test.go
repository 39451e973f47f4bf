package redistest_test

import (
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/redistest"
)

// A test that needs a real Redis: the test binary's shared server (a
// UNIX socket in a temporary directory), killed by redistest.Stop in
// TestMain; without redis-server the test skips loudly, under CI it fails.
func Example() {
	var t *testing.T // the test's own *testing.T
	srv := redistest.Require(t)
	_ = srv.URL()              // unix:///tmp/zgredis.../redis.sock
	_ = redistest.Prefix(t)    // a key prefix no other test of the binary uses
	own := redistest.StartT(t) // or a server of its own, closed with the test
	_ = own.Socket()
	cl := redistest.RequireCluster(t) // the binary's shared 3-node Redis Cluster
	_ = cl.URL()                      // redis://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
	_ = cl.Restart(0)                 // node 0 restarts empty, serving its slots again
}
