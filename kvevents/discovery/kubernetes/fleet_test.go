package kubernetes

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery"
	"github.com/zmqguard/zmqguard/kvindex"
)

// pubAt is a real publisher bound on ip:port, which stored a prompt every
// engine shares and one of its own.
type pubAt struct {
	ip   string
	pub  *kvevents.Publisher
	own  []int64
	name string // tcp://ip:port, the source name the Watcher gives it
}

var shared = seq(7000, 8)

func seq(base, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(base + i)
	}
	return out
}

func startPub(t *testing.T, ip string, port, replayPort, id int) *pubAt {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Bind: true, Logger: quiet(),
		Endpoint:       "tcp://" + net.JoinHostPort(ip, strconv.Itoa(port)),
		ReplayEndpoint: "tcp://" + net.JoinHostPort(ip, strconv.Itoa(replayPort))})
	if err != nil {
		t.Fatalf("publisher on %s:%d: %v", ip, port, err)
	}
	p := &pubAt{ip: ip, pub: pub, own: seq(100*id, 8), name: pub.Endpoint()}
	h := uint64(id) << 8
	if err := pub.Publish(
		kvevents.Event{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: shared,
			BlockHashes: []kvevents.Hash{kvevents.IntHash(h + 1), kvevents.IntHash(h + 2)}},
		kvevents.Event{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: p.own,
			BlockHashes: []kvevents.Hash{kvevents.IntHash(h + 3), kvevents.IntHash(h + 4)}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWatcherFollowsFleetIntoIndex: pods on 127.0.0.2-4 (each a real
// publisher on one port the kernel chose) join the index as the fake API
// server reports them running, and leave it (their entries dropped,
// counted as departed) when their pod fails or is deleted.
func TestWatcherFollowsFleetIntoIndex(t *testing.T) {
	// One port for every engine, as a Deployment's pods share one: the
	// kernel picks it for the first address, the others bind the same.
	// The engines stored their blocks before the index subscribed: it
	// learns them by replay (one replay port for all, chosen the same way).
	first := startPub(t, "127.0.0.2", 0, 0, 2)
	port, replayPort := portOf(t, first.name), portOf(t, first.pub.ReplayEndpoint())
	pubs := []*pubAt{first, startPub(t, "127.0.0.3", port, replayPort, 3), startPub(t, "127.0.0.4", port, replayPort, 4)}
	defer func() {
		for _, p := range pubs {
			p.pub.Close()
		}
	}()

	x, err := kvindex.New(kvindex.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	sub, err := kvevents.NewSubscriber(kvevents.Config{FromStart: true, Logger: quiet(),
		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 2)
	go func() { runErr <- sub.Run(ctx) }()

	cs := fake.NewClientset(pod("serving", "p2", "127.0.0.2", llmd, corev1.PodRunning),
		pod("serving", "p3", "127.0.0.3", llmd, corev1.PodRunning),
		pod("serving", "p4", "127.0.0.4", llmd, corev1.PodPending))
	w := Watcher{Client: cs, Namespace: "serving", Port: port, ReplayPort: replayPort, Settle: 10 * time.Millisecond, Logger: quiet()}
	go func() { runErr <- discovery.Follow(ctx, sub, w) }()
	defer func() {
		cancel()
		for range 2 {
			select {
			case err := <-runErr:
				if err != nil && err != context.Canceled {
					t.Errorf("Run/Follow: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Error("Run or Follow did not return within 20 s")
			}
		}
	}()

	// holders of a prompt's every block, certain.
	holders := func(prompt []int64) []string {
		r, err := x.Score(kvindex.ScoreRequest{Tokens: prompt, BlockSize: 4})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range r.Engines {
			out = append(out, fmt.Sprintf("%s:%d", e.Engine, e.Blocks))
		}
		slices.Sort(out)
		return out
	}
	exact := func(want []*pubAt, departed uint64) string {
		var names []string
		for _, p := range want {
			names = append(names, p.name+":2")
		}
		slices.Sort(names)
		if got := holders(shared); !slices.Equal(got, names) {
			return fmt.Sprintf("shared prompt held by %v, want %v", got, names)
		}
		for _, p := range pubs {
			got := holders(p.own)
			wantOwn := slices.Contains(want, p)
			if wantOwn && !slices.Equal(got, []string{p.name + ":2"}) || !wantOwn && len(got) != 0 {
				return fmt.Sprintf("%s's own prompt held by %v (followed: %v)", p.ip, got, wantOwn)
			}
		}
		if st := x.Stats(); st.Departed != departed {
			return fmt.Sprintf("departed %d, want %d", st.Departed, departed)
		}
		return ""
	}
	waitExact := func(what string, want []*pubAt, departed uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			diff := exact(want, departed)
			if diff == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the index is not exact within 30 s: %s", what, diff)
			}
			for _, p := range pubs {
				_ = p.pub.Publish() // a live batch shows a late subscriber what it missed
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	waitExact("two running pods", pubs[:2], 0)

	pods := cs.CoreV1().Pods("serving")
	p4 := pod("serving", "p4", "127.0.0.4", llmd, corev1.PodRunning)
	if _, err := pods.UpdateStatus(ctx, p4, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact("the third pod running", pubs, 0)

	p3 := pod("serving", "p3", "127.0.0.3", llmd, corev1.PodFailed)
	if _, err := pods.UpdateStatus(ctx, p3, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact("pod p3 failed", []*pubAt{pubs[0], pubs[2]}, 1)

	if err := pods.Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitExact("pod p2 deleted", []*pubAt{pubs[2]}, 2)
}

// portOf is the port of a tcp://host:port endpoint.
func portOf(t *testing.T, ep string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(ep[len("tcp://"):])
	if err != nil {
		t.Fatalf("endpoint %q: %v", ep, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("endpoint %q: %v", ep, err)
	}
	return n
}
