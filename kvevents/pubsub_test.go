package kvevents

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

func newTestPublisher(t *testing.T, rel vllm.Release, replay bool) *Publisher {
	t.Helper()
	cfg := PublisherConfig{Release: rel, Endpoint: "tcp://127.0.0.1:0", Bind: true, Topic: "kv@pod@m", Logger: quiet}
	if replay {
		cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	}
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func loopback(ep string) string {
	// "tcp://[::]:port" or "tcp://0.0.0.0:port" -> loopback
	for i := len(ep) - 1; i >= 0; i-- {
		if ep[i] == ':' {
			return "tcp://127.0.0.1" + ep[i:]
		}
	}
	return ep
}

// TestPublisherToSubscriberReplay: batches published before the subscriber
// joins are recovered by replay (FromStart), then live ones follow, each
// exactly once and in order, for both vLLM releases' bytes.
func TestPublisherToSubscriberReplay(t *testing.T) {
	for _, name := range []string{"latest", "0.25"} {
		t.Run(name, func(t *testing.T) {
			rel, err := vllm.Parse(name)
			if err != nil {
				t.Fatal(err)
			}
			pub := newTestPublisher(t, rel, true)
			for i := 0; i < 300; i++ {
				if err := pub.Publish(storedEvent(uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			poll.WaitFor(t, waitTimeout, "publisher to send 300", func() bool { return pub.Stats().Published == 300 })
			rec := newRecorder()
			sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, FromStart: true, Topic: "kv@"})
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint()), Replay: pub.ReplayEndpoint()}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- sub.Run(ctx) }()
			// Keep publishing until the subscriber has seen well past the
			// first 300 (live traffic is what reveals the gap).
			next := 300
			poll.WaitFor(t, waitTimeout, "delivery", func() bool {
				pub.Publish(storedEvent(uint64(next)))
				next++
				time.Sleep(5 * time.Millisecond)
				return rec.count("e0") >= 320
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			lines := rec.snapshot()
			for i, l := range lines {
				want := fmt.Sprintf("e0 batch %d ts=", i)
				if len(l) < len(want) || l[:len(want)] != want {
					t.Fatalf("line %d: %q (want prefix %q)", i, l, want)
				}
				if tail := fmt.Sprintf("BlockStored:%d", i); l[len(l)-len(tail):] != tail {
					t.Fatalf("line %d: %q", i, l)
				}
			}
			st := sub.Stats()
			if st.Replayed < 300 || st.Lost != 0 || st.Gaps < 1 || st.Replays < 1 {
				t.Fatalf("stats %+v", st)
			}
			if len(st.Sources) != 1 || st.Sources[0].Name != "e0" {
				t.Fatalf("sources %+v", st.Sources)
			}
			if err := sub.Add(Source{Live: "tcp://127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
				t.Fatalf("Add after Run: %v", err)
			}
		})
	}
}

// TestAddRemoveWhileRunning adds and removes sources during Run.
func TestAddRemoveWhileRunning(t *testing.T) {
	pubs := []*Publisher{newTestPublisher(t, vllm.Latest(), false), newTestPublisher(t, vllm.Latest(), false)}
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	for i, p := range pubs {
		if err := sub.Add(Source{Name: fmt.Sprint("p", i), Live: loopback(p.Endpoint())}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Add(Source{Name: "p0", Live: "tcp://127.0.0.1:1"}); !errors.Is(err, errDuplicateSource) {
		t.Fatalf("duplicate: %v", err)
	}
	poll.WaitFor(t, waitTimeout, "both sources", func() bool {
		pubs[0].Publish(storedEvent(1))
		pubs[1].Publish(storedEvent(2))
		time.Sleep(5 * time.Millisecond)
		return rec.count("p0") > 3 && rec.count("p1") > 3
	})
	if err := sub.Remove("p0"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Remove("p0"); !errors.Is(err, errUnknownSource) {
		t.Fatalf("second remove: %v", err)
	}
	st := sub.Stats()
	if len(st.Sources) != 1 || st.Sources[0].Name != "p1" || !st.Sources[0].Connected || st.Sources[0].LastSeen.IsZero() {
		t.Fatalf("stats %+v", st.Sources)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHandlerErrorEndsRun: a handler error is returned by Run.
func TestHandlerErrorEndsRun(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), false)
	boom := errors.New("boom")
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(context.Context, Update) error { return boom }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Live: loopback(pub.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	for {
		pub.Publish(storedEvent(1))
		select {
		case err := <-done:
			if !errors.Is(err, boom) {
				t.Fatalf("Run: %v", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("Run did not end")
		}
	}
}

// TestBindSourcePublisherConnects: vLLM connects its PUB when the endpoint
// names a host; the Subscriber then binds (Source.Bind), and the Go
// Publisher follows the same rule.
func TestBindSourcePublisherConnects(t *testing.T) {
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "b", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	pub, err := NewPublisher(PublisherConfig{Endpoint: sub.Endpoint("b"), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if pub.Endpoint() != "" {
		t.Fatalf("publisher bound %s", pub.Endpoint())
	}
	poll.WaitFor(t, waitTimeout, "delivery over a connecting publisher", func() bool {
		pub.Publish(storedEvent(1))
		time.Sleep(5 * time.Millisecond)
		return rec.count("b") >= 5
	})
	stop()
}

func TestOffsetPort(t *testing.T) {
	for _, c := range [][3]string{{"tcp://*:5557", "2", "tcp://*:5559"}, {"tcp://h:5557", "0", "tcp://h:5557"},
		{"inproc://cache", "1", "inproc://cache_dp1"}, {"", "3", ""}} {
		r := int(c[1][0] - '0')
		got, err := offsetPort(c[0], r)
		if err != nil || got != c[2] {
			t.Errorf("offsetPort(%q, %d) = %q, %v", c[0], r, got, err)
		}
	}
	if _, err := offsetPort("ipc:///tmp/x", 1); err == nil {
		t.Error("ipc offset accepted")
	}
}

// TestStalledReplayClient: a replay client that never reads holds up
// neither live publishing nor another replay client.
func TestStalledReplayClient(t *testing.T) {
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, ReplayEndpoint: "tcp://127.0.0.1:0",
		BufferSteps: 3000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p, _ := realisticBatch(1)
	for range 3000 {
		if err := pub.PublishRaw(p); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "3000 published", func() bool { return pub.Stats().Published == 3000 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := make([]byte, 8)
	stalled, _ := socket.New("DEALER", socket.DefaultOptions())
	defer stalled.Close()
	stalled.Dial(pub.ReplayEndpoint())
	if err := stalled.Send(ctx, nil, req); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "the stalled client's replay", func() bool { return pub.Stats().Replays == 1 })
	healthy, _ := socket.New("DEALER", socket.DefaultOptions())
	defer healthy.Close()
	healthy.Dial(pub.ReplayEndpoint())
	if err := healthy.Send(ctx, nil, req); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := healthy.Recv(ctx)
		if err != nil {
			t.Fatalf("healthy client after %d replies: %v", n, err)
		}
		if len(m.Frames) == 4 && len(m.Frames[3]) == 0 && m.Frames[2][0] == 0xff {
			break
		}
		n++
	}
	if n != 3000 {
		t.Fatalf("healthy client got %d batches", n)
	}
	for range 10 {
		pub.PublishRaw(p)
	}
	poll.WaitFor(t, waitTimeout, "live publishing", func() bool { return pub.Stats().Published == 3010 })
}

func TestDPSources(t *testing.T) {
	srcs, err := DPSources("pod", "tcp://10.0.0.1:5557", "tcp://10.0.0.1:5657", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []Source{{Name: "pod/dp0", Live: "tcp://10.0.0.1:5557", Replay: "tcp://10.0.0.1:5657"},
		{Name: "pod/dp1", Live: "tcp://10.0.0.1:5558", Replay: "tcp://10.0.0.1:5658"},
		{Name: "pod/dp2", Live: "tcp://10.0.0.1:5559", Replay: "tcp://10.0.0.1:5659"}}
	if !reflect.DeepEqual(srcs, want) {
		t.Fatalf("got %+v", srcs)
	}
	if _, err := DPSources("pod", "tcp://h:5557", "", 0); err == nil {
		t.Fatal("0 ranks accepted")
	}
}
