package poll_test

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// printT stands in for the *testing.T a test passes.
type printT struct{}

func (printT) Helper()                      {}
func (printT) Fatalf(f string, args ...any) { fmt.Printf("FATAL "+f+"\n", args...) }

// A test waits for what it needs, bounded and named; a condition that never
// holds fails the test when the time is up.
func Example() {
	var t printT
	var connected atomic.Bool
	go connected.Store(true) // the peer, connecting
	poll.WaitFor(t, 10*time.Second, "the peer to connect", connected.Load)
	fmt.Println("connected:", connected.Load())
	poll.WaitFor(t, 10*time.Millisecond, "a peer that never comes", func() bool { return false })
	// Output:
	// connected: true
	// FATAL timed out after 10ms waiting for a peer that never comes
}
