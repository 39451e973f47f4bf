package kubernetes

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/zmqguard/zmqguard/kvevents"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog, which client-go imports, starts its flush daemon at init.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

func pod(ns, name, ip string, lbl map[string]string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

var llmd = map[string]string{"llm-d.ai/inference-serving": "true"}

// run starts w.Discover and returns the channel of sets and a stop function
// that ends it and checks its error.
func run(t *testing.T, w *Watcher) (<-chan []kvevents.Source, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan []kvevents.Source)
	errc := make(chan error, 1)
	go func() { errc <- w.Discover(ctx, sets) }()
	return sets, func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Discover: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Discover did not return within 10 s of its ctx ending")
		}
	}
}

// next waits (bounded) for the next set and returns its names.
func next(t *testing.T, sets <-chan []kvevents.Source) []string {
	t.Helper()
	select {
	case set := <-sets:
		names := make([]string, len(set))
		for i, s := range set {
			names[i] = s.Name
			if s.Live != s.Name {
				t.Errorf("source %q: Live %q, want the name", s.Name, s.Live)
			}
		}
		return names
	case <-time.After(10 * time.Second):
		t.Fatal("no set within 10 s")
		return nil
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestWatcherFollowsPods(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		pod("serving", "a", "10.0.0.1", llmd, corev1.PodRunning),
		pod("serving", "b", "10.0.0.2", llmd, corev1.PodPending),                // not running yet
		pod("serving", "c", "10.0.0.3", map[string]string{}, corev1.PodRunning), // not selected
		pod("other", "d", "10.0.0.4", llmd, corev1.PodRunning),                  // another namespace
	)
	w := &Watcher{Client: cs, Namespace: "serving", ReplayPort: 5558, Settle: 10 * time.Millisecond, Logger: quiet()}
	sets, stop := run(t, w)
	defer stop()
	if got := next(t, sets); strings.Join(got, " ") != "tcp://10.0.0.1:5557" {
		t.Fatalf("first set %v, want only pod a", got)
	}
	pods := cs.CoreV1().Pods("serving")
	// b starts running: it joins.
	b := pod("serving", "b", "10.0.0.2", llmd, corev1.PodRunning)
	if _, err := pods.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); strings.Join(got, " ") != "tcp://10.0.0.1:5557 tcp://10.0.0.2:5557" {
		t.Fatalf("after b runs: %v", got)
	}
	// a is deleted: it leaves.
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); strings.Join(got, " ") != "tcp://10.0.0.2:5557" {
		t.Fatalf("after a is deleted: %v", got)
	}
	// b rescheduled with a new IP: a new engine, the old endpoint leaves.
	b.Status.PodIP = "fd00::7"
	if _, err := pods.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); strings.Join(got, " ") != "tcp://[fd00::7]:5557" {
		t.Fatalf("after b moves to an IPv6 address: %v", got)
	}
	// b stops running (its engine crashed and the pod failed): it leaves.
	b.Status.Phase = corev1.PodFailed
	if _, err := pods.UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sets); len(got) != 0 {
		t.Fatalf("after b fails: %v, want none", got)
	}
	// (A label change that deselects a pod reaches the watcher as a DELETED
	// event from a real API server; client-go's fake tracker drops it
	// instead, so that case is not tested here.)
}

func TestWatcherReplayAndEngine(t *testing.T) {
	cs := fake.NewClientset(pod("", "a", "10.0.0.9", llmd, corev1.PodRunning))
	w := &Watcher{Client: cs, ReplayPort: 5558, Engine: "sglang", Port: 6000, Logger: quiet()}
	sets, stop := run(t, w)
	defer stop()
	select {
	case set := <-sets:
		want := kvevents.Source{Name: "tcp://10.0.0.9:6000", Live: "tcp://10.0.0.9:6000", Replay: "tcp://10.0.0.9:5558", Engine: "sglang"}
		if len(set) != 1 || set[0] != want {
			t.Fatalf("set %+v, want [%+v]", set, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no set within 10 s")
	}
}

func TestFollowed(t *testing.T) {
	now := metav1.Now()
	for _, c := range []struct {
		name string
		p    *corev1.Pod
		want bool
	}{
		{"running", pod("", "x", "10.1.1.1", nil, corev1.PodRunning), true},
		{"no ip", pod("", "x", "", nil, corev1.PodRunning), false},
		{"bad ip", pod("", "x", "10.1.1", nil, corev1.PodRunning), false},
		{"pending", pod("", "x", "10.1.1.1", nil, corev1.PodPending), false},
		{"succeeded", pod("", "x", "10.1.1.1", nil, corev1.PodSucceeded), false},
		{"deleting", func() *corev1.Pod {
			p := pod("", "x", "10.1.1.1", nil, corev1.PodRunning)
			p.DeletionTimestamp = &now
			return p
		}(), false},
	} {
		if got := Followed(c.p); got != c.want {
			t.Errorf("%s: Followed = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestWatcherRejectsBadFields(t *testing.T) {
	cs := fake.NewClientset()
	for _, c := range []struct {
		w    Watcher
		want string
	}{
		{Watcher{}, "Client is nil"},
		{Watcher{Client: cs, Port: 70000}, "Port 70000"},
		{Watcher{Client: cs, ReplayPort: -1}, "ReplayPort -1"},
		{Watcher{Client: cs, Selector: "a in (b"}, `Selector "a in (b"`},
		{Watcher{Client: cs, Engine: "trt"}, `Engine "trt"`},
		{Watcher{Client: cs, Settle: -time.Second}, "Settle -1s"},
	} {
		err := c.w.Discover(context.Background(), make(chan []kvevents.Source))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want it to name %q", c.w, err, c.want)
		}
	}
}
