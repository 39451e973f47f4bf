package discovery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// chanDiscoverer sends what the test gives it.
type chanDiscoverer struct {
	in  chan []kvevents.Source
	err error // returned once in is closed
}

func (c chanDiscoverer) Discover(ctx context.Context, sets chan<- []kvevents.Source) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-c.in:
			if !ok {
				return c.err
			}
			select {
			case sets <- s:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// updates records the Handler's departures.
type updates struct {
	mu       sync.Mutex
	departed []string
}

func (u *updates) handle(_ context.Context, up kvevents.Update) error {
	if up.Kind == kvevents.UpdateDeparted {
		u.mu.Lock()
		u.departed = append(u.departed, up.Source)
		u.mu.Unlock()
	}
	return nil
}

func (u *updates) list() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.departed)
}

func followed(sub *kvevents.Subscriber) []string {
	var out []string
	for _, s := range sub.Stats().Sources {
		out = append(out, s.Name+"="+s.Live+"|"+s.Replay)
	}
	return out
}

// TestFollow: sets from two discoverers become one union of sources;
// joins and leaves are logged once each; an endpoint change is a remove
// and an add; an Add refused is logged once and tried again; a source
// Follow did not add is never removed; a discoverer's error ends Follow.
func TestFollow(t *testing.T) {
	up := &updates{}
	// Follow logs to the Subscriber's logger, never to slog.Default.
	logs, dflt := &logCapture{}, &logCapture{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(dflt, nil)))
	defer slog.SetDefault(old)
	sub, err := kvevents.NewSubscriber(kvevents.Config{Handler: up.handle, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	defer func() {
		sub.Close()
		<-runDone
	}()
	// A source added by hand, outside Follow, under a name a discoverer
	// will also report.
	if err := sub.Add(kvevents.Source{Name: "tcp://127.0.0.1:9", Live: "tcp://127.0.0.1:9"}); err != nil {
		t.Fatal(err)
	}
	a := chanDiscoverer{in: make(chan []kvevents.Source)}
	b := chanDiscoverer{in: make(chan []kvevents.Source), err: errors.New("b broke")}
	fdone := make(chan error, 1)
	go func() { fdone <- Follow(ctx, sub, a, b) }()
	src := func(live, replay string) kvevents.Source { return kvevents.Source{Live: live, Replay: replay} }
	want := func(what string, names ...string) {
		t.Helper()
		slices.Sort(names)
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := followed(sub)
			if slices.Equal(got, names) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: following %v, want %v", what, got, names)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	manual := "tcp://127.0.0.1:9=tcp://127.0.0.1:9|"
	a.in <- []kvevents.Source{src("tcp://127.0.0.1:1", ""), src("tcp://127.0.0.1:2", "tcp://127.0.0.1:3"), src("tcp://127.0.0.1:1", "tcp://127.0.0.1:7")}
	want("a's first set", manual, "tcp://127.0.0.1:1=tcp://127.0.0.1:1|", "tcp://127.0.0.1:2=tcp://127.0.0.1:2|tcp://127.0.0.1:3")
	// b reports the hand-added name (refused: logged once, twice sent) and a new one.
	b.in <- []kvevents.Source{src("tcp://127.0.0.1:9", ""), src("tcp://127.0.0.1:4", "")}
	b.in <- []kvevents.Source{src("tcp://127.0.0.1:9", ""), src("tcp://127.0.0.1:4", "")}
	want("b's set", manual, "tcp://127.0.0.1:1=tcp://127.0.0.1:1|", "tcp://127.0.0.1:2=tcp://127.0.0.1:2|tcp://127.0.0.1:3",
		"tcp://127.0.0.1:4=tcp://127.0.0.1:4|")
	// a: :1 leaves, :2's replay endpoint changes.
	a.in <- []kvevents.Source{src("tcp://127.0.0.1:2", "tcp://127.0.0.1:5")}
	want("a's second set", manual, "tcp://127.0.0.1:2=tcp://127.0.0.1:2|tcp://127.0.0.1:5", "tcp://127.0.0.1:4=tcp://127.0.0.1:4|")
	// :1 and the old :2 were removed (the set above says so). Their
	// endpoints never answered, so they never delivered anything: Remove
	// gives no UpdateDeparted for a source that held nothing (kvevents'
	// rule), and none came. (The fleet tests check departures of engines
	// that did deliver.)
	if got := up.list(); len(got) != 0 {
		t.Fatalf("departed %v for sources that never delivered", got)
	}
	// b fails: Follow returns its error, leaving the sources followed.
	close(b.in)
	select {
	case err := <-fdone:
		if err == nil || err.Error() != "b broke" {
			t.Fatalf("Follow returned %v, want b's error", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Follow did not return after its discoverer failed")
	}
	want("after Follow", manual, "tcp://127.0.0.1:2=tcp://127.0.0.1:2|tcp://127.0.0.1:5", "tcp://127.0.0.1:4=tcp://127.0.0.1:4|")
	for msg, n := range map[string]int{
		`"msg":"discovery: engine joined","source":"tcp://127.0.0.1:1"`:                     1,
		`"msg":"discovery: engine joined","source":"tcp://127.0.0.1:2"`:                     2,
		`"msg":"discovery: engine joined","source":"tcp://127.0.0.1:4"`:                     1,
		`"msg":"discovery: engine left","source":"tcp://127.0.0.1:1"`:                       1,
		`"msg":"discovery: engine left","source":"tcp://127.0.0.1:2"`:                       1,
		`"source":"tcp://127.0.0.1:2","live":"tcp://127.0.0.1:2","why":"endpoints changed"`: 1,
		`"source":"tcp://127.0.0.1:9"`:                                                      1,
	} {
		if got := logs.count(msg); got != n {
			t.Errorf("%s logged %d times, want %d", msg, got, n)
		}
	}
	if n := dflt.count(`"msg"`); n != 0 {
		t.Errorf("%d lines went to slog.Default, not the Subscriber's logger", n)
	}
	if err := Follow(ctx, sub); err == nil {
		t.Error("Follow without a discoverer accepted")
	}
	if err := Follow(ctx, nil, a); err == nil {
		t.Error("Follow without a subscriber accepted")
	}
}
