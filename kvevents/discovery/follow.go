package discovery

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// Follow keeps sub following exactly the sources the discoverers report,
// until ctx ends (it returns nil), a discoverer fails (it returns that
// error) or sub is closed (kvevents.ErrClosed).
//
// The sources followed are the union of the latest set of each discoverer
// (a discoverer that has not reported yet counts as reporting nothing).
// Each time a set arrives Follow diffs the union against what it added
// before, by source name (Source.Name, or Source.Live when the name is
// empty, as Subscriber.Add names it): a new name is added
// (Subscriber.Add), a name gone is removed (Subscriber.Remove: the
// Handler gets its UpdateDeparted, so an index drops the engine), and a
// name whose endpoints changed (Live, Replay, Bind or Engine) is removed,
// then added. Each join and leave is logged once, at INFO, to sub's logger
// (kvevents.Config.Logger). A source Add
// refuses (a name sub already follows outside Follow, a bad endpoint) is
// logged once per distinct error and tried again at the next set. Within
// one union the first source of a name wins. Source.Resume is given to
// Add as it is (the first time a name is added), never compared.
//
// Follow removes only sources it added, and leaves them followed when it
// returns: sub's Close (or Run's end) stops them. Run sub concurrently;
// Follow adds sources before or while it runs.
func Follow(ctx context.Context, sub *kvevents.Subscriber, ds ...Discoverer) error {
	if sub == nil {
		return errors.New("discovery: Follow: nil Subscriber")
	}
	if len(ds) == 0 {
		return errors.New("discovery: Follow: no Discoverer")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type report struct {
		i   int
		set []kvevents.Source
	}
	reports := make(chan report)
	errs := make(chan error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		sets := make(chan []kvevents.Source)
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(sets)
			err := d.Discover(ctx, sets)
			if err != nil && ctx.Err() == nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			for set := range sets {
				select {
				case reports <- report{i, set}:
				case <-ctx.Done():
					// Drain until Discover returns (it sees ctx too).
				}
			}
		}()
	}
	defer func() {
		cancel() // the discoverers end first
		wg.Wait()
	}()
	f := &follower{sub: sub, log: sub.Logger(), latest: make([][]kvevents.Source, len(ds)),
		current: map[string]kvevents.Source{}, failed: map[string]string{}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case r := <-reports:
			f.latest[r.i] = r.set
			if err := f.apply(); err != nil {
				return err
			}
		}
	}
}

// follower is Follow's state, used by its goroutine only.
type follower struct {
	sub     *kvevents.Subscriber
	log     *slog.Logger
	latest  [][]kvevents.Source
	current map[string]kvevents.Source // added by Follow, by name
	failed  map[string]string          // name → the last Add error logged
}

// nameOf is the name Subscriber.Add gives src.
func nameOf(src kvevents.Source) string {
	if src.Name == "" {
		return src.Live
	}
	return src.Name
}

// sameEndpoints reports whether a and b connect the same way.
func sameEndpoints(a, b kvevents.Source) bool {
	return a.Live == b.Live && a.Replay == b.Replay && a.Bind == b.Bind && a.Engine == b.Engine
}

// apply diffs the union of the latest sets against current.
func (f *follower) apply() error {
	want := map[string]kvevents.Source{}
	var order []string
	for _, set := range f.latest {
		for _, src := range set {
			n := nameOf(src)
			if _, dup := want[n]; dup || n == "" {
				continue
			}
			src.Name = n
			want[n] = src
			order = append(order, n)
		}
	}
	var gone []string
	for n, cur := range f.current {
		if w, ok := want[n]; !ok || !sameEndpoints(cur, w) {
			gone = append(gone, n)
		}
	}
	slices.Sort(gone)
	for _, n := range gone {
		cur := f.current[n]
		delete(f.current, n)
		err := f.sub.Remove(n)
		if errors.Is(err, kvevents.ErrClosed) {
			return err
		}
		why := "no longer listed"
		if _, ok := want[n]; ok {
			why = "endpoints changed"
		}
		f.log.Info("discovery: engine left", "source", ratelog.Escape(n, 256), "live", ratelog.Escape(cur.Live, 256), "why", why)
	}
	for n := range f.failed {
		if _, ok := want[n]; !ok {
			delete(f.failed, n)
		}
	}
	for _, n := range order {
		if _, ok := f.current[n]; ok {
			continue
		}
		src := want[n]
		if err := f.sub.Add(src); err != nil {
			if errors.Is(err, kvevents.ErrClosed) {
				return err
			}
			if msg := err.Error(); f.failed[n] != msg {
				f.failed[n] = msg
				f.log.Warn("discovery: engine not followed (tried again at the next change)", "source", ratelog.Escape(n, 256),
					"err", ratelog.Escape(msg, 512))
			}
			continue
		}
		delete(f.failed, n)
		f.current[n] = src
		f.log.Info("discovery: engine joined", "source", ratelog.Escape(n, 256), "live", ratelog.Escape(src.Live, 256),
			"replay", ratelog.Escape(src.Replay, 256))
	}
	return nil
}
