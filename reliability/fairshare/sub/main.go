// Command sub re-measures issue 29's KV-subscriber rows against the
// kvevents library on loopback (kernel-chosen ports, bounded in count and
// time), for RELIABILITY.md's "Fair shares (issue 29)" table:
//
//	go run ./reliability/fairshare/sub row3 [-clients 20] [-for 10s]
//	go run ./reliability/fairshare/sub row5 [-hostile 16] [-gaps 20] [-window 30s]
//	go run ./reliability/fairshare/sub row6 [-trials 20]
//	go run ./reliability/fairshare/sub row7 [-for 10s]
//	go run ./reliability/fairshare/sub row8 [-sources 8] [-for 20s]
//	go run ./reliability/fairshare/sub row12 [-trials 20]
//
// Each prints one JSON object. The publishers are raw XPUB sockets and the
// replay servers raw ROUTERs driven by this program; the subscriber is
// kvevents.Subscriber with its default Config (only fields every version
// has), so the same program measures the code before and after the fix.
//
// row3: a kvevents.Publisher (replay buffer, 1,000 batches/s) and -clients
// replay clients that ask for replays and never read; after 5 s an honest
// FromStart subscriber joins and runs for -for. It reports the batches
// the subscriber reported lost (the publisher held all of them: its buffer
// holds 10,000) and delivered.
//
// row5: -hostile sources whose replay servers trickle (one junk reply a
// second, never an end), or with -down are a closed port, keep asking for
// replays; an honest source, whose
// replay server answers at once, opens -gaps gaps, one every 500 ms. It
// reports each gap's recovery time (the missing batch delivered), p50/p99,
// and what was reported lost; a gap not recovered within -window counts as
// the window.
//
// row6: no attacker. Each trial opens a gap; the replay server answers
// 500 ms later with what it held when asked; meanwhile the live stream
// drops one more batch. It reports the trials that reported a batch lost
// (the publisher held it).
//
// row7: a Bind source; the engine dials it and publishes 1,000 batches/s;
// after 1 s a second publisher dials it and publishes its own sequence from
// 0 at the same rate. It reports resets, lost batches, the intruder's
// batches delivered as the source's, and the engine's delivered share.
//
// row8: the attacker runs in a child process (this program, "row8-pub"):
// -sources live publishers send 8 MiB batches (2 a second each, with a gap
// first) and their replay servers trickle. It reports the subscriber
// process's peak RSS (VmHWM).
//
// row12: each trial opens a gap; the replay server answers in reverse
// order, starting 1,000 past the live stream. It reports the real batches
// then dropped as duplicates and the batches reported lost.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sub row5|row6|row7|row8|row12 [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	hostile := fs.Int("hostile", 16, "row5: hostile sources")
	gaps := fs.Int("gaps", 20, "row5: honest gaps")
	window := fs.Duration("window", 30*time.Second, "row5: longest wait for one gap")
	down := fs.Bool("down", false, "row5: the hostile sources' replay servers are down (a closed port), not trickling")
	trials := fs.Int("trials", 20, "row6, row12: trials")
	dur := fs.Duration("for", 0, "row7, row8: attack duration (default 10s / 20s)")
	sources := fs.Int("sources", 8, "row8: sources")
	clients := fs.Int("clients", 20, "row3: replay clients that never read")
	fs.Parse(os.Args[2:])
	var out any
	var err error
	switch cmd {
	case "row3":
		out, err = row3(*clients, orDefault(*dur, 10*time.Second))
	case "row5":
		out, err = row5(*hostile, *gaps, *window, *down)
	case "row6":
		out, err = row6(*trials, false)
	case "row12":
		out, err = row6(*trials, true)
	case "row7":
		out, err = row7(orDefault(*dur, 10*time.Second))
	case "row8":
		out, err = row8(*sources, orDefault(*dur, 20*time.Second))
	case "row8-pub":
		err = row8Pub(*sources, orDefault(*dur, 20*time.Second))
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sub:", err)
		os.Exit(1)
	}
	if out != nil {
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// live is a raw live publisher.
type live struct {
	xp  *socket.Socket
	sub chan struct{}
}

func newLive() (*live, error) {
	xp, err := socket.New("XPUB", socket.DefaultOptions())
	if err != nil {
		return nil, err
	}
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		return nil, err
	}
	l := &live{xp: xp, sub: make(chan struct{}, 1)}
	go func() {
		for {
			m, err := xp.Recv(context.Background())
			if err != nil {
				return
			}
			if len(m.Frames) == 1 && len(m.Frames[0]) > 0 && m.Frames[0][0] == 1 {
				select {
				case l.sub <- struct{}{}:
				default:
				}
			}
		}
	}()
	return l, nil
}

func (l *live) wait() error {
	select {
	case <-l.sub:
		return nil
	case <-time.After(20 * time.Second):
		return fmt.Errorf("no subscription on %s", l.xp.Endpoint())
	}
}

func seq8(s uint64) []byte { return binary.BigEndian.AppendUint64(nil, s) }

func batch(ts float64) []byte {
	return kvevents.AppendBatch(nil, ts, []kvevents.Event{{Type: kvevents.AllBlocksCleared}}, kvevents.Opt[int64]{}, true)
}

func (l *live) send(s uint64, payload []byte) {
	l.xp.Send(context.Background(), []byte("t"), seq8(s), payload)
}

// replaySrv is a raw replay ROUTER; serve runs per request.
func replaySrv(ctx context.Context, serve func(ctx context.Context, r *socket.Socket, id []byte, from uint64)) (string, error) {
	r, err := socket.New("ROUTER", socket.DefaultOptions())
	if err != nil {
		return "", err
	}
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		return "", err
	}
	go func() {
		<-ctx.Done()
		r.Close()
	}()
	go func() {
		for {
			m, err := r.Recv(ctx)
			if err != nil {
				return
			}
			if len(m.Frames) != 3 || len(m.Frames[2]) != 8 {
				continue
			}
			id := append([]byte(nil), m.Frames[0]...)
			go serve(ctx, r, id, binary.BigEndian.Uint64(m.Frames[2]))
		}
	}()
	return r.Endpoint(), nil
}

func reply(ctx context.Context, r *socket.Socket, id []byte, s uint64, payload []byte) {
	r.Send(ctx, id, nil, []byte("t"), seq8(s), payload)
}

func endMarker(ctx context.Context, r *socket.Socket, id []byte) {
	r.Send(ctx, id, nil, nil, seq8(^uint64(0)), nil)
}

// trickle answers a replay with one junk reply a second and never ends.
func trickle(ctx context.Context, r *socket.Socket, id []byte, _ uint64) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		r.Send(ctx, id, nil, []byte("t"), []byte{1}, nil)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tracker records, per source, delivery times of batches and lost ranges.
type tracker struct {
	mu        sync.Mutex
	delivered map[string]map[uint64]time.Time
	lost      map[string]uint64
	resets    map[string]int
	foreign   int
	notify    chan struct{}
}

func newTracker() *tracker {
	return &tracker{delivered: map[string]map[uint64]time.Time{}, lost: map[string]uint64{}, resets: map[string]int{},
		notify: make(chan struct{}, 1)}
}

func (t *tracker) handle(_ context.Context, u kvevents.Update) error {
	t.mu.Lock()
	switch u.Kind {
	case kvevents.UpdateBatch:
		m := t.delivered[u.Source]
		if m == nil {
			m = map[uint64]time.Time{}
			t.delivered[u.Source] = m
		}
		if u.Batch.TS == 424242 {
			t.foreign++ // the row-7 intruder's
		} else {
			m[u.Seq] = time.Now()
		}
	case kvevents.UpdateLost:
		t.lost[u.Source] += u.To - u.From
	case kvevents.UpdateReset:
		t.resets[u.Source]++
	}
	t.mu.Unlock()
	select {
	case t.notify <- struct{}{}:
	default:
	}
	return nil
}

// until waits until cond holds (checked after each update) or d passes.
func (t *tracker) until(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		ok := cond()
		t.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-t.notify:
		case <-tick.C:
		case <-deadline.C:
			return false
		}
	}
}

func startSub(h func(context.Context, kvevents.Update) error) (*kvevents.Subscriber, func(), error) {
	sub, err := kvevents.NewSubscriber(kvevents.Config{Handler: h, Logger: quiet})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sub.Run(ctx); close(done) }()
	return sub, func() { cancel(); <-done }, nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func row5(nHostile, nGaps int, window time.Duration, down bool) (any, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	bad, err := replaySrv(ctx, trickle)
	if err != nil {
		return nil, err
	}
	if down {
		// A port that was bound and is closed: nobody answers there.
		r, err := socket.New("ROUTER", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
			return nil, err
		}
		bad = r.Endpoint()
		r.Close()
	}
	var honestHigh atomic.Uint64
	good, err := replaySrv(ctx, func(ctx context.Context, r *socket.Socket, id []byte, from uint64) {
		for s := from; s <= honestHigh.Load(); s++ {
			reply(ctx, r, id, s, batch(float64(s)))
		}
		endMarker(ctx, r, id)
	})
	if err != nil {
		return nil, err
	}
	var hostile []*live
	for i := range nHostile {
		l, err := newLive()
		if err != nil {
			return nil, err
		}
		defer l.xp.Close()
		if err := sub.Add(kvevents.Source{Name: fmt.Sprintf("hostile%02d", i), Live: l.xp.Endpoint(), Replay: bad}); err != nil {
			return nil, err
		}
		hostile = append(hostile, l)
	}
	honest, err := newLive()
	if err != nil {
		return nil, err
	}
	defer honest.xp.Close()
	if err := sub.Add(kvevents.Source{Name: "honest", Live: honest.xp.Endpoint(), Replay: good}); err != nil {
		return nil, err
	}
	for _, l := range append(hostile, honest) {
		if err := l.wait(); err != nil {
			return nil, err
		}
	}
	// Hostile sources open gaps, and keep opening new ones.
	go func() {
		s := uint64(0)
		for ctx.Err() == nil {
			for _, l := range hostile {
				l.send(s, batch(0))
			}
			s += 2
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	time.Sleep(time.Second) // let the hostile replays take the slots (the scenario's set-up)
	s := uint64(0)
	honest.send(s, batch(0))
	type gap struct {
		missing uint64
		at      time.Time
	}
	var gs []gap
	for range nGaps {
		s += 2 // s-1 is missing
		honestHigh.Store(s)
		gs = append(gs, gap{missing: s - 1, at: time.Now()})
		honest.send(s, batch(float64(s)))
		time.Sleep(500 * time.Millisecond)
	}
	last := gs[len(gs)-1]
	tr.until(window, func() bool {
		_, ok := tr.delivered["honest"][last.missing]
		return ok || tr.lost["honest"] > 0 && time.Since(last.at) > window
	})
	tr.mu.Lock()
	var rec []time.Duration
	recovered := 0
	for _, g := range gs {
		if at, ok := tr.delivered["honest"][g.missing]; ok {
			rec = append(rec, at.Sub(g.at))
			recovered++
		} else {
			rec = append(rec, window)
		}
	}
	lost := tr.lost["honest"]
	tr.mu.Unlock()
	return map[string]any{"row": 5, "hostile_down": down, "hostile_sources": nHostile, "gaps": nGaps, "recovered": recovered,
		"recovery_p50_ms": pct(rec, 0.5).Milliseconds(), "recovery_p99_ms": pct(rec, 0.99).Milliseconds(),
		"honest_lost": lost, "window_s": window.Seconds()}, nil
}

// row6 (and row12 when hostile): gaps recovered by a replay server that
// answers 500 ms late, while the live stream drops one more batch; or by
// one that answers in reverse order, from 1,000 past the live stream.
func row6(trials int, hostile bool) (any, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	var high, served atomic.Uint64
	requests := make(chan uint64, 64)
	rep, err := replaySrv(ctx, func(ctx context.Context, r *socket.Socket, id []byte, from uint64) {
		at := high.Load()
		served.Add(1)
		if os.Getenv("G3DEBUG") != "" {
			fmt.Fprintln(os.Stderr, "request from", from, "at", at)
		}
		select {
		case requests <- from:
		default:
		}
		if hostile {
			reply(ctx, r, id, at+1000, batch(0))
			for s := at; s >= from && s+1 > 0; s-- {
				reply(ctx, r, id, s, batch(float64(s)))
			}
			endMarker(ctx, r, id)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		for s := from; s <= at; s++ {
			reply(ctx, r, id, s, batch(float64(s)))
		}
		endMarker(ctx, r, id)
	})
	if err != nil {
		return nil, err
	}
	l, err := newLive()
	if err != nil {
		return nil, err
	}
	defer l.xp.Close()
	if err := sub.Add(kvevents.Source{Name: "s", Live: l.xp.Endpoint(), Replay: rep}); err != nil {
		return nil, err
	}
	if err := l.wait(); err != nil {
		return nil, err
	}
	pub := func(s uint64) { high.Store(s); l.send(s, batch(float64(s))) }
	s := uint64(0)
	pub(s)
	withLoss, stuck, done, noGap := 0, 0, 0, 0
	for range trials {
		before := func() uint64 { tr.mu.Lock(); defer tr.mu.Unlock(); return tr.lost["s"] }()
		// s+1 missing; s+2 published: a gap.
		pub(s + 2)
		select {
		case <-requests:
		case <-time.After(5 * time.Second):
			// No gap seen: next was pushed past the live stream.
			noGap++
		}
		if noGap > 0 {
			break
		}
		if !hostile {
			pub(s + 3) // s+4 dropped while the replay runs
			pub(s + 5)
			s += 5
		} else {
			s += 2
		}
		pub(s + 1)
		s++
		want := s
		if !tr.until(10*time.Second, func() bool { _, ok := tr.delivered["s"][want]; return ok }) {
			stuck++
			break
		}
		done++
		// The notices of this trial's later requests (the hole's second
		// replay) are not the next trial's.
		for {
			select {
			case <-requests:
				continue
			default:
			}
			break
		}
		tr.mu.Lock()
		if tr.lost["s"] > before {
			withLoss++
		}
		tr.mu.Unlock()
	}
	// Then 1,000 live batches in order: how many are delivered?
	first := s + 1
	for range 1000 {
		s++
		pub(s)
		time.Sleep(time.Millisecond)
	}
	last := s
	tr.until(5*time.Second, func() bool { _, ok := tr.delivered["s"][last]; return ok })
	st := sub.Stats()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	after := 0
	for x := first; x <= last; x++ {
		if _, ok := tr.delivered["s"][x]; ok {
			after++
		}
	}
	row := 6
	if hostile {
		row = 12
	}
	return map[string]any{"row": row, "trials": trials, "trials_done": done, "stuck_live_batch_never_delivered": stuck, "gap_not_detected": noGap, "then_live_delivered_of_1000": after, "trials_with_loss": withLoss, "lost": tr.lost["s"],
		"published": s + 1, "delivered": len(tr.delivered["s"]), "duplicates": st.Duplicates, "replays": st.Replays, "replay_requests_served": served.Load()}, nil
}

func row7(d time.Duration) (any, error) {
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := sub.Add(kvevents.Source{Name: "b", Live: "tcp://127.0.0.1:0", Bind: true}); err != nil {
		return nil, err
	}
	ep := sub.Endpoint("b")
	dial := func() (*socket.Socket, error) {
		xp, err := socket.New("XPUB", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		go func() {
			for {
				if _, err := xp.Recv(context.Background()); err != nil {
					return
				}
			}
		}()
		return xp, xp.Dial(ep)
	}
	ctx := context.Background()
	engine, err := dial()
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	// Wait for the engine's first batch to arrive.
	var sent uint64
	tk := time.NewTicker(time.Millisecond)
	defer tk.Stop()
	for !tr.until(10*time.Millisecond, func() bool { return len(tr.delivered["b"]) > 0 }) {
		engine.Send(ctx, []byte("t"), seq8(sent), batch(float64(sent)))
		sent++
		if sent > 20000 {
			return nil, fmt.Errorf("the engine never got through")
		}
	}
	first := sent
	var intruder *socket.Socket
	start := time.Now()
	var isent uint64
	for time.Since(start) < d {
		<-tk.C
		engine.Send(ctx, []byte("t"), seq8(sent), batch(float64(sent)))
		sent++
		if intruder == nil && time.Since(start) > time.Second {
			if intruder, err = dial(); err != nil {
				return nil, err
			}
			defer intruder.Close()
		}
		if intruder != nil {
			intruder.Send(ctx, []byte("t"), seq8(isent), batch(424242))
			isent++
		}
	}
	last := sent - 1
	tr.until(5*time.Second, func() bool { _, ok := tr.delivered["b"][last]; return ok })
	st := sub.Stats()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delivered := 0
	for s := first; s < sent; s++ {
		if _, ok := tr.delivered["b"][s]; ok {
			delivered++
		}
	}
	return map[string]any{"row": 7, "engine_sent": sent - first, "engine_delivered": delivered,
		"intruder_sent": isent, "intruder_delivered": tr.foreign, "resets": tr.resets["b"], "lost": tr.lost["b"],
		"refused_policy": st.Refused[decodeguard.ReasonPolicy]}, nil
}

// row8 runs the attacker as a child process and the subscriber here.
func row8(n int, d time.Duration) (any, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "row8-pub", "-sources", fmt.Sprint(n), "-for", (d + 10*time.Second).String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("attacker: %w", err)
	}
	var eps [][2]string
	if err := json.Unmarshal([]byte(line), &eps); err != nil {
		return nil, err
	}
	base := hwm()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	for i, e := range eps {
		if err := sub.Add(kvevents.Source{Name: fmt.Sprint("s", i), Live: e[0], Replay: e[1]}); err != nil {
			return nil, err
		}
	}
	time.Sleep(d) // the attack's duration (the measurement window)
	st := sub.Stats()
	return map[string]any{"row": 8, "sources": n, "seconds": d.Seconds(), "rss_before_mib": base >> 20,
		"peak_rss_mib": hwm() >> 20, "buffer_overflows": st.BufferOverflows, "replays": st.Replays, "lost": st.Lost}, nil
}

func row8Pub(n int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	rep, err := replaySrv(ctx, trickle)
	if err != nil {
		return err
	}
	var lives []*live
	var eps [][2]string
	for range n {
		l, err := newLive()
		if err != nil {
			return err
		}
		lives = append(lives, l)
		eps = append(eps, [2]string{l.xp.Endpoint(), rep})
	}
	b, _ := json.Marshal(eps)
	fmt.Println(string(b))
	for _, l := range lives {
		if err := l.wait(); err != nil {
			return err
		}
	}
	payload := make([]byte, 8<<20)
	s := uint64(0)
	tk := time.NewTicker(500 * time.Millisecond)
	defer tk.Stop()
	for ctx.Err() == nil {
		for _, l := range lives {
			l.send(s, payload)
		}
		if s == 0 {
			s++ // a gap: every source replays from 1
		}
		s++
		select {
		case <-ctx.Done():
		case <-tk.C:
		}
	}
	return nil
}

// hwm is this process's peak resident set (VmHWM), in bytes.
func hwm() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(l, "VmHWM:"), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

func row3(nClients int, d time.Duration) (any, error) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		for ctx.Err() == nil {
			pub.Publish(kvevents.Event{Type: kvevents.AllBlocksCleared})
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
	}()
	// Replay clients that never read: each asks for the whole buffer, again
	// every 100 ms.
	for range nClients {
		d, err := socket.New("DEALER", socket.DefaultOptions())
		if err != nil {
			return nil, err
		}
		defer d.Close()
		if err := d.Dial(pub.ReplayEndpoint()); err != nil {
			return nil, err
		}
		go func() {
			for ctx.Err() == nil {
				sctx, c := context.WithTimeout(ctx, 100*time.Millisecond)
				d.Send(sctx, []byte{}, seq8(0))
				c()
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	time.Sleep(5 * time.Second) // 5,000 batches held before the honest subscriber joins (the scenario's set-up)
	tr := newTracker()
	sub, err := kvevents.NewSubscriber(kvevents.Config{Handler: tr.handle, Logger: quiet, FromStart: true})
	if err != nil {
		return nil, err
	}
	if err := sub.Add(kvevents.Source{Name: "s", Live: pub.Endpoint(), Replay: pub.ReplayEndpoint()}); err != nil {
		return nil, err
	}
	sctx, scancel := context.WithTimeout(context.Background(), d)
	defer scancel()
	sub.Run(sctx)
	st := sub.Stats()
	ps := pub.Stats()
	return map[string]any{"row": 3, "replay_clients": nClients, "seconds": d.Seconds(), "published": ps.Published,
		"delivered": st.Batches, "replayed": st.Replayed, "lost": st.Lost, "replays": st.Replays, "lost_ranges": st.LostRanges}, nil
}
