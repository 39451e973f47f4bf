package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

var quiet = slog.New(slog.DiscardHandler)

// engine is a real kvevents.Publisher that stored two blocks of a prompt
// shared by every engine and two of its own.
type engine struct {
	pub  *kvevents.Publisher
	name string // its live endpoint: the source name discovery gives it
	own  []int64
}

// sharedPrompt is stored by every engine.
var sharedPrompt = tokens(7000, 8)

func tokens(base, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(base + i)
	}
	return out
}

// startEngine binds a publisher on live (and replay, when not "") and
// stores the shared prompt and a prompt of its own (id).
func startEngine(t *testing.T, live, replay string, id int) (*engine, error) {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: live, Bind: true, ReplayEndpoint: replay, Logger: quiet})
	if err != nil {
		return nil, err
	}
	e := &engine{pub: pub, name: pub.Endpoint(), own: tokens(100*id, 8)}
	h := uint64(id) << 8
	if err := pub.Publish(
		kvevents.Event{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: sharedPrompt,
			BlockHashes: []kvevents.Hash{kvevents.IntHash(h + 1), kvevents.IntHash(h + 2)}},
		kvevents.Event{Type: kvevents.BlockStored, BlockSize: 4, TokenIDs: e.own,
			BlockHashes: []kvevents.Hash{kvevents.IntHash(h + 3), kvevents.IntHash(h + 4)}}); err != nil {
		pub.Close()
		return nil, err
	}
	return e, nil
}

// fleet is one subscriber and in-memory index following engines.
type fleet struct {
	t   *testing.T
	x   *kvindex.Index
	sub *kvevents.Subscriber
	mu  sync.Mutex
	all map[string]*engine // every engine started, by name
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	x, err := kvindex.New(kvindex.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	sub, err := kvevents.NewSubscriber(kvevents.Config{FromStart: true, Logger: quiet,
		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) }})
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, x: x, sub: sub, all: map[string]*engine{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.all {
			e.pub.Close()
		}
	})
	return f
}

func (f *fleet) add(e *engine) {
	f.mu.Lock()
	f.all[e.name] = e
	f.mu.Unlock()
}

// scoreNames returns the engines holding all blocks of prompt (certain).
func (f *fleet) scoreNames(prompt []int64) []string {
	r, err := f.x.Score(kvindex.ScoreRequest{Tokens: prompt, BlockSize: 4})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range r.Engines {
		if e.Blocks == len(prompt)/4 {
			out = append(out, e.Engine)
		} else {
			out = append(out, e.Engine+fmt.Sprintf("(%d/%d blocks)", e.Blocks, len(prompt)/4))
		}
	}
	slices.Sort(out)
	return out
}

// exact reports whether the index holds exactly what the engines named
// want hold: each one the shared prompt and its own, nobody else anything,
// and departed engines counted. It returns a description of the difference.
func (f *fleet) exact(want []*engine, departed uint64) string {
	var names []string
	for _, e := range want {
		names = append(names, e.name)
	}
	slices.Sort(names)
	if got := f.scoreNames(sharedPrompt); !slices.Equal(got, names) {
		return fmt.Sprintf("shared prompt held by %v, want %v", got, names)
	}
	for _, e := range want {
		if got := f.scoreNames(e.own); !slices.Equal(got, []string{e.name}) {
			return fmt.Sprintf("%s's prompt held by %v", e.name, got)
		}
	}
	st := f.x.Stats()
	if st.Departed != departed {
		return fmt.Sprintf("departed %d, want %d", st.Departed, departed)
	}
	if want := int64(4 * len(want)); st.Backend.Entries != want {
		return fmt.Sprintf("%d entries, want %d", st.Backend.Entries, want)
	}
	return ""
}

// waitExact waits (at most 30 s) until the index is exact, publishing an
// empty batch on every running engine each round: a live batch is what
// shows a subscriber that joined late the batches it missed.
func (f *fleet) waitExact(what string, want []*engine, departed uint64) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		diff := f.exact(want, departed)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: the index is not exact after 30 s: %s", what, diff)
		}
		f.mu.Lock()
		for _, e := range f.all {
			_ = e.pub.Publish()
		}
		f.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// follow runs Follow until the test ends.
func (f *fleet) follow(ds ...Discoverer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, f.sub, ds...) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Follow: %v", err)
		}
	})
}

func hostOf(e *engine) string { return strings.TrimPrefix(e.name, "tcp://") }
