package kvevents

import (
	"context"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/zmqguard/zmqguard/vllm"
)

// FuzzParseTopic: parseTopic never panics, and what it accepts is exactly
// kv@{host}@{model} with a host it may put in an endpoint (no '@', '/',
// spaces or control bytes) and a model of printable UTF-8.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"kv@10.0.0.7@meta-llama/Llama-3.1-8B", "kv@fd00::1@m", "kv@pod-a.ns.svc@Qwen/Qwen3-32B",
		"kv@@m", "kv@h@", "kv@h", "kv-events", "", "kv@h@m@x", "kv@h/x@m", "kv@h@m\x00", "kv@h@m\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		host, model, ok := parseTopic(topic)
		if !ok {
			if host != "" || model != "" {
				t.Fatalf("%q refused but returned %q %q", topic, host, model)
			}
			return
		}
		if "kv@"+host+"@"+model != topic {
			t.Fatalf("%q taken apart as %q %q", topic, host, model)
		}
		if host == "" || model == "" || strings.ContainsAny(host, "@/ []{}") || !utf8.ValidString(model) {
			t.Fatalf("%q accepted with host %q model %q", topic, host, model)
		}
		for _, r := range host + model {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("%q accepted with a control character", topic)
			}
		}
		if ep := replayFor("tcp://{host}:5558", host, ok); !strings.HasPrefix(ep, "tcp://") || strings.Contains(ep, "{host}") {
			t.Fatalf("%q: replay endpoint %q", topic, ep)
		}
	})
}

func TestParseTopic(t *testing.T) {
	for _, c := range []struct {
		topic, host, model, replay string
		ok                         bool
	}{
		{"kv@10.0.0.7@meta-llama/Llama-3.1-8B", "10.0.0.7", "meta-llama/Llama-3.1-8B", "tcp://10.0.0.7:5558", true},
		{"kv@fd00::1@m", "fd00::1", "m", "tcp://[fd00::1]:5558", true},
		{"kv@pod-0.svc@m@x", "pod-0.svc", "m@x", "tcp://pod-0.svc:5558", true},
		{"kv-events", "", "", "", false},
		{"kv@@m", "", "", "", false},
		{"kv@h@", "", "", "", false},
		{"kv@h x@m", "", "", "", false},
		{"kv@h@m\n", "", "", "", false},
	} {
		host, model, ok := parseTopic(c.topic)
		if host != c.host || model != c.model || ok != c.ok {
			t.Errorf("parseTopic(%q) = %q %q %v, want %q %q %v", c.topic, host, model, ok, c.host, c.model, c.ok)
		}
		if got := replayFor("tcp://{host}:5558", host, ok); got != c.replay {
			t.Errorf("replay endpoint of %q: %q, want %q", c.topic, got, c.replay)
		}
	}
}

func TestCheckFanIn(t *testing.T) {
	for _, src := range []Source{
		{Name: "a", Live: "tcp://127.0.0.1:0", ReplayTemplate: "tcp://{host}:1"},
		{Name: "a", Live: "tcp://127.0.0.1:0", FanIn: true, Bind: true},
		{Name: "a", Live: "tcp://127.0.0.1:0", FanIn: true, Replay: "tcp://127.0.0.1:1"},
		{Name: "a", Live: "tcp://127.0.0.1:0", FanIn: true, ReplayTemplate: "tcp://10.0.0.1:5558"},
	} {
		if err := checkFanIn(src); err == nil {
			t.Errorf("%+v accepted", src)
		}
	}
	if err := checkFanIn(Source{Name: "a", Live: "tcp://127.0.0.1:0", FanIn: true, ReplayTemplate: "tcp://{host}:5558"}); err != nil {
		t.Error(err)
	}
}

// ttlSubscriber runs a Subscriber with EngineTTL ttl recording into rec.
func ttlSubscriber(t *testing.T, ttl time.Duration, rec *recorder) *Subscriber {
	t.Helper()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, EngineTTL: ttl, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sub
}

// publishTill publishes on p until rec has seen a batch of src.
func publishTill(t *testing.T, p *Publisher, rec *recorder, src string) {
	t.Helper()
	poll.WaitFor(t, waitTimeout, src+" delivery", func() bool {
		if err := p.Publish(storedEvent(1)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		return rec.count(src) > 0
	})
}

// TestEngineTTLDialed: a dialed source whose publisher is gone for
// EngineTTL gets one UpdateDeparted and starts again from nothing; one
// whose publisher stays connected, idle, gets none.
func TestEngineTTLDialed(t *testing.T) {
	rec := newRecorder()
	sub := ttlSubscriber(t, 300*time.Millisecond, rec)
	idle, gone := newTestPublisher(t, vllm.Latest(), false), newTestPublisher(t, vllm.Latest(), false)
	for name, p := range map[string]*Publisher{"idle": idle, "gone": gone} {
		if err := sub.Add(Source{Name: name, Live: loopback(p.Endpoint())}); err != nil {
			t.Fatal(err)
		}
	}
	publishTill(t, idle, rec, "idle")
	publishTill(t, gone, rec, "gone")
	gone.Close()
	poll.WaitFor(t, waitTimeout, "gone's departure", func() bool { return rec.has("gone departed") })
	if rec.has("idle departed") {
		t.Errorf("idle, connected, was retired: %q", rec.snapshot())
	}
	st := sub.Stats()
	for _, s := range st.Sources {
		want := uint64(0)
		if s.Name == "gone" {
			want = 1
		}
		if s.Departed != want {
			t.Errorf("%s: Departed %d, want %d", s.Name, s.Departed, want)
		}
	}
	// Once only: no second departure while it stays gone, none from
	// Remove (nothing held). Remove("idle") departs; once that is seen,
	// a departure of "gone" from its Remove would have been delivered
	// before it (both on the Subscriber's goroutines, one after the other
	// here).
	if err := sub.Remove("gone"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Remove("idle"); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "idle's departure", func() bool { return rec.has("idle departed") })
	if n := rec.countLines("gone departed"); n != 1 {
		t.Errorf("gone departed %d times, want 1 (Remove of a retired source has nothing to drop): %q", n, rec.snapshot())
	}
}

// TestRemoveDeparts: Remove delivers UpdateDeparted as the source's last
// update.
func TestRemoveDeparts(t *testing.T) {
	rec := newRecorder()
	sub := ttlSubscriber(t, -1, rec)
	p := newTestPublisher(t, vllm.Latest(), false)
	if err := sub.Add(Source{Name: "e", Live: loopback(p.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	publishTill(t, p, rec, "e")
	if err := sub.Remove("e"); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "e's departure", func() bool { return rec.has("e departed") })
	lines := rec.snapshot()
	if len(lines) == 0 || lines[len(lines)-1] != "e departed" || rec.countLines("e departed") != 1 {
		t.Errorf("updates %q, want the last one \"e departed\", once", lines)
	}
}
