package kvevents

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder collects updates; it copies what it keeps.
type recorder struct {
	mu      sync.Mutex
	lines   []string
	batches map[string][]uint64
	events  int
	notify  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{batches: map[string][]uint64{}, notify: make(chan struct{}, 1)}
}

func (r *recorder) handle(_ context.Context, u Update) error {
	r.mu.Lock()
	switch u.Kind {
	case UpdateBatch:
		r.batches[u.Source] = append(r.batches[u.Source], u.Seq)
		r.events += len(u.Batch.Events)
		s := fmt.Sprintf("%s batch %d ts=%v n=%d", u.Source, u.Seq, u.Batch.TS, len(u.Batch.Events))
		for _, e := range u.Batch.Events {
			s += " " + e.Type
			for _, h := range e.BlockHashes {
				s += ":" + h.String()
			}
		}
		r.lines = append(r.lines, s)
	case UpdateReset:
		r.lines = append(r.lines, fmt.Sprintf("%s reset %d", u.Source, u.Seq))
	case UpdateLost:
		r.lines = append(r.lines, fmt.Sprintf("%s lost %d %d", u.Source, u.From, u.To))
	case UpdateDeparted:
		r.lines = append(r.lines, u.Source+" departed")
	}
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return nil
}

// has reports whether line was recorded; countLines how many times.
func (r *recorder) has(line string) bool { return r.countLines(line) > 0 }

func (r *recorder) countLines(line string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if l == line {
			n++
		}
	}
	return n
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

func (r *recorder) count(src string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches[src])
}

// waitTimeout bounds a test's wait for a condition.
const waitTimeout = 20 * time.Second

func storedEvent(h uint64) Event {
	return Event{Type: BlockStored, BlockHashes: []Hash{IntHash(h)}, TokenIDs: []int64{1, 2}, BlockSize: 2, Medium: Some("GPU")}
}

// payloadOf encodes a one-event batch whose hash is its sequence number.
func payloadOf(seq uint64) []byte {
	return AppendBatch(nil, float64(seq), []Event{storedEvent(seq)}, Some[int64](0), true)
}

// TestSequenceStateMachine drives one source's ordering rules directly:
// gaps without a replay endpoint are lost, a lower seq is a restart, a
// bad batch costs only itself.
func TestSequenceStateMachine(t *testing.T) {
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
	ctx := context.Background()
	feed := func(seq uint64, p []byte) {
		if p == nil {
			p = payloadOf(seq)
		}
		if err := so.onLive(ctx, seq, p, 1); err != nil {
			t.Fatal(err)
		}
	}
	feed(5, nil)           // joins mid-stream: starts at 5
	feed(6, nil)           // in order
	feed(9, nil)           // gap 7..8, no replay endpoint: lost
	feed(10, []byte{0x07}) // undecodable batch: dropped, seq consumed
	feed(11, nil)          // in order after the bad one
	feed(2, nil)           // restart, joined at 2: [0,2) lost
	feed(3, nil)           //
	want := []string{
		"s batch 5 ts=5 n=1 BlockStored:5",
		"s batch 6 ts=6 n=1 BlockStored:6",
		"s lost 7 9",
		"s batch 9 ts=9 n=1 BlockStored:9",
		"s batch 11 ts=11 n=1 BlockStored:11",
		"s reset 2",
		"s lost 0 2",
		"s batch 2 ts=2 n=1 BlockStored:2",
		"s batch 3 ts=3 n=1 BlockStored:3",
	}
	got := rec.snapshot()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	st := so.stats()
	if st.Batches != 6 || st.Gaps != 2 || st.Lost != 4 || st.Resets != 1 || st.Dropped.Total() != 1 || len(st.LostRanges) != 2 {
		t.Fatalf("stats %+v", st)
	}
}
