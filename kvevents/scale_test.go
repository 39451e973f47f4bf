package kvevents

import (
	"fmt"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// TestThousandSources: one Subscriber follows 1,000 sources (all dialing
// one publisher, to keep the test light); every source delivers every
// batch in order, and Stats covers all of them.
func TestThousandSources(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 sockets")
	}
	const n = 1000
	pub := newTestPublisher(t, vllm.Latest(), false)
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := sub.Add(Source{Name: fmt.Sprint("s", i), Live: pub.Endpoint()}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runSub(t, sub)
	poll.WaitFor(t, waitTimeout, "1,000 connected", func() bool { return sub.Stats().ConnectedSources == n })
	// Subscriptions may still be in flight: publish until every source has
	// three batches.
	poll.WaitFor(t, waitTimeout, "every source delivering", func() bool {
		pub.Publish(storedEvent(1))
		time.Sleep(20 * time.Millisecond)
		for i := range n {
			if rec.count(fmt.Sprint("s", i)) < 3 {
				return false
			}
		}
		return true
	})
	st := sub.Stats()
	if len(st.Sources) != n || st.Dropped.Total() != 0 {
		t.Fatalf("%d sources, drops %v", len(st.Sources), st.Dropped)
	}
	rec.mu.Lock()
	for name, seqs := range rec.batches {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] != seqs[i-1]+1 {
				t.Fatalf("%s: %v", name, seqs)
			}
		}
	}
	rec.mu.Unlock()
	if err := sub.Remove("s0"); err != nil {
		t.Fatal(err)
	}
	if len(sub.Stats().Sources) != n-1 {
		t.Fatal("Remove did not remove")
	}
	stop()
}
