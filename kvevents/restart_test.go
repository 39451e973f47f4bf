package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// The tests of issue 35 in this package: continuity across a new
// connection is proven, never assumed.

// runB is the payload of another publisher run at seq: another timestamp
// and other block hashes than payloadOf's (run A).
func runB(seq uint64) []byte {
	return AppendBatch(nil, 1000+float64(seq), []Event{storedEvent(1000 + seq)}, Some[int64](0), true)
}

// connPub is a live publisher (XPUB) whose subscriber connection the test
// can break, as a publisher restart or a network cut does.
type connPub struct {
	xp   *socket.Socket
	mu   sync.Mutex
	peer *socket.Peer
	subs chan struct{}
	done chan struct{}
}

func newConnPub(t *testing.T) *connPub {
	t.Helper()
	xp, err := socket.New("XPUB", fastSocket())
	if err != nil {
		t.Fatal(err)
	}
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	p := &connPub{xp: xp, subs: make(chan struct{}, 8), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			m, err := xp.Recv(context.Background())
			if err != nil {
				return
			}
			if len(m.Frames) == 1 && len(m.Frames[0]) > 0 && m.Frames[0][0] == 1 {
				p.mu.Lock()
				p.peer = m.Peer
				p.mu.Unlock()
				p.subs <- struct{}{}
			}
		}
	}()
	t.Cleanup(func() { xp.Close(); <-p.done })
	return p
}

// subscribed waits for a (new) subscription.
func (p *connPub) subscribed(t *testing.T) {
	t.Helper()
	poll.WaitFor(t, waitTimeout, "a subscription", func() bool {
		select {
		case <-p.subs:
			return true
		default:
			return false
		}
	})
}

// cut closes the subscriber's connection; the subscriber reconnects.
func (p *connPub) cut(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	peer := p.peer
	p.mu.Unlock()
	if !p.xp.Disconnect(peer, errors.New("test: connection cut")) {
		t.Fatal("no connection to cut")
	}
}

func (p *connPub) send(seq uint64, payload []byte) {
	p.xp.Send(context.Background(), []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payload)
}

// replayOf serves every request from its start with the batches [lo, hi]
// of one run (payload gives each one's bytes), then the end marker.
func replayOf(t *testing.T, lo, hi uint64, payload func(uint64) []byte) string {
	return newFakeReplay(t, func(ctx context.Context, f *fakeReplay, id []byte, _ int, from uint64) {
		for s := max(from, lo); s <= hi; s++ {
			f.r.Send(ctx, id, nil, []byte("t"), binary.BigEndian.AppendUint64(nil, s), payload(s))
		}
		f.end(ctx, id)
	})
}

// followA starts a subscriber on pub (and replay, if any), delivers run A's
// batches 0..4 and returns it with its recorder.
func followA(t *testing.T, pub *connPub, replay string, resume *Position) (*Subscriber, *recorder, func()) {
	t.Helper()
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: fastSocket()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: replay, Resume: resume}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	pub.subscribed(t)
	if resume == nil {
		for s := uint64(0); s < 5; s++ {
			pub.send(s, payloadOf(s))
		}
		poll.WaitFor(t, waitTimeout, "run A's batches 0..4", func() bool { return rec.count("s") == 5 })
	}
	return sub, rec, stop
}

// linesAfter returns the recorder's lines from the n-th on.
func linesAfter(rec *recorder, n int) []string {
	l := rec.snapshot()
	if n > len(l) {
		return nil
	}
	return l[n:]
}

// TestRestartDuringBackoffIsReset is the first row of issue 35: the
// publisher restarted while the subscriber was disconnected, and the new
// run had published past the old run's last seq when the subscriber came
// back. The first live seq (10) is above the last one (4): read as a gap,
// it was replayed from the new run's buffer as the old run's continuation,
// with no reset. Now the replay from the last delivered seq shows another
// batch there (another digest): an UpdateReset comes before any of the new
// run's batches, which are then delivered from 0.
func TestRestartDuringBackoffIsReset(t *testing.T) {
	pub := newConnPub(t)
	var mu sync.Mutex
	run := payloadOf
	replay := replayOf(t, 0, 10, func(s uint64) []byte { mu.Lock(); defer mu.Unlock(); return run(s) })
	sub, rec, stop := followA(t, pub, replay, nil)
	defer stop()
	mu.Lock()
	run = runB // the engine restarted: its replay endpoint now holds run B
	mu.Unlock()
	pub.cut(t)
	pub.subscribed(t)
	pub.send(10, runB(10))
	want := []string{"s reset 10"}
	for s := uint64(0); s <= 10; s++ {
		want = append(want, fmt.Sprintf("s batch %d ts=%d n=1 BlockStored:%d", s, 1000+s, 1000+s))
	}
	poll.WaitFor(t, waitTimeout, "batch 10", func() bool { return rec.lastSeq("s") == 10 })
	if got := linesAfter(rec, 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the restart got\n%q\nwant\n%q", got, want)
	}
	st := sub.Stats()
	if st.Resets != 1 || st.ResetsBy.Digest != 1 || st.ContinuityProven != 0 {
		t.Fatalf("stats: resets %d (digest %d), proven %d", st.Resets, st.ResetsBy.Digest, st.ContinuityProven)
	}
}

// TestReconnectSameRunProven: a reconnect to the same run replays from the
// last delivered batch, finds the same digest, and continues: no reset, no
// loss, the gap recovered.
func TestReconnectSameRunProven(t *testing.T) {
	pub := newConnPub(t)
	replay := replayOf(t, 0, 10, payloadOf)
	sub, rec, stop := followA(t, pub, replay, nil)
	defer stop()
	pub.cut(t)
	pub.subscribed(t)
	pub.send(10, payloadOf(10))
	poll.WaitFor(t, waitTimeout, "batches 5..10", func() bool { return rec.count("s") == 11 })
	for i, l := range rec.snapshot() {
		if want := fmt.Sprintf("s batch %d ts=%d n=1 BlockStored:%d", i, i, i); l != want {
			t.Fatalf("line %d: %q, want %q", i, l, want)
		}
	}
	st := sub.Stats()
	if st.ContinuityProven != 1 || st.Resets != 0 || st.Lost != 0 || st.Unproven != 0 {
		t.Fatalf("stats: proven %d resets %d lost %d unproven %d", st.ContinuityProven, st.Resets, st.Lost, st.Unproven)
	}
}

// TestReconnectUnprovenIsLoss: after a reconnect the live stream goes on
// at the next seq (5), but the publisher no longer holds the last
// delivered batch (4): nothing is known missing, yet nothing proves the
// run is the same. Before, batch 5 was applied as the continuation; now an
// UpdateLost [5, 5) comes first (the consumer's entries become uncertain).
func TestReconnectUnprovenIsLoss(t *testing.T) {
	pub := newConnPub(t)
	replay := replayOf(t, 5, 5, payloadOf)
	sub, rec, stop := followA(t, pub, replay, nil)
	defer stop()
	pub.cut(t)
	pub.subscribed(t)
	pub.send(5, payloadOf(5))
	want := []string{"s lost 5 5", "s batch 5 ts=5 n=1 BlockStored:5"}
	poll.WaitFor(t, waitTimeout, "batch 5", func() bool { return rec.count("s") == 6 })
	if got := linesAfter(rec, 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if st := sub.Stats(); st.Unproven != 1 || st.Resets != 0 || st.ContinuityProven != 0 {
		t.Fatalf("stats: unproven %d resets %d proven %d", st.Unproven, st.Resets, st.ContinuityProven)
	}
}

// TestReconnectSilentReplayIsLoss: a replay server that never answers
// proves nothing: once the attempts are spent, an UpdateLost comes before
// the new connection's batches, never a silent continuation.
func TestReconnectSilentReplayIsLoss(t *testing.T) {
	pub := newConnPub(t)
	replay := newFakeReplay(t, func(context.Context, *fakeReplay, []byte, int, uint64) {})
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: fastSocket(),
		ReplayTimeout: 100 * time.Millisecond, ReplayAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: replay}); err != nil {
		t.Fatal(err)
	}
	defer runSub(t, sub)()
	pub.subscribed(t)
	pub.send(0, payloadOf(0))
	poll.WaitFor(t, waitTimeout, "batch 0", func() bool { return rec.count("s") == 1 })
	pub.cut(t)
	pub.subscribed(t)
	pub.send(1, payloadOf(1))
	want := []string{"s lost 1 1", "s batch 1 ts=1 n=1 BlockStored:1"}
	poll.WaitFor(t, waitTimeout, "batch 1", func() bool { return rec.count("s") == 2 })
	if got := linesAfter(rec, 1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if st := sub.Stats(); st.Unproven != 1 {
		t.Fatalf("unproven %d", st.Unproven)
	}
}

// TestReconnectNoReplayIsLoss: without a replay endpoint nothing can prove
// a new connection continues the old run: an UpdateLost [last+1, seq) (here
// [5, 5)) comes before the first batch of the connection.
func TestReconnectNoReplayIsLoss(t *testing.T) {
	pub := newConnPub(t)
	sub, rec, stop := followA(t, pub, "", nil)
	defer stop()
	pub.cut(t)
	pub.subscribed(t)
	pub.send(5, payloadOf(5))
	pub.send(6, payloadOf(6))
	want := []string{"s lost 5 5", "s batch 5 ts=5 n=1 BlockStored:5", "s batch 6 ts=6 n=1 BlockStored:6"}
	poll.WaitFor(t, waitTimeout, "batches 5 and 6", func() bool { return rec.count("s") == 7 })
	if got := linesAfter(rec, 5); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if st := sub.Stats(); st.Unproven != 1 || st.Lost != 0 {
		t.Fatalf("stats: unproven %d lost %d", st.Unproven, st.Lost)
	}
}

// TestResume: a source given Source.Resume proves continuity on its first
// connection: the same run continues after the kept batch, another run
// is a reset.
func TestResume(t *testing.T) {
	for _, c := range []struct {
		name   string
		digest uint64
		want   []string
	}{
		{"same run", payloadDigest(payloadOf(4)), []string{
			"s batch 5 ts=5 n=1 BlockStored:5", "s batch 6 ts=6 n=1 BlockStored:6", "s batch 7 ts=7 n=1 BlockStored:7"}},
		{"another run", payloadDigest(runB(4)), []string{"s reset 7",
			"s batch 0 ts=0 n=1 BlockStored:0", "s batch 1 ts=1 n=1 BlockStored:1", "s batch 2 ts=2 n=1 BlockStored:2",
			"s batch 3 ts=3 n=1 BlockStored:3", "s batch 4 ts=4 n=1 BlockStored:4", "s batch 5 ts=5 n=1 BlockStored:5",
			"s batch 6 ts=6 n=1 BlockStored:6", "s batch 7 ts=7 n=1 BlockStored:7"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pub := newConnPub(t)
			replay := replayOf(t, 0, 7, payloadOf)
			_, rec, stop := followA(t, pub, replay, &Position{Seq: 4, Digest: c.digest})
			defer stop()
			pub.send(7, payloadOf(7))
			poll.WaitFor(t, waitTimeout, "batch 7", func() bool { n := rec.count("s"); return n > 0 && rec.lastSeq("s") == 7 })
			if got := rec.snapshot(); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// TestResumeRefusesMarker: a Resume at a replay marker's seq is refused.
func TestResumeRefusesMarker(t *testing.T) {
	sub, err := NewSubscriber(Config{Handler: nopHandler, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	err = sub.Add(Source{Name: "s", Live: "tcp://127.0.0.1:1", Resume: &Position{Seq: endSeq}})
	if err == nil || !strings.Contains(err.Error(), "Resume.Seq") {
		t.Fatalf("Add: %v", err)
	}
}

// TestSeqJumpIsBounded is issue 37's last row: one batch at seq 2^63 after
// seq 5 counted ~9.2e18 lost batches. A jump past 2^32 is a new run: a
// reset, delivery from the batch itself, nothing counted lost.
func TestSeqJumpIsBounded(t *testing.T) {
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	so, err := newSource(sub, Source{Name: "s", Live: "tcp://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer so.stop()
	so.ctx, so.cancel = context.WithCancel(context.Background())
	for _, seq := range []uint64{5, 1 << 63, 1<<63 + 1} {
		if err := so.onLive(context.Background(), seq, payloadOf(seq), 1); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"s batch 5 ts=5 n=1 BlockStored:5", "s reset 9223372036854775808",
		"s batch 9223372036854775808 ts=9.223372036854776e+18 n=1 BlockStored:9223372036854775808",
		"s batch 9223372036854775809 ts=9.223372036854776e+18 n=1 BlockStored:9223372036854775809"}
	if got := rec.snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	st := so.stats()
	if st.Lost != 0 || st.Resets != 1 || st.ResetsBy.Jump != 1 || st.Gaps != 0 {
		t.Fatalf("stats: lost %d resets %d jump %d gaps %d", st.Lost, st.Resets, st.ResetsBy.Jump, st.Gaps)
	}
}

// TestResync: Resync, called from inside a Handler, makes the next update
// an UpdateReset and replays from 0 with no live batch needed; without a
// replay endpoint, delivery restarts at the next live batch. An unknown
// name is an error naming it.
func TestResync(t *testing.T) {
	t.Run("replay", func(t *testing.T) {
		pub := newConnPub(t)
		replay := replayOf(t, 0, 4, payloadOf)
		var sub *Subscriber
		rec := newRecorder()
		var once sync.Once
		sub, err := NewSubscriber(Config{Logger: quiet, Socket: fastSocket(), Handler: func(ctx context.Context, u Update) error {
			if u.Kind == UpdateBatch && u.Seq == 4 {
				once.Do(func() {
					if err := sub.Resync("s"); err != nil {
						t.Error(err)
					}
				})
			}
			return rec.handle(ctx, u)
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint(), Replay: replay}); err != nil {
			t.Fatal(err)
		}
		defer runSub(t, sub)()
		pub.subscribed(t)
		for s := uint64(0); s < 5; s++ {
			pub.send(s, payloadOf(s))
		}
		want := []string{"s reset 0"}
		for s := 0; s < 5; s++ {
			want = append(want, fmt.Sprintf("s batch %d ts=%d n=1 BlockStored:%d", s, s, s))
		}
		poll.WaitFor(t, waitTimeout, "the replay from 0", func() bool { return len(linesAfter(rec, 5)) >= len(want) })
		if got := linesAfter(rec, 5); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %q, want %q", got, want)
		}
		if st := sub.Stats(); st.ResetsBy.Resync != 1 {
			t.Fatalf("resync resets %d", st.ResetsBy.Resync)
		}
		if err := sub.Resync("nope"); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("Resync of an unknown name: %v", err)
		}
	})
	t.Run("before Run", func(t *testing.T) {
		pub := newConnPub(t)
		rec := newRecorder()
		sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: fastSocket()})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Add(Source{Name: "s", Live: pub.xp.Endpoint()}); err != nil {
			t.Fatal(err)
		}
		if err := sub.Resync("s"); err != nil {
			t.Fatal(err)
		}
		stop := runSub(t, sub)
		poll.WaitFor(t, waitTimeout, "the reset", func() bool { return len(rec.snapshot()) == 1 })
		if got := rec.snapshot(); got[0] != "s reset 0" {
			t.Fatalf("first update %q", got[0])
		}
		stop()
		if err := sub.Resync("s"); !errors.Is(err, ErrClosed) {
			t.Fatalf("Resync after Run: %v", err)
		}
	})
	t.Run("no replay", func(t *testing.T) {
		pub := newConnPub(t)
		sub, rec, stop := followA(t, pub, "", nil)
		defer stop()
		if err := sub.Resync("s"); err != nil {
			t.Fatal(err)
		}
		poll.WaitFor(t, waitTimeout, "the reset", func() bool { return len(rec.snapshot()) == 6 })
		pub.send(5, payloadOf(5))
		want := []string{"s reset 0", "s batch 5 ts=5 n=1 BlockStored:5"}
		poll.WaitFor(t, waitTimeout, "batch 5", func() bool { return len(linesAfter(rec, 5)) >= len(want) })
		if got := linesAfter(rec, 5); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}

// TestBindExposed: a bound source on an address beyond loopback starts
// only with an allow-list, CURVE keys or Config.AnyPeer (issue 35: no one
// takes an engine's stream by being first).
func TestBindExposed(t *testing.T) {
	allow := fastSocket()
	allow.Guard.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	curve := fastSocket()
	var key zmtpguard.CurveKey
	for i := range key {
		key[i] = byte(i + 1)
	}
	curve.Guard.Curve = &zmtpguard.CurveConfig{Server: true, SecretKey: key,
		Authorize: func(zmtpguard.CurveKey, net.Addr) (bool, string) { return true, "" }}
	for _, c := range []struct {
		name    string
		live    string
		opts    socket.Options
		anyPeer bool
		ok      bool
	}{
		{"all interfaces", "tcp://0.0.0.0:0", fastSocket(), false, false},
		{"allow-list", "tcp://0.0.0.0:0", allow, false, true},
		{"curve", "tcp://0.0.0.0:0", curve, false, true},
		{"any peer", "tcp://0.0.0.0:0", fastSocket(), true, true},
		{"loopback", "tcp://127.0.0.1:0", fastSocket(), false, true},
		{"ipc", "ipc://" + t.TempDir() + "/s", fastSocket(), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub, err := NewSubscriber(Config{Handler: nopHandler, Logger: quiet, Socket: c.opts, AnyPeer: c.anyPeer})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			err = sub.Add(Source{Name: "b", Live: c.live, Bind: true})
			switch {
			case c.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case !c.ok && (err == nil || !strings.Contains(err.Error(), c.live) || !strings.Contains(err.Error(), "--any-peer")):
				t.Fatalf("Add: %v, want a refusal naming %s and the remedy", err, c.live)
			}
		})
	}
}

// lastSeq is the seq of the last batch r recorded for src (0 if none).
func (r *recorder) lastSeq(src string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.batches[src]
	if len(b) == 0 {
		return 0
	}
	return b[len(b)-1]
}

// attrCapture keeps each log record as its message and attributes.
type attrCapture struct {
	mu    sync.Mutex
	lines []string
}

func (c *attrCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *attrCapture) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.Key + "=" + a.Value.String(); return true })
	c.mu.Lock()
	c.lines = append(c.lines, s)
	c.mu.Unlock()
	return nil
}
func (c *attrCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *attrCapture) WithGroup(string) slog.Handler      { return c }
func (c *attrCapture) find(sub string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestBindHolder: the holder of a bound slot (its address, since when, the
// batches delivered since) is in SourceStats.Holder and in the line that
// logs a refused publisher; before, the line said the slot was held but
// never by whom.
func TestBindHolder(t *testing.T) {
	logs := &attrCapture{}
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: slog.New(logs), Socket: fastSocket()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "b", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		t.Fatal(err)
	}
	defer runSub(t, sub)()
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
		if err := xp.Dial(sub.Endpoint("b")); err != nil {
			t.Fatal(err)
		}
		return xp
	}
	engine := dial()
	seq := uint64(0)
	poll.WaitFor(t, waitTimeout, "the engine's batches", func() bool {
		engine.Send(context.Background(), []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
		seq++
		time.Sleep(5 * time.Millisecond)
		return rec.count("b") >= 3
	})
	h := sub.Stats().Sources[0].Holder
	if !strings.HasPrefix(h.Addr, "127.0.0.1:") || h.Since.IsZero() || h.Batches < 3 {
		t.Fatalf("holder %+v", h)
	}
	dial()
	poll.WaitFor(t, waitTimeout, "the refusal line", func() bool { return logs.find("slot is held") != "" })
	if l := logs.find("slot is held"); !strings.Contains(l, "holder="+h.Addr) || !strings.Contains(l, "holder_since=") ||
		!strings.Contains(l, "holder_batches=") {
		t.Fatalf("refusal line without the holder: %s", l)
	}
}
