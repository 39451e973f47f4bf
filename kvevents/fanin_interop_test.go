package kvevents_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// pyEngines drives testdata/fanin_engines.py: pyzmq engines that connect to
// a fan-in endpoint from their own loopback addresses, as llm-d deploys
// vLLM.
type pyEngines struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan string
}

func startEngines(t *testing.T) *pyEngines {
	t.Helper()
	py := pypeer.Require(t, "zmq")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "fanin_engines.py"))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &pyEngines{t: t, in: in, lines: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_, _ = io.WriteString(in, `{"op":"quit"}`+"\n")
		in.Close()
		for range p.lines { // drain until the script exits
		}
		<-done
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("fanin_engines.py: %v: %s", err, stderr.String())
		}
		cancel()
	})
	return p
}

// do sends one command and returns the script's answer after "ok".
func (p *pyEngines) do(cmd map[string]any) string {
	p.t.Helper()
	b, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("fanin_engines.py %s: %v", b, err)
	}
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, "ok") {
			p.t.Fatalf("fanin_engines.py %s: %q", b, l)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, "ok"))
	case <-time.After(60 * time.Second):
		p.t.Fatalf("fanin_engines.py %s: no answer within 60 s", b)
	}
	return ""
}

// fleet is the Go side of a fan-in test: the Subscriber, the index it
// feeds, the updates it saw, and what each engine holds (truth).
type fleet struct {
	t     *testing.T
	py    *pyEngines
	sub   *kvevents.Subscriber
	live  string
	idx   *kvindex.Index
	mu    sync.Mutex
	ups   []kvevents.Update // Batch left out
	truth *kvmodel.Model
	docs  map[string]int // engine -> its document
	logs  *lineLog
}

// lineLog keeps the Subscriber's log lines.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(b))
	l.mu.Unlock()
	return len(b), nil
}

func (l *lineLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func (l *lineLog) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

const bs = 16 // block size of every engine

// newFleet starts the python engines; start starts the Subscriber.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	return &fleet{t: t, py: startEngines(t), truth: kvmodel.NewModel(0, nil), docs: map[string]int{}, logs: &lineLog{}}
}

func (f *fleet) start(cfg kvevents.Config, src kvevents.Source) {
	t := f.t
	t.Helper()
	idx, err := kvindex.New(kvindex.Config{Capacity: 1 << 16, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	f.idx = idx
	t.Cleanup(func() { idx.Close() })
	cfg.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	cfg.LogInterval = time.Millisecond
	cfg.Handler = func(_ context.Context, u kvevents.Update) error {
		if err := idx.Apply(u); err != nil {
			return err
		}
		u.Batch = nil
		f.mu.Lock()
		f.ups = append(f.ups, u)
		f.mu.Unlock()
		return nil
	}
	sub, err := kvevents.NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.sub = sub
	if err := sub.Add(src); err != nil {
		t.Fatal(err)
	}
	f.live = strings.Replace(sub.Endpoint(src.Name), "tcp://0.0.0.0:", "tcp://127.0.0.1:", 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30 s")
		}
	})
}

// replay binds engine name's replay server on src:port (0: the kernel
// chooses) and returns its port.
func (f *fleet) replay(name, src string, port string) string {
	ep := f.py.do(map[string]any{"op": "replay", "name": name, "src": src, "port": atoi(f.t, port)})
	return ep[strings.LastIndexByte(ep, ':')+1:]
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("port %q: %v", s, err)
	}
	return n
}

// engine connects python engine name, publishing topic, from address src.
func (f *fleet) engine(name, src, topic string) {
	f.py.do(map[string]any{"op": "engine", "name": name, "src": src, "live": f.live, "topic": topic})
}

// send has engine name store block seq of topic's document as batch seq;
// live false keeps it for replay only. held says whether the engine
// holding topic holds it (the truth model learns it): false for a peer
// spoofing another's topic.
func (f *fleet) send(name, topic string, seq uint64, live, held bool) {
	doc, ok := f.docs[topic]
	if !ok {
		doc = len(f.docs) + 1
		f.docs[topic] = doc
	}
	toks := kvmodel.Tokens(doc, bs*int(seq+1))
	parent := int64(-1)
	if seq > 0 {
		parent = int64(doc*1000 + int(seq) - 1)
	}
	ev := kvmodel.Store([]uint64{uint64(doc*1000 + int(seq))}, parent, toks[bs*int(seq):], bs, "GPU", 0)
	payload := kvevents.AppendBatch(nil, float64(seq), []kvevents.Event{ev}, kvevents.Opt[int64]{}, true)
	if held {
		f.truth.ApplyEvents(topic, []kvevents.Event{ev})
	}
	f.py.do(map[string]any{"op": "send", "name": name, "seq": seq, "payload": hex.EncodeToString(payload), "live": live})
}

// waitFor waits (30 s at most) for cond.
func (f *fleet) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			f.mu.Lock()
			ups := slices.Clone(f.ups)
			f.mu.Unlock()
			f.t.Fatalf("waiting for %s: not within 30 s; updates %+v; stats %+v", what, ups, f.sub.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seen reports whether an update of kind for source was delivered (with
// seq, for a batch or a reset).
func (f *fleet) seen(kind, source string, seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.ups {
		if u.Kind == kind && u.Source == source && (kind != kvevents.UpdateBatch && kind != kvevents.UpdateReset || u.Seq == seq) {
			return true
		}
	}
	return false
}

// updates returns source's updates, as "kind seq" or "lost from to".
func (f *fleet) updates(source string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, u := range f.ups {
		if u.Source != source {
			continue
		}
		switch u.Kind {
		case kvevents.UpdateLost:
			out = append(out, fmt.Sprintf("lost %d %d", u.From, u.To))
		case kvevents.UpdateDeparted:
			out = append(out, "departed")
		default:
			out = append(out, fmt.Sprintf("%s %d", u.Kind, u.Seq))
		}
	}
	return out
}

// released waits until topic's connection is seen closed (no holder).
func (f *fleet) released(topic string) {
	f.t.Helper()
	f.waitFor(topic+" released", func() bool {
		st, ok := f.engineStats(topic)
		return ok && st.Holder.Addr == "" && !st.Connected
	})
}

func (f *fleet) engineStats(name string) (kvevents.SourceStats, bool) {
	for _, s := range f.sub.Stats().Sources {
		if s.Name == name {
			return s, true
		}
	}
	return kvevents.SourceStats{}, false
}

// checkScores compares the index's answer with what each engine holds,
// for every engine's document.
func (f *fleet) checkScores(when string) {
	f.t.Helper()
	for topic, doc := range f.docs {
		req := kvindex.ScoreRequest{Tokens: kvmodel.Tokens(doc, bs*8)}
		got, err := f.idx.Score(req)
		if err != nil {
			f.t.Fatal(err)
		}
		want := f.truth.Score(req, bs)
		if g, w := scoreLine(got), scoreLine(want); g != w {
			f.t.Errorf("%s: document of %s: index %s, engines hold %s", when, topic, g, w)
		}
	}
}

func scoreLine(r kvindex.ScoreResult) string {
	var parts []string
	for _, e := range r.Engines {
		parts = append(parts, fmt.Sprintf("%s:%d+%dmaybe", e.Engine, e.Blocks, e.MaybeBlocks))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// TestFanInLLMD is llm-d's topology with real engines (pyzmq, libzmq
// 4.3.4): engines connect to one bound fan-in endpoint from their own
// addresses, each topic kv@<ip>@<model> its own engine with its own
// sequence, replay (the endpoint derived from the topic), resets and
// retirement; a spoofed topic is refused, counted and named; the index's
// scores match what each engine holds at every step.
func TestFanInLLMD(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	f := newFleet(t)
	port := f.replay("e2", "127.0.0.2", "0")
	f.replay("e3", "127.0.0.3", port)
	f.replay("e4", "127.0.0.4", port)
	f.start(kvevents.Config{EngineTTL: ttl, ReplayTimeout: 5 * time.Second},
		kvevents.Source{Name: "fleet", Live: "tcp://127.0.0.1:0", FanIn: true, ReplayTemplate: "tcp://{host}:" + port})
	t2, t3, t4 := "kv@127.0.0.2@org/model-a", "kv@127.0.0.3@org/model-a", "kv@127.0.0.4@org/model-a"
	f.engine("e2", "127.0.0.2", t2)
	f.engine("e3", "127.0.0.3", t3)
	f.engine("e4", "127.0.0.4", t4)
	for _, e := range []struct{ name, topic string }{{"e2", t2}, {"e3", t3}, {"e4", t4}} {
		f.send(e.name, e.topic, 0, true, true)
		f.send(e.name, e.topic, 1, true, true)
	}
	for _, tp := range []string{t2, t3, t4} {
		f.waitFor(tp+" batch 1", func() bool { return f.seen(kvevents.UpdateBatch, tp, 1) })
	}
	f.checkScores("three engines, two batches each")
	if st, _ := f.engineStats("fleet"); st.FanIn.Conns != 3 || st.FanIn.Topics != 3 {
		t.Errorf("fan-in stats %+v, want 3 connections and 3 topics", st.FanIn)
	}
	if st, ok := f.engineStats(t2); !ok || st.Replay != "tcp://127.0.0.2:"+port || !strings.HasPrefix(st.Holder.Addr, "127.0.0.2:") {
		t.Errorf("engine %s: stats %+v, want replay tcp://127.0.0.2:%s and holder 127.0.0.2", t2, st, port)
	}

	// A gap on e2: batch 2 only in its replay buffer. Its replay server,
	// found from its topic, gives it back.
	f.send("e2", t2, 2, false, true)
	f.send("e2", t2, 3, true, true)
	f.waitFor(t2+" batch 3", func() bool { return f.seen(kvevents.UpdateBatch, t2, 3) })
	if got, want := strings.Join(f.updates(t2), ","), "batch 0,batch 1,batch 2,batch 3"; got != want {
		t.Errorf("%s updates %s, want %s", t2, got, want)
	}
	if st, _ := f.engineStats(t2); st.Replayed != 1 || st.Lost != 0 {
		t.Errorf("%s: replayed %d lost %d, want 1 and 0", t2, st.Replayed, st.Lost)
	}
	f.checkScores("after e2's gap, replayed")

	// 127.0.0.4 publishes e2's topic: refused (address), counted, named.
	f.engine("spoof", "127.0.0.4", t2)
	f.send("spoof", t2, 9, true, false)
	// A second connection from e2's own address: the topic is held.
	f.engine("e2bis", "127.0.0.2", t2)
	f.send("e2bis", t2, 0, true, false)
	f.waitFor("the refusals", func() bool {
		st, _ := f.engineStats("fleet")
		return st.FanIn.RefusedBy.Address >= 1 && st.FanIn.RefusedBy.TopicHeld >= 1
	})
	// A refusal is counted before its line is written (the line is written
	// once the fan-in lock is released): wait for the lines too.
	f.waitFor("a log line naming the spoofing peer", func() bool {
		return f.logs.has("peer=127.0.0.4:", "reason=address", "topic=kv@127.0.0.2@org/model-a")
	})
	f.waitFor("a log line naming the held topic's holder", func() bool {
		return f.logs.has("peer=127.0.0.2:", "reason=topic_held", "holder=127.0.0.2:")
	})
	// e2 goes on as before: nothing of the refused peers reached it.
	f.send("e2", t2, 4, true, true)
	f.waitFor(t2+" batch 4", func() bool { return f.seen(kvevents.UpdateBatch, t2, 4) })
	if got, want := strings.Join(f.updates(t2), ","), "batch 0,batch 1,batch 2,batch 3,batch 4"; got != want {
		t.Errorf("%s updates %s, want %s", t2, got, want)
	}
	f.py.do(map[string]any{"op": "close", "name": "spoof"})
	f.py.do(map[string]any{"op": "close", "name": "e2bis"})
	f.checkScores("after the refused peers")

	// e2's connection is cut and comes back, same run: the new connection's
	// continuity with batch 4 is proven by a replay from e2's own server.
	// The topic is free once the old connection's close is seen: a batch
	// the new connection sends before that is refused (topic_held), and
	// the next one's continuity proof recovers it.
	f.py.do(map[string]any{"op": "reconnect", "name": "e2"})
	f.released(t2)
	f.send("e2", t2, 5, true, true)
	f.waitFor(t2+" batch 5", func() bool { return f.seen(kvevents.UpdateBatch, t2, 5) })
	if got, want := strings.Join(f.updates(t2), ","), "batch 0,batch 1,batch 2,batch 3,batch 4,batch 5"; got != want {
		t.Errorf("%s updates %s, want %s", t2, got, want)
	}
	if st, _ := f.engineStats(t2); st.ContinuityProven != 1 || st.Unproven != 0 {
		t.Errorf("%s: continuity proven %d unproven %d, want 1 and 0", t2, st.ContinuityProven, st.Unproven)
	}
	f.checkScores("after e2's reconnect")

	// e3 restarts: a new connection, its sequence back to 0: a reset.
	f.py.do(map[string]any{"op": "restart", "name": "e3"})
	f.released(t3)
	f.truth.Clear(t3)
	f.send("e3", t3, 0, true, true)
	f.waitFor(t3+" reset", func() bool { return f.seen(kvevents.UpdateReset, t3, 0) && len(f.updates(t3)) == 4 })
	if got, want := strings.Join(f.updates(t3), ","), "batch 0,batch 1,reset 0,batch 0"; got != want {
		t.Errorf("%s updates %s, want %s", t3, got, want)
	}
	f.checkScores("after e3's restart")

	// e4 leaves: after EngineTTL it is retired, its entries dropped.
	// e2, idle and connected since before e4 left, is not.
	f.py.do(map[string]any{"op": "close", "name": "e4"})
	f.truth.Clear(t4)
	f.waitFor(t4+" departed", func() bool { return f.seen(kvevents.UpdateDeparted, t4, 0) })
	if got := f.updates(t2); slices.Contains(got, "departed") {
		t.Errorf("%s, idle and connected, was retired: %s", t2, got)
	}
	if _, ok := f.engineStats(t4); ok {
		t.Errorf("%s still in the stats after its departure", t4)
	}
	if st, _ := f.engineStats("fleet"); st.FanIn.Departed != 1 || st.FanIn.Topics != 2 {
		t.Errorf("fan-in stats %+v, want 1 departed and 2 topics", st.FanIn)
	}
	f.checkScores("after e4 left")

	// e4 comes back: a new run, delivered from its first batch, no
	// continuity to prove.
	f.engine("e4again", "127.0.0.4", t4)
	f.send("e4again", t4, 7, true, true)
	f.waitFor(t4+" back", func() bool { return f.seen(kvevents.UpdateBatch, t4, 7) })
	if got, want := strings.Join(f.updates(t4), ","), "batch 0,batch 1,departed,batch 7"; got != want {
		t.Errorf("%s updates %s, want %s", t4, got, want)
	}
	f.checkScores("after e4 came back")
}

// TestFanInNoReplay: without Source.ReplayTemplate a gap is a lost range
// of its engine alone.
func TestFanInNoReplay(t *testing.T) {
	f := newFleet(t)
	f.start(kvevents.Config{EngineTTL: -1},
		kvevents.Source{Name: "fleet", Live: "tcp://127.0.0.1:0", FanIn: true})
	t2, t3 := "kv@127.0.0.2@m", "kv@127.0.0.3@m"
	f.engine("e2", "127.0.0.2", t2)
	f.engine("e3", "127.0.0.3", t3)
	for seq := range uint64(4) {
		f.send("e2", t2, seq, seq != 2, true)
		f.send("e3", t3, seq, true, true)
	}
	f.waitFor("both engines' batch 3", func() bool {
		return f.seen(kvevents.UpdateBatch, t2, 3) && f.seen(kvevents.UpdateBatch, t3, 3)
	})
	if got, want := strings.Join(f.updates(t2), ","), "batch 0,batch 1,lost 2 3,batch 3"; got != want {
		t.Errorf("%s updates %s, want %s", t2, got, want)
	}
	if got, want := strings.Join(f.updates(t3), ","), "batch 0,batch 1,batch 2,batch 3"; got != want {
		t.Errorf("%s updates %s, want %s", t3, got, want)
	}
	st, _ := f.engineStats(t2)
	if st.Lost != 1 || len(st.LostRanges) != 1 || st.LostRanges[0] != (kvevents.Range{From: 2, To: 3}) || st.Replay != "" {
		t.Errorf("%s stats: lost %d ranges %v replay %q, want 1 [2,3) and none", t2, st.Lost, st.LostRanges, st.Replay)
	}
	// The index: e3 as it holds it (4 certain blocks); e2's blocks before
	// the loss uncertain (maybe, never certain), its prefix broken at the
	// lost batch.
	for topic, want := range map[string]string{t2: "[" + t2 + ":0+2maybe]", t3: "[" + t3 + ":4+4maybe]"} {
		got, err := f.idx.Score(kvindex.ScoreRequest{Tokens: kvmodel.Tokens(f.docs[topic], bs*8)})
		if err != nil {
			t.Fatal(err)
		}
		if line := scoreLine(got); line != want {
			t.Errorf("document of %s: index %s, want %s", topic, line, want)
		}
	}
	// e3 comes back on a new connection and goes on at batch 4: a new
	// connection of that engine, whose continuity nothing can prove here
	// (no replay): an empty lost range, its entries uncertain.
	f.py.do(map[string]any{"op": "restart", "name": "e3"})
	f.released(t3)
	f.send("e3", t3, 4, true, true)
	f.waitFor(t3+" batch 4", func() bool { return f.seen(kvevents.UpdateBatch, t3, 4) })
	if got, want := strings.Join(f.updates(t3), ","), "batch 0,batch 1,batch 2,batch 3,lost 4 4,batch 4"; got != want {
		t.Errorf("%s updates %s, want %s", t3, got, want)
	}
	if st, _ := f.engineStats(t3); st.Unproven != 1 {
		t.Errorf("%s: Unproven %d, want 1", t3, st.Unproven)
	}
}

// TestFanInBounds: the topics per connection and in all are bounded,
// refusals counted and logged; an empty topic names no engine.
func TestFanInBounds(t *testing.T) {
	f := newFleet(t)
	f.start(kvevents.Config{FanInMaxTopics: 2, FanInMaxTopicsPerConn: 1},
		kvevents.Source{Name: "fleet", Live: "tcp://127.0.0.1:0", FanIn: true})
	t2, t3, t4 := "kv@127.0.0.2@m", "kv@127.0.0.3@m", "kv@127.0.0.4@m"
	f.engine("e2", "127.0.0.2", t2)
	f.send("e2", t2, 0, true, true)
	f.waitFor(t2, func() bool { return f.seen(kvevents.UpdateBatch, t2, 0) })
	// e2's connection publishes a second topic: over the per-connection
	// bound.
	f.py.do(map[string]any{"op": "topic", "name": "e2", "topic": "kv@127.0.0.2@other"})
	f.send("e2", "kv@127.0.0.2@other", 0, true, false)
	f.engine("e3", "127.0.0.3", t3)
	f.send("e3", t3, 0, true, true)
	f.waitFor(t3, func() bool { return f.seen(kvevents.UpdateBatch, t3, 0) })
	// A third engine: over the bound in all.
	f.engine("e4", "127.0.0.4", t4)
	f.send("e4", t4, 0, true, false)
	f.engine("empty", "127.0.0.5", "")
	f.send("empty", "", 0, true, false)
	f.waitFor("the refusals", func() bool {
		st, _ := f.engineStats("fleet")
		r := st.FanIn.RefusedBy
		return r.ConnTopicLimit >= 1 && r.TopicLimit >= 1 && r.BadTopic >= 1
	})
	if !f.logs.has("Config.FanInMaxTopicsPerConn", "peer=127.0.0.2:", "limit=1") {
		t.Errorf("no log line for the per-connection bound: %q", f.logs.all())
	}
	if !f.logs.has("Config.FanInMaxTopics)", "peer=127.0.0.4:", "limit=2") {
		t.Errorf("no log line for the bound in all: %q", f.logs.all())
	}
	st := f.sub.Stats()
	if len(st.Sources) != 3 || st.FanIn.Topics != 2 {
		t.Errorf("sources %d, topics %d; want the fan-in source and its 2 engines", len(st.Sources), st.FanIn.Topics)
	}
	f.checkScores("bounds")
}

// TestFanInAnyAddress: with Config.FanInAnyAddress (proxies, meshes) a
// topic naming another address is accepted.
func TestFanInAnyAddress(t *testing.T) {
	f := newFleet(t)
	f.start(kvevents.Config{FanInAnyAddress: true},
		kvevents.Source{Name: "fleet", Live: "tcp://127.0.0.1:0", FanIn: true})
	topic := "kv@10.1.2.3@m"
	f.engine("e", "127.0.0.4", topic)
	f.send("e", topic, 0, true, true)
	f.waitFor(topic, func() bool { return f.seen(kvevents.UpdateBatch, topic, 0) })
	if st, _ := f.engineStats("fleet"); st.FanIn.Refused != 0 {
		t.Errorf("refusals %+v, want none", st.FanIn.RefusedBy)
	}
	f.checkScores("any address")
}
