package kvevents

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:], "NULL")
	return g
}

func readyCmd(props ...string) []byte {
	body := append([]byte{5}, "READY"...)
	for i := 0; i+1 < len(props); i += 2 {
		body = append(body, byte(len(props[i])))
		body = append(body, props[i]...)
		body = binary.BigEndian.AppendUint32(body, uint32(len(props[i+1])))
		body = append(body, props[i+1]...)
	}
	return append([]byte{0x04, byte(len(body))}, body...)
}

// hostileBehaviours are what a malicious publisher does to a subscriber
// that dials it, one per connection.
var hostileBehaviours = []struct {
	name string
	run  func(c net.Conn)
}{
	{"http", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n") }},
	{"random-64k", func(c net.Conn) { b := make([]byte, 64<<10); rand.Read(b); c.Write(b) }},
	{"half-greeting-stall", func(c net.Conn) { c.Write(greeting()[:10]); time.Sleep(3 * time.Second) }},
	{"silent-stall", func(c net.Conn) { time.Sleep(3 * time.Second) }},
	{"zmtp2-greeting", func(c net.Conn) { c.Write([]byte{0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 1, 1}) }},
	{"bad-ready", func(c net.Conn) { c.Write(greeting()); c.Write(readyCmd("Socket-Type", "PUB\x00\x1b[2J")) }},
	{"ready-huge-property", func(c net.Conn) {
		c.Write(greeting())
		c.Write([]byte{0x06, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 5, 'R', 'E', 'A', 'D', 'Y'})
	}},
	{"huge-frame", func(c net.Conn) {
		c.Write(greeting())
		c.Write(readyCmd("Socket-Type", "PUB"))
		hdr := []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(hdr[1:], 1<<62)
		c.Write(hdr)
		time.Sleep(200 * time.Millisecond)
	}},
}

// hostileListener plays hostileBehaviours in turn to whoever connects.
type hostileListener struct {
	ln     net.Listener
	served atomic.Int64
	wg     sync.WaitGroup
}

func newHostileListener(t *testing.T) *hostileListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileListener{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := hostileBehaviours[i%len(hostileBehaviours)]
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				go io.Copy(io.Discard, c)
				b.run(c)
				h.served.Add(1)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); h.wg.Wait() })
	return h
}

func fastSocket() socket.Options {
	o := socket.DefaultOptions()
	o.ReconnectMin = 20 * time.Millisecond
	o.ReconnectMax = 100 * time.Millisecond
	o.Guard.HandshakeTimeout = time.Second
	return o
}

// runSub starts sub.Run and returns a stop function that checks its result.
func runSub(t *testing.T, sub *Subscriber) func() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
}

// checkHealthy publishes on pub until the good source has delivered n more
// batches, in order.
func checkHealthy(t *testing.T, pub *Publisher, rec *recorder, name string, n int) {
	t.Helper()
	start := rec.count(name)
	poll.WaitFor(t, waitTimeout, name+" delivering", func() bool {
		pub.Publish(storedEvent(1))
		time.Sleep(5 * time.Millisecond)
		return rec.count(name) >= start+n
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seqs := rec.batches[name]
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("%s out of order: %v", name, seqs)
		}
	}
}

// TestHostilePublisherDialed: the subscriber dials a publisher that speaks
// garbage in every way on every connection; a healthy source next to it
// keeps delivering, and so does the subscriber.
func TestHostilePublisherDialed(t *testing.T) {
	h := newHostileListener(t)
	good := newTestPublisher(t, vllm.Latest(), false)
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: fastSocket()})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "evil", Live: "tcp://" + h.ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "good", Live: loopback(good.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	poll.WaitFor(t, waitTimeout, "every hostile behaviour", func() bool { return h.served.Load() >= int64(len(hostileBehaviours)+1) })
	checkHealthy(t, good, rec, "good", 20)
	stop()
	if n := rec.count("evil"); n != 0 {
		t.Fatalf("evil source delivered %d batches", n)
	}
}

// TestHostilePayloads: a publisher with a valid handshake sends junk in
// every frame position; each costs one drop of the right reason, and the
// same source's next valid batch is delivered.
func TestHostilePayloads(t *testing.T) {
	xp, err := socket.New("XPUB", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer xp.Close()
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := xp.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, Socket: fastSocket(), MaxPayload: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "x", Live: xp.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	ctx := context.Background()
	seq := uint64(0)
	seq8 := func() []byte { b := binary.BigEndian.AppendUint64(nil, seq); seq++; return b }
	good := func() { xp.Send(ctx, []byte("t"), seq8(), payloadOf(seq-1)) }
	// Wait for the subscription, then a first good batch.
	poll.WaitFor(t, waitTimeout, "first batch", func() bool { good(); time.Sleep(10 * time.Millisecond); return rec.count("x") > 0 })
	base := rec.count("x")
	type junk struct {
		frames [][]byte
		reason decodeguard.Reason
		event  bool // dropped as an event, the batch delivered
	}
	var cases []junk
	cases = append(cases,
		junk{frames: [][]byte{[]byte("t")}, reason: decodeguard.ReasonEnvelope},
		junk{frames: [][]byte{[]byte("t"), {1, 2, 3}, payloadOf(0)}, reason: decodeguard.ReasonEnvelope},
		junk{frames: [][]byte{[]byte("t"), make([]byte, 8), payloadOf(0), {}}, reason: decodeguard.ReasonEnvelope},
		junk{frames: [][]byte{[]byte("t"), nil, bytes.Repeat([]byte{0x90}, 1<<20+1)}, reason: decodeguard.ReasonOversize},
	)
	for _, p := range hostile.Payloads() {
		// The reason is the decoder's; the test is that the pipeline
		// counts it and goes on.
		var b Batch
		r := decodeguard.ReasonOf(decodeBatch(p.Bytes, limits{MaxPayload: 1 << 20}, &b, nil))
		if r == decodeguard.ReasonNone {
			t.Fatalf("%s decodes", p.Name)
		}
		cases = append(cases, junk{frames: [][]byte{[]byte("t"), nil, p.Bytes}, reason: r})
	}
	bad := Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1)}, BlockSize: -1}
	cases = append(cases, junk{frames: [][]byte{[]byte("t"), nil, AppendBatch(nil, 1, []Event{bad, storedEvent(2)}, Opt[int64]{}, true)},
		reason: decodeguard.ReasonValidate, event: true})
	for i, c := range cases {
		if len(c.frames) > 1 && c.frames[1] == nil {
			c.frames[1] = seq8()
		}
		before := sub.Stats()
		if err := xp.Send(ctx, c.frames...); err != nil {
			t.Fatal(err)
		}
		good()
		want := base + 1
		if c.event {
			want++
		}
		poll.WaitFor(t, waitTimeout, "batch after junk", func() bool { return rec.count("x") >= want })
		base = rec.count("x")
		after := sub.Stats()
		if c.event {
			if after.DroppedEvents[c.reason] != before.DroppedEvents[c.reason]+1 {
				t.Fatalf("case %d: event drops %v -> %v", i, before.DroppedEvents, after.DroppedEvents)
			}
		} else if after.Dropped[c.reason] != before.Dropped[c.reason]+1 {
			t.Fatalf("case %d: drops %v -> %v (want +1 %v)", i, before.Dropped, after.Dropped, c.reason)
		}
	}
	stop()
}

// TestHostileCorpusAtBoundSource: a Bind source (publishers connect to the
// subscriber) takes the whole transport, envelope and payload corpus, and
// still answers; a healthy source keeps delivering.
func TestHostileCorpusAtBoundSource(t *testing.T) {
	good := newTestPublisher(t, vllm.Latest(), false)
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "bound", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "good", Live: loopback(good.Endpoint())}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	ep := sub.Endpoint("bound")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, p := range hostile.Corpus(hostile.Options{Hold: 100 * time.Millisecond, Timeout: 5 * time.Second}) {
		if err := p.Run(ctx, ep); err != nil && strings.Contains(err.Error(), "wedged") {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if err := hostile.Alive(ctx, ep, "SUB", 10*time.Second); err != nil {
			t.Fatalf("after %s: %v", p.Name, err)
		}
	}
	checkHealthy(t, good, rec, "good", 10)
	stop()
}

// replayServer is a hostile replay endpoint.
func replayServer(t *testing.T, serve func(ctx context.Context, r *socket.Socket, id []byte)) string {
	r, err := socket.New("ROUTER", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
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
			id := append([]byte(nil), m.Frames[0]...)
			wg.Add(1)
			go func() { defer wg.Done(); serve(ctx, r, id) }()
		}
	}()
	t.Cleanup(func() { cancel(); r.Close(); wg.Wait() })
	return r.Endpoint()
}

// TestHostileReplayServers: a replay server that never answers, one that
// never ends (out of order), one that answers far ahead and one that floods
// junk: each replay is given up within its bounds and retried
// ReplayAttempts times in all without progress, then the exact lost range
// is reported, and live delivery goes on.
func TestHostileReplayServers(t *testing.T) {
	servers := map[string]func(ctx context.Context, r *socket.Socket, id []byte){
		"silent": func(ctx context.Context, r *socket.Socket, id []byte) { <-ctx.Done() },
		"never-ends": func(ctx context.Context, r *socket.Socket, id []byte) {
			// One real batch of the gap (seq 3), then duplicates forever.
			r.Send(ctx, id, nil, []byte("t"), binary.BigEndian.AppendUint64(nil, 3), payloadOf(3))
			for ctx.Err() == nil {
				r.Send(ctx, id, nil, []byte("t"), binary.BigEndian.AppendUint64(nil, 0), payloadOf(0))
				time.Sleep(time.Millisecond)
			}
		},
		"far-ahead": func(ctx context.Context, r *socket.Socket, id []byte) {
			// A batch far beyond the live stream, then silence.
			r.Send(ctx, id, nil, []byte("t"), binary.BigEndian.AppendUint64(nil, 1<<40), payloadOf(1<<40))
			<-ctx.Done()
		},
		"junk-flood": func(ctx context.Context, r *socket.Socket, id []byte) {
			for ctx.Err() == nil {
				r.Send(ctx, id, []byte("not empty"), []byte{1})
				r.Send(ctx, id, nil, []byte("t"), []byte{1, 2}, []byte{0x07})
				time.Sleep(time.Millisecond)
			}
		},
	}
	for name, serve := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rep := replayServer(t, serve)
			xp, err := socket.New("XPUB", socket.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			defer xp.Close()
			if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			subscribed := make(chan struct{}, 1)
			go func() {
				for {
					m, err := xp.Recv(context.Background())
					if err != nil {
						return
					}
					if len(m.Frames) == 1 && len(m.Frames[0]) > 0 && m.Frames[0][0] == 1 {
						select {
						case subscribed <- struct{}{}:
						default:
						}
					}
				}
			}()
			rec := newRecorder()
			sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, ReplayTimeout: time.Second,
				ReplayDeadline: 2500 * time.Millisecond, ReplayBackoff: 10 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := sub.Add(Source{Name: "s", Live: xp.Endpoint(), Replay: rep}); err != nil {
				t.Fatal(err)
			}
			stop := runSub(t, sub)
			select {
			case <-subscribed:
			case <-time.After(20 * time.Second):
				t.Fatal("no subscription")
			}
			ctx := context.Background()
			for _, seq := range []uint64{0, 1, 2, 5, 6, 7} {
				xp.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
			}
			poll.WaitFor(t, waitTimeout, "batch 7", func() bool { return rec.count("s") >= 6 })
			stop()
			want := "s batch 0 s batch 1 s batch 2 s lost 3 5 s batch 5 s batch 6 s batch 7"
			if name == "never-ends" {
				want = "s batch 0 s batch 1 s batch 2 s batch 3 s lost 4 5 s batch 5 s batch 6 s batch 7"
			}
			var got []string
			for _, l := range rec.snapshot() {
				f := strings.Fields(l)
				got = append(got, strings.Join(f[:min(len(f), 4)], " "))
			}
			g := strings.Join(got, " ")
			g = strings.NewReplacer(" ts=0", "", " ts=1", "", " ts=2", "", " ts=3", "", " ts=5", "", " ts=6", "", " ts=7", "").Replace(g)
			if g != want {
				t.Fatalf("got  %s\nwant %s", g, want)
			}
			st := sub.Stats()
			// At most three replays without progress (never-ends makes
			// progress once: batch 3); fewer once ReplayDeadline has passed
			// since the last progress (junk-flood's first replay runs to it).
			wantReplays := uint64(defaultReplayAttempts)
			if name == "never-ends" {
				wantReplays++
			}
			if st.Replays < 1 || st.Replays > wantReplays || st.Gaps != 1 {
				t.Fatalf("stats %+v, want 1..%d replays", st, wantReplays)
			}
			if name == "far-ahead" && st.Dropped[decodeguard.ReasonValidate] != st.Replays {
				t.Fatalf("far-ahead batch not refused: %+v", st.Dropped)
			}
			if name == "junk-flood" && st.Dropped[decodeguard.ReasonEnvelope] == 0 {
				t.Fatalf("junk not counted: %+v", st.Dropped)
			}
		})
	}
}

// TestRemoveDuringReplay: removing a source whose replay is waiting on a
// silent server returns promptly and leaves nothing running.
func TestRemoveDuringReplay(t *testing.T) {
	rep := replayServer(t, func(ctx context.Context, r *socket.Socket, id []byte) { <-ctx.Done() })
	xp, err := socket.New("XPUB", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer xp.Close()
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := xp.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, FromStart: true, ReplayTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "s", Live: xp.Endpoint(), Replay: rep}); err != nil {
		t.Fatal(err)
	}
	stop := runSub(t, sub)
	seq := uint64(7)
	poll.WaitFor(t, waitTimeout, "a replay", func() bool {
		xp.Send(context.Background(), []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payloadOf(seq))
		seq++
		time.Sleep(10 * time.Millisecond)
		return sub.Stats().Replays >= 1
	})
	done := make(chan error, 1)
	go func() { done <- sub.Remove("s") }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Remove blocked on a replay")
	}
	stop()
}
