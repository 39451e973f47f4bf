package main

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv("FANOUT_ROLE") == "coordinator" {
		// The test binary re-executed as the coordinator child.
		if err := runChild(os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString("fanout coordinator: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The quick mode end to end (10 subscribers x 100 topics, 1 s phases): every
// phase completes, the coordinator holds every subscription, the front-end
// keeps receiving stats publications throughout, and every subscriber's
// departure is seen. It checks that the program works, never how fast.
func TestQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := io.Discard
	if testing.Verbose() {
		w = os.Stderr
	}
	cfg := defaults(true)
	res, err := Run(ctx, self, cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 5 {
		t.Fatalf("%d phases, want 5: %+v", len(res.Phases), res.Phases)
	}
	for _, p := range res.Phases {
		if !p.Complete {
			t.Errorf("phase %s did not complete within its bound", p.Name)
		}
		if p.CPU < 0 {
			t.Errorf("phase %s: no CPU figure for the child", p.Name)
		}
	}
	if res.TopicsHeld != cfg.Subs*cfg.Topics {
		t.Errorf("the coordinator holds %d subscriptions, want %d", res.TopicsHeld, cfg.Subs*cfg.Topics)
	}
	for _, i := range []int{0, 2} {
		if p := res.Phases[i]; p.Publications == 0 || p.Age.N == 0 {
			t.Errorf("phase %s: %d publications counted, %d seen by the front-end", p.Name, p.Publications, p.Age.N)
		}
	}
	if res.NormalSeconds < 0 {
		t.Errorf("publications never back to normal after the departure: %+v", res)
	}
}
