package kvevents

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// holdDeparted is a Handler that records one name's updates in order and
// holds that name's UpdateDeparted call until a batch of the name comes
// in during it (a delivery rule broken: calls for one name overlap) or
// hold has passed. The hold only sets how long the test takes: a correct
// Subscriber delivers nothing for the name meanwhile, and passes whatever
// it is.
type holdDeparted struct {
	name string
	hold time.Duration

	mu       sync.Mutex
	log      []string // "departed", or "batch H" (H: the first block hash)
	inCall   int      // the name's Handler calls under way
	overlaps int
	overlap  chan struct{}
	once     sync.Once
}

func newHoldDeparted(name string, hold time.Duration) *holdDeparted {
	return &holdDeparted{name: name, hold: hold, overlap: make(chan struct{})}
}

func (h *holdDeparted) handle(_ context.Context, u Update) error {
	if u.Source != h.name {
		return nil
	}
	h.mu.Lock()
	h.inCall++
	if h.inCall > 1 {
		h.overlaps++
		h.once.Do(func() { close(h.overlap) })
	}
	entry := u.Kind
	if u.Kind == UpdateBatch && len(u.Batch.Events) > 0 && len(u.Batch.Events[0].BlockHashes) > 0 {
		entry = fmt.Sprintf("batch %d", u.Batch.Events[0].BlockHashes[0].Uint64())
	}
	h.log = append(h.log, entry)
	h.mu.Unlock()
	if u.Kind == UpdateDeparted {
		select {
		case <-h.overlap:
		case <-time.After(h.hold):
		}
	}
	h.mu.Lock()
	h.inCall--
	h.mu.Unlock()
	return nil
}

func (h *holdDeparted) snapshot() ([]string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.log...), h.overlaps
}

// has reports whether entry was logged after departed.
func (h *holdDeparted) afterDeparted(entry string) bool {
	log, _ := h.snapshot()
	seen := false
	for _, e := range log {
		seen = seen || e == UpdateDeparted
		if seen && e == entry {
			return true
		}
	}
	return false
}

// checkOrder fails unless the log is old batches, one departure, then new
// batches, with no overlapping call.
func (h *holdDeparted) checkOrder(t *testing.T, oldBatch, newBatch string) {
	t.Helper()
	log, overlaps := h.snapshot()
	if overlaps != 0 {
		t.Errorf("%d Handler calls for %s began while another was under way: %q", overlaps, h.name, log)
	}
	departed := false
	for _, e := range log {
		switch e {
		case UpdateDeparted:
			if departed {
				t.Errorf("a second departure: %q", log)
			}
			departed = true
		case oldBatch:
			if departed {
				t.Errorf("the old run's batch after its departure: %q", log)
			}
		case newBatch:
			if !departed {
				t.Errorf("the new source's batch before the old one's departure: %q", log)
			}
		}
	}
}

// TestReaddWaitsForDeparture: a source removed and added again under the
// same name (what discovery.Follow does when an engine's endpoints
// change) delivers nothing before the removed one's UpdateDeparted has
// returned: the Handler's calls for one name stay one at a time, in order
// (Config.Handler), so an index never drops the new run's blocks on the
// old run's departure.
func TestReaddWaitsForDeparture(t *testing.T) {
	h := newHoldDeparted("e", 2*time.Second)
	sub, err := NewSubscriber(Config{Handler: h.handle, Logger: quiet, EngineTTL: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		sub.Close()
		<-done
	}()
	oldP, newP := newTestPublisher(t, vllm.Latest(), false), newTestPublisher(t, vllm.Latest(), false)
	if err := sub.Add(Source{Name: "e", Live: loopback(oldP.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "the old run's batch", func() bool {
		_ = oldP.Publish(storedEvent(1))
		time.Sleep(5 * time.Millisecond)
		log, _ := h.snapshot()
		return len(log) > 0
	})
	if err := sub.Remove("e"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e", Live: loopback(newP.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "the new source's batch after the departure", func() bool {
		_ = newP.Publish(storedEvent(2))
		time.Sleep(5 * time.Millisecond)
		return h.afterDeparted("batch 2")
	})
	h.checkOrder(t, "batch 1", "batch 2")
}

// TestFanInRetiredTopicWaitsForDeparture: a fan-in engine retired after
// EngineTTL and a new engine of the same topic (its next connection) are
// one name to the Handler: the new engine's first batch comes after the
// retired one's UpdateDeparted has returned.
func TestFanInRetiredTopicWaitsForDeparture(t *testing.T) {
	const topic = "kv@127.0.0.1@m"
	h := newHoldDeparted(topic, 2*time.Second)
	sub, err := NewSubscriber(Config{Handler: h.handle, Logger: quiet, EngineTTL: 200 * time.Millisecond, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		sub.Close()
		<-done
	}()
	if err := sub.Add(Source{Name: "fan", Live: "tcp://127.0.0.1:0", FanIn: true}); err != nil {
		t.Fatal(err)
	}
	ep := sub.Endpoint("fan")
	engine := func() *Publisher {
		p, err := NewPublisher(PublisherConfig{Endpoint: ep, Topic: topic, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := engine()
	poll.WaitFor(t, waitTimeout, "the first connection's batch", func() bool {
		_ = first.Publish(storedEvent(1))
		time.Sleep(5 * time.Millisecond)
		log, _ := h.snapshot()
		return len(log) > 0
	})
	first.Close()
	// The engine is retired EngineTTL after its connection closed; its
	// departure is held while the engine comes back under the same topic.
	poll.WaitFor(t, waitTimeout, "the retirement", func() bool {
		log, _ := h.snapshot()
		return len(log) > 0 && log[len(log)-1] == UpdateDeparted
	})
	second := engine()
	defer second.Close()
	poll.WaitFor(t, waitTimeout, "the new engine's batch after the departure", func() bool {
		_ = second.Publish(storedEvent(2))
		time.Sleep(5 * time.Millisecond)
		return h.afterDeparted("batch 2")
	})
	h.checkOrder(t, "batch 1", "batch 2")
}

// TestFanInReaddWaitsForDeparture: a fan-in source removed and added again
// under its name: its engines' departures (one per topic) come before the
// new fan-in's engines deliver anything under those topics.
func TestFanInReaddWaitsForDeparture(t *testing.T) {
	const topic = "kv@127.0.0.1@m"
	h := newHoldDeparted(topic, 2*time.Second)
	sub, err := NewSubscriber(Config{Handler: h.handle, Logger: quiet, EngineTTL: -1, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		sub.Close()
		<-done
	}()
	engine := func() *Publisher {
		if err := sub.Add(Source{Name: "fan", Live: "tcp://127.0.0.1:0", FanIn: true}); err != nil {
			t.Fatal(err)
		}
		p, err := NewPublisher(PublisherConfig{Endpoint: sub.Endpoint("fan"), Topic: topic, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	first := engine()
	poll.WaitFor(t, waitTimeout, "the first fan-in's batch", func() bool {
		_ = first.Publish(storedEvent(1))
		time.Sleep(5 * time.Millisecond)
		log, _ := h.snapshot()
		return len(log) > 0
	})
	if err := sub.Remove("fan"); err != nil {
		t.Fatal(err)
	}
	second := engine()
	poll.WaitFor(t, waitTimeout, "the new fan-in's batch after the departure", func() bool {
		_ = second.Publish(storedEvent(2))
		time.Sleep(5 * time.Millisecond)
		return h.afterDeparted("batch 2")
	})
	h.checkOrder(t, "batch 1", "batch 2")
}
