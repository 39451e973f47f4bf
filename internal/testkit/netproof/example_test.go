package netproof_test

import (
	"context"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/netproof"
)

// Two hosts on a private bridge; the second is cut off silently and healed.
// (New needs root; it skips elsewhere and fails under CI.)
func Example() {
	var t *testing.T // the test's own *testing.T
	n := netproof.New(t)
	server := n.AddHost("server", 1)
	client := n.AddHost("client", 2)
	_ = server.Command(context.Background(), "sleep", "1").Start()
	client.Partition() // every packet in and out of client is dropped
	client.Heal()
}
