package kvevents

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
)

// Issue 29's subscriber rows: no silent loss (3, 6), fair replay slots (5),
// replies beyond the live stream refused (12), one publisher per bound
// source (7), one memory budget across sources (8).

// rawPub is a live publisher the test drives batch by batch.
type rawPub struct {
	xp         *socket.Socket
	subscribed chan struct{}
}

func newRawPub(t *testing.T) *rawPub {
	t.Helper()
	xp, err := socket.New("XPUB", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p := &rawPub{xp: xp, subscribed: make(chan struct{}, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := xp.Recv(context.Background())
			if err != nil {
				return
			}
			if len(m.Frames) == 1 && len(m.Frames[0]) > 0 && m.Frames[0][0] == 1 {
				select {
				case p.subscribed <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { xp.Close(); <-done })
	return p
}

func (p *rawPub) waitSubscribed(t *testing.T) {
	t.Helper()
	select {
	case <-p.subscribed:
	case <-time.After(20 * time.Second):
		t.Fatal("no subscription")
	}
}

func (p *rawPub) send(seqs ...uint64) {
	for _, seq := range seqs {
		p.xp.Send(context.Background(), []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
	}
}

// fakeReplay is a replay server whose n-th request (from 1) is answered by
// serve; it counts requests.
type fakeReplay struct {
	r    *socket.Socket
	reqs atomic.Int32
}

func newFakeReplay(t *testing.T, serve func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64)) string {
	t.Helper()
	r, err := socket.New("ROUTER", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	f := &fakeReplay{r: r}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := r.Recv(ctx)
			if err != nil {
				return
			}
			if len(m.Frames) != 3 || len(m.Frames[2]) != 8 {
				continue
			}
			id := append([]byte(nil), m.Frames[0]...)
			from := binary.BigEndian.Uint64(m.Frames[2])
			n := int(f.reqs.Add(1))
			wg.Add(1)
			go func() { defer wg.Done(); serve(ctx, f, id, n, from) }()
		}
	}()
	t.Cleanup(func() { cancel(); r.Close(); wg.Wait() })
	return r.Endpoint()
}

func (f *fakeReplay) batches(ctx context.Context, id []byte, seqs ...uint64) {
	for _, seq := range seqs {
		f.r.Send(ctx, id, nil, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
	}
}

func (f *fakeReplay) end(ctx context.Context, id []byte) {
	f.r.Send(ctx, id, nil, nil, binary.BigEndian.AppendUint64(nil, endSeq), nil)
}

func (f *fakeReplay) errorMarker(ctx context.Context, id []byte) {
	f.r.Send(ctx, id, nil, nil, binary.BigEndian.AppendUint64(nil, replayErrorSeq), nil)
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// checkDelivered waits until src delivered want batches and checks that
// they are 0..want-1 in order, with nothing reported lost.
func checkDelivered(t *testing.T, sub *Subscriber, rec *recorder, src string, want int) {
	t.Helper()
	lost := func() uint64 {
		for _, x := range sub.Stats().Sources {
			if x.Name == src {
				return x.Lost
			}
		}
		return 0
	}
	poll.WaitFor(t, waitTimeout, "the batches", func() bool { return rec.count(src) >= want || lost() > 0 })
	rec.mu.Lock()
	seqs := append([]uint64(nil), rec.batches[src]...)
	rec.mu.Unlock()
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("%s delivered %v, want 0..%d in order; updates %v", src, seqs, want-1, rec.snapshot())
		}
	}
	for _, x := range sub.Stats().Sources {
		if x.Name == src && x.Lost != 0 {
			t.Fatalf("%s reported %d lost %v although the publisher held them; updates %v", src, x.Lost, x.LostRanges, rec.snapshot())
		}
	}
}

// TestReplayIncompleteRetried (row 3): a replay that ended with the end
// marker but none of the batches (the publisher's replies for us were
// dropped), or with the error marker, is retried; nothing the publisher
// holds is reported lost.
func TestReplayIncompleteRetried(t *testing.T) {
	for _, kind := range []string{"end-marker-only", "error-marker"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			rep := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) {
				if n == 1 {
					if kind == "error-marker" {
						f.batches(ctx, id, from)
						f.errorMarker(ctx, id)
					} else {
						f.end(ctx, id)
					}
					return
				}
				f.batches(ctx, id, seqRange(from, 8)...)
				f.end(ctx, id)
			})
			pub := newRawPub(t)
			rec := newRecorder()
			sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, ReplayBackoff: 10 * time.Millisecond,
				ReplayTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: rep}); err != nil {
				t.Fatal(err)
			}
			stop := runSub(t, sub)
			defer stop()
			pub.waitSubscribed(t)
			pub.send(0, 1, 2, 5, 6, 7)
			checkDelivered(t, sub, rec, "s", 8)
		})
	}
}

// bufLen is how many live batches the source buffers now.
func bufLen(sub *Subscriber, name string) int {
	sub.mu.Lock()
	so := sub.sources[name]
	sub.mu.Unlock()
	so.mu.Lock()
	defer so.mu.Unlock()
	return len(so.buf)
}

// TestGapDuringReplayReplayedAgain (row 6): while a replay runs, the live
// stream drops a batch the publisher holds; it is replayed by a second
// replay, not reported lost.
func TestGapDuringReplayReplayedAgain(t *testing.T) {
	release := make(chan struct{})
	rep := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) {
		if n == 1 {
			// Served as the publisher was when asked: up to 5.
			select {
			case <-release:
			case <-ctx.Done():
				return
			}
			f.batches(ctx, id, seqRange(from, 6)...)
			f.end(ctx, id)
			return
		}
		f.batches(ctx, id, seqRange(from, 10)...)
		f.end(ctx, id)
	})
	pub := newRawPub(t)
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, ReplayTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: rep}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	defer stop()
	pub.waitSubscribed(t)
	pub.send(0, 1, 2, 5, 6, 7, 9) // 3, 4 missed; 8 missed while the replay runs
	poll.WaitFor(t, waitTimeout, "the live batches buffered", func() bool { return bufLen(sub, "s") == 4 })
	close(release)
	checkDelivered(t, sub, rec, "s", 10)
}

// TestReplayBeyondLiveRefused (row 12): a replay reply beyond the highest
// live sequence number seen, and replies in reverse order, are refused and
// never move next: the live batches after them are delivered, not dropped
// as duplicates, and nothing is reported lost.
func TestReplayBeyondLiveRefused(t *testing.T) {
	rep := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) {
		if n == 1 {
			f.batches(ctx, id, 1000, 4, 3)
			f.end(ctx, id)
			return
		}
		f.batches(ctx, id, seqRange(from, 8)...)
		f.end(ctx, id)
	})
	pub := newRawPub(t)
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, ReplayBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: rep}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	defer stop()
	pub.waitSubscribed(t)
	pub.send(0, 1, 2, 5, 6, 7)
	poll.WaitFor(t, waitTimeout, "batch 7", func() bool { return rec.count("s") >= 8 || sub.Stats().Lost > 0 })
	pub.send(8, 9, 10)
	checkDelivered(t, sub, rec, "s", 11)
	if d := sub.Stats().Dropped[decodeguard.ReasonValidate]; d == 0 {
		t.Fatal("the reply beyond the live stream was not counted as refused")
	}
}

// TestReplaySlotsShared (row 5): sources whose replay servers hang hold
// every replay slot; an honest source's gap is still recovered, since a
// replay that held its slot for ReplaySlice gives it up to a waiting
// source. (Before, the honest source waited for a whole ReplayDeadline.)
func TestReplaySlotsShared(t *testing.T) {
	hung := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) { <-ctx.Done() })
	honest := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) {
		f.batches(ctx, id, seqRange(from, 8)...)
		f.end(ctx, id)
	})
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, MaxReplays: 2, ReplaySlice: 100 * time.Millisecond,
		ReplayTimeout: time.Hour, ReplayDeadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var pubs []*rawPub
	for i, name := range []string{"hung0", "hung1", "honest"} {
		p := newRawPub(t)
		pubs = append(pubs, p)
		rep := hung
		if i == 2 {
			rep = honest
		}
		if err := sub.Add(Source{Name: name, Live: p.xp.Endpoint(), Replay: rep}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runSub(t, sub)
	defer stop()
	for _, p := range pubs {
		p.waitSubscribed(t)
	}
	pubs[0].send(0, 2)
	pubs[1].send(0, 2)
	poll.WaitFor(t, waitTimeout, "both hung replays", func() bool { return sub.Stats().Replays >= 2 })
	pubs[2].send(0, 1, 2, 5, 6, 7)
	checkDelivered(t, sub, rec, "honest", 8)
}

// capture is a slog handler that keeps the messages it is given.
type capture struct {
	mu   sync.Mutex
	msgs []string
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.msgs = append(c.msgs, r.Message)
	c.mu.Unlock()
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }
func (c *capture) count(sub string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// TestBackoffBeforeSlot (row 5): a source whose replay server is down waits
// out its back-off without holding the only replay slot, so an honest
// source's replay runs meanwhile.
func TestBackoffBeforeSlot(t *testing.T) {
	// A replay endpoint nobody answers on: the request cannot be sent.
	down, err := socket.New("ROUTER", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := down.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	downEP := down.Endpoint()
	down.Close()
	honest := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) {
		f.batches(ctx, id, seqRange(from, 8)...)
		f.end(ctx, id)
	})
	rec := newRecorder()
	logs := &capture{}
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: slog.New(logs), LogInterval: time.Nanosecond,
		MaxReplays: 1, ReplaySlice: time.Hour, ReplayTimeout: 200 * time.Millisecond, ReplayBackoff: time.Hour, ReplayBackoffMax: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bad, good := newRawPub(t), newRawPub(t)
	if err := sub.Add(Source{Name: "down", Live: bad.xp.Endpoint(), Replay: downEP}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "honest", Live: good.xp.Endpoint(), Replay: honest}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	defer stop()
	bad.waitSubscribed(t)
	good.waitSubscribed(t)
	bad.send(0, 2)
	poll.WaitFor(t, waitTimeout, "the failed replay", func() bool { return logs.count("kvevents: replay ") > 0 })
	bad.send(3, 5) // a second gap: its replay must not sit in the slot for the back-off
	good.send(0, 1, 2, 5, 6, 7)
	checkDelivered(t, sub, rec, "honest", 8)
}

// TestBindSourceOnePublisher (row 7): a second publisher connecting to a
// bound source is refused while the first is connected: no reset, and
// nothing it sends is delivered as the source's. The rule holds with an
// explicit Config.Socket.Guard.MaxConns too (it is not a default a user
// value replaces).
func TestBindSourceOnePublisher(t *testing.T) {
	explicit := socket.DefaultOptions()
	explicit.Guard.MaxConns = 64
	for _, c := range []struct {
		name string
		opts socket.Options
	}{{"zero options", socket.Options{}}, {"explicit MaxConns", explicit}} {
		t.Run(c.name, func(t *testing.T) { testBindSourceOnePublisher(t, c.opts) })
	}
}

func testBindSourceOnePublisher(t *testing.T, opts socket.Options) {
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "b", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	defer stop()
	ep := sub.Endpoint("b")
	dial := func() *socket.Socket {
		xp, err := socket.New("XPUB", fastSocket())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { xp.Close() })
		go func() {
			for {
				if _, err := xp.Recv(context.Background()); err != nil {
					return
				}
			}
		}()
		if err := xp.Dial(ep); err != nil {
			t.Fatal(err)
		}
		return xp
	}
	ctx := context.Background()
	engine := dial()
	seq := uint64(100)
	poll.WaitFor(t, waitTimeout, "the engine's batches", func() bool {
		engine.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
		seq++
		time.Sleep(5 * time.Millisecond)
		return rec.count("b") > 0
	})
	intruder := dial()
	// The intruder's stream starts again at 0 (each one a reset of the
	// engine's) and carries a distinct timestamp.
	poll.WaitFor(t, waitTimeout, "the intruder refused or heard", func() bool {
		intruder.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, 0), AppendBatch(nil, 424242, []Event{storedEvent(9)}, Opt[int64]{}, true))
		engine.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
		seq++
		time.Sleep(5 * time.Millisecond)
		st := sub.Stats()
		return st.Refused[decodeguard.ReasonPolicy] > 0 || st.Resets > 0
	})
	for range 20 {
		intruder.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, 0), AppendBatch(nil, 424242, []Event{storedEvent(9)}, Opt[int64]{}, true))
	}
	n := rec.count("b")
	poll.WaitFor(t, waitTimeout, "20 more engine batches", func() bool {
		engine.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
		seq++
		time.Sleep(2 * time.Millisecond)
		return rec.count("b") >= n+20
	})
	st := sub.Stats()
	if st.Resets != 0 {
		t.Fatalf("%d resets: the second publisher was heard", st.Resets)
	}
	for _, l := range rec.snapshot() {
		if strings.Contains(l, "ts=424242") {
			t.Fatalf("the intruder's batch was delivered as the source's: %s", l)
		}
	}
}

// TestMemoryBudgetAcrossSources (row 8): sources replaying at once buffer
// live batches within their share of MemoryBudget, never more in all; past
// it a batch is left to the replay (counted), not held.
func TestMemoryBudgetAcrossSources(t *testing.T) {
	hung := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) { <-ctx.Done() })
	rec := newRecorder()
	const budget = 8 << 20
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, MaxPayload: 1 << 20,
		MemoryBudget: budget, ReplayTimeout: time.Hour, ReplayDeadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const nsrc = 4
	var pubs []*rawPub
	for i := range nsrc {
		p := newRawPub(t)
		pubs = append(pubs, p)
		if err := sub.Add(Source{Name: string(rune('a' + i)), Live: p.xp.Endpoint(), Replay: hung}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runSub(t, sub)
	defer stop()
	big := AppendBatch(nil, 1, []Event{{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, TokenIDs: make([]int64, 100_000), BlockSize: 100_000}}, Opt[int64]{}, true)
	if len(big) < 100_000 {
		t.Fatalf("batch of %d bytes", len(big))
	}
	const perSource = 40 // 40 × ~0.1–0.9 MiB: past a share of 2 MiB
	ctx := context.Background()
	for _, p := range pubs {
		p.waitSubscribed(t)
		p.send(0)
		for s := uint64(2); s < 2+perSource; s++ {
			p.xp.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, s), big)
		}
	}
	poll.WaitFor(t, waitTimeout, "every live batch seen", func() bool {
		st := sub.Stats()
		for _, x := range st.Sources {
			if x.LastSeen.IsZero() || x.BufferOverflows == 0 {
				return false
			}
		}
		return st.Replays >= nsrc
	})
	share := budget / nsrc
	total := 0
	for i := range nsrc {
		name := string(rune('a' + i))
		sub.mu.Lock()
		so := sub.sources[name]
		sub.mu.Unlock()
		so.mu.Lock()
		b := so.bufBytes
		so.mu.Unlock()
		if b > share {
			t.Fatalf("source %s buffers %d bytes, over its share %d", name, b, share)
		}
		total += b
	}
	if total > budget || sub.buffered.Load() != int64(total) {
		t.Fatalf("buffered %d in all (counter %d), budget %d", total, sub.buffered.Load(), budget)
	}
}

// TestBufferedChargedToReceiveBudget (issue 37, memory as stated): the live
// batches a source buffers while its replay runs are charged to the
// receive budget its sockets share with every source's, so that buffers
// and reads are bounded together (about 2 × MemoryBudget, not 3 ×), and
// given back when the buffer is dropped (here: the sources removed).
func TestBufferedChargedToReceiveBudget(t *testing.T) {
	hung := newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, n int, from uint64) { <-ctx.Done() })
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, MaxPayload: 1 << 20,
		MemoryBudget: 8 << 20, ReplayTimeout: time.Hour, ReplayDeadline: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	budget := sub.cfg.Socket.Guard.Budget
	if budget == nil {
		t.Fatal("no shared receive budget")
	}
	var pubs []*rawPub
	for i := range 2 {
		p := newRawPub(t)
		pubs = append(pubs, p)
		if err := sub.Add(Source{Name: string(rune('a' + i)), Live: p.xp.Endpoint(), Replay: hung}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runSub(t, sub)
	defer stop()
	big := AppendBatch(nil, 1, []Event{{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, TokenIDs: make([]int64, 100_000), BlockSize: 100_000}}, Opt[int64]{}, true)
	ctx := context.Background()
	for _, p := range pubs {
		p.waitSubscribed(t)
		p.send(0)
		for s := uint64(2); s < 12; s++ { // seq 1 missing: a replay that never ends
			p.xp.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, s), big)
		}
	}
	poll.WaitFor(t, waitTimeout, "ten live batches buffered by each source", func() bool {
		return sub.buffered.Load() >= int64(2*10*len(big))
	})
	used, _, _ := budget.Stats()
	if buffered := sub.buffered.Load(); used < buffered {
		t.Fatalf("receive budget holds %d bytes while the sources buffer %d: buffers are not charged", used, buffered)
	}
	for i := range 2 {
		if err := sub.Remove(string(rune('a' + i))); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "the buffers' bytes given back", func() bool {
		used, _, _ := budget.Stats()
		return used < int64(len(big)) && sub.buffered.Load() == 0
	})
}
