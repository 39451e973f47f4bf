package kvevents

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

func TestEngineName(t *testing.T) {
	const topic = "kv@10.0.0.7@m"
	batch := func(rank Opt[int64]) []byte {
		return AppendBatch(nil, 1, []Event{storedEvent(1)}, rank, false)
	}
	for _, c := range []struct {
		payload []byte
		want    string
	}{
		{batch(Opt[int64]{}), topic},
		{batch(Some[int64](0)), topic},
		{batch(Some[int64](1)), topic + "/dp1"},
		{batch(Some[int64](7)), topic + "/dp7"},
		// The map form.
		{AppendBatch(nil, 1, []Event{storedEvent(1)}, Some[int64](3), true), topic + "/dp3"},
		// Not msgpack: the topic (its delivery counts the error).
		{[]byte{0xc1}, topic},
	} {
		if got := engineName(topic, c.payload); got != c.want {
			t.Errorf("engineName(% x) = %q, want %q", c.payload, got, c.want)
		}
	}
}

// TestFanInDPRanks: vLLM's data-parallel ranks of one pod publish under one
// topic, rank r from its own connection to the fan-in port + r with
// data_parallel_rank r in every batch (vLLM PR #18925), so a fleet runs one
// fan-in source per port. Each (topic, rank) is then its own engine, as
// DPSources makes each dialed rank its own source: rank 0 named by the
// topic, rank 1 by the topic + "/dp1"; their batches, stats and
// departures never share a name.
func TestFanInDPRanks(t *testing.T) {
	const topic = "kv@127.0.0.1@m"
	var mu sync.Mutex
	got := map[string][]string{} // name -> kinds
	hashes := map[string][]uint64{}
	handler := func(_ context.Context, u Update) error {
		mu.Lock()
		defer mu.Unlock()
		got[u.Source] = append(got[u.Source], u.Kind)
		if u.Kind == UpdateBatch {
			for _, ev := range u.Batch.Events {
				hashes[u.Source] = append(hashes[u.Source], ev.BlockHashes[0].Uint64())
			}
		}
		return nil
	}
	sub, err := NewSubscriber(Config{Handler: handler, Logger: quiet, EngineTTL: -1, Topic: "kv@"})
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
	// One fan-in per rank's port (the kernel picks both ports; vLLM's would
	// be P and P+1).
	for _, n := range []string{"fan-dp0", "fan-dp1"} {
		if err := sub.Add(Source{Name: n, Live: "tcp://127.0.0.1:0", FanIn: true}); err != nil {
			t.Fatal(err)
		}
	}
	ranks := make([]*Publisher, 2)
	for r := range ranks {
		// The rank's endpoint is already its own port; the payloads carry
		// the rank (PublishRaw), as vLLM's rank-r publisher writes them.
		p, err := NewPublisher(PublisherConfig{Endpoint: sub.Endpoint("fan-dp" + string(rune('0'+r))), Topic: topic, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ranks[r] = p
	}
	names := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for n := range got {
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	want := []string{topic, topic + "/dp1"}
	poll.WaitFor(t, waitTimeout, "both ranks' batches", func() bool {
		for r, p := range ranks {
			h := uint64(100*r + 1)
			if err := p.PublishRaw(AppendBatch(nil, 1, []Event{storedEvent(h)}, Some(int64(r)), false)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		var all []uint64
		for _, hs := range hashes {
			all = append(all, hs...)
		}
		return slices.Contains(all, 1) && slices.Contains(all, 101)
	})
	if n := names(); !slices.Equal(n, want) {
		t.Fatalf("the Handler saw engines %q, want %q", n, want)
	}
	mu.Lock()
	for name, hs := range hashes {
		wantH := uint64(1)
		if name == topic+"/dp1" {
			wantH = 101
		}
		for _, h := range hs {
			if h != wantH {
				t.Errorf("%s delivered block %d, another rank's", name, h)
			}
		}
	}
	mu.Unlock()
	var engines []string
	for _, s := range sub.Stats().Sources {
		if s.Name != "fan-dp0" && s.Name != "fan-dp1" {
			engines = append(engines, s.Name)
		}
	}
	slices.Sort(engines)
	if !slices.Equal(engines, want) {
		t.Errorf("Stats engines %q, want %q", engines, want)
	}
	// Removing a rank's fan-in departs that rank's engine alone.
	if err := sub.Remove("fan-dp1"); err != nil {
		t.Fatal(err)
	}
	departed := func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got[name], UpdateDeparted)
	}
	poll.WaitFor(t, waitTimeout, "rank 1's departure", func() bool { return departed(topic + "/dp1") })
	if departed(topic) {
		t.Errorf("rank 0 departed with rank 1's fan-in")
	}
}
