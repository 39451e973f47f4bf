package kvevents

import (
	"context"
	"errors"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"sync"
	"testing"
	"time"
)

// TestRemoveDeliversDeparted: Remove ends a source with an UpdateDeparted,
// its last Handler call, after its last batch; from inside a Handler too
// (delivered by the background stop); never after Close.
func TestRemoveDeliversDeparted(t *testing.T) {
	pubs := map[string]*Publisher{}
	for _, n := range []string{"a", "b"} {
		p, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pubs[n] = p
	}
	var mu sync.Mutex
	kinds := map[string][]string{}
	var sub *Subscriber
	removeB := make(chan struct{})
	var once sync.Once
	handler := func(_ context.Context, u Update) error {
		mu.Lock()
		kinds[u.Source] = append(kinds[u.Source], u.Kind)
		mu.Unlock()
		if u.Source == "a" && u.Kind == UpdateBatch {
			select {
			case <-removeB:
				// Remove from inside a Handler (another source's).
				once.Do(func() {
					if err := sub.Remove("b"); err != nil {
						t.Error(err)
					}
				})
			default:
			}
		}
		return nil
	}
	var err error
	sub, err = NewSubscriber(Config{Handler: handler, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for n, p := range pubs {
		if err := sub.Add(Source{Name: n, Live: p.Endpoint()}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	batches := func(n string) int {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for _, k := range kinds[n] {
			if k == UpdateBatch {
				c++
			}
		}
		return c
	}
	last := func(n string) string {
		mu.Lock()
		defer mu.Unlock()
		if l := kinds[n]; len(l) > 0 {
			return l[len(l)-1]
		}
		return ""
	}
	poll.WaitFor(t, waitTimeout, "batches of both", func() bool {
		for _, p := range pubs {
			_ = p.Publish(storedEvent(1))
		}
		time.Sleep(5 * time.Millisecond)
		return batches("a") > 0 && batches("b") > 0
	})
	// Outside a Handler: Remove does not wait (issue 40); the departure is
	// delivered once the source has stopped, and it is the last update.
	if err := sub.Remove("a"); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "a departed", func() bool { return last("a") == UpdateDeparted })
	// Inside a Handler: add "a" again, publish, and have its Handler remove "b".
	if err := sub.Add(Source{Name: "a", Live: pubs["a"].Endpoint()}); err != nil {
		t.Fatal(err)
	}
	close(removeB)
	poll.WaitFor(t, waitTimeout, "b departed", func() bool {
		_ = pubs["a"].Publish(storedEvent(2))
		_ = pubs["b"].Publish(storedEvent(2))
		time.Sleep(5 * time.Millisecond)
		return last("b") == UpdateDeparted
	})
	// Nothing for b after its departure.
	mu.Lock()
	nb := len(kinds["b"])
	mu.Unlock()
	for i := 0; i < 20; i++ {
		_ = pubs["b"].Publish(storedEvent(3))
	}
	// Close does not retire: a's last update stays a batch.
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kinds["b"]) != nb {
		t.Fatalf("b got %v after its departure", kinds["b"][nb:])
	}
	for n, l := range kinds {
		c := 0
		for _, k := range l {
			if k == UpdateDeparted {
				c++
			}
		}
		// Each removed once; the re-added "a" is closed, not removed.
		if c != 1 {
			t.Fatalf("%s: %d departures in %v, want 1", n, c, l)
		}
	}
	if l := kinds["a"]; l[len(l)-1] == UpdateDeparted {
		t.Fatalf("Close delivered a departure for a: %v", l)
	}
}
