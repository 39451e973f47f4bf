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
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

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
	fs.StringVar(&binPath, "bin", "", "row8: measure this zmqguard binary's kv-events (its defaults) instead of an in-process Subscriber")
	fs.StringVar(&heapProfile, "heapprofile", "", "row8: write the subscriber's heap profile (after a GC) to this file at the end")
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

// heapProfile is row8's -heapprofile; binPath its -bin.
var heapProfile, binPath string

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
