package loop

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

func sumCounts(recs []logRecord) (n uint64) {
	for _, r := range recs {
		n += r.count
	}
	return n
}

// checkHonest fails t if a summary line carries one peer's address or
// bytes: summaries count drops from many connections.
func checkHonest(t *testing.T, recs []logRecord) {
	t.Helper()
	for _, r := range recs {
		if strings.Contains(r.msg, "summary") {
			for _, k := range []string{"peer", "prefix_hex", "len", "frames", "err"} {
				if _, ok := r.attrs[k]; ok {
					t.Fatalf("summary line carries %s: %v", k, r.attrs)
				}
			}
		}
	}
}

// TestLogFlood: 100,000 junk frames spread over 10 s of (fake) time from
// one peer write the first-drop line and about one summary a second (a
// loaded machine's timer may add a few); the counts in the lines add up to
// exactly 100,000, as do the counters, and no summary shows peer bytes.
func TestLogFlood(t *testing.T) {
	const junk = 100_000
	frame := []byte("\xc1\x1b]0;pwned\x07\x1b[2J") // terminal escapes after a bad type byte
	msgs := make([][][]byte, 0, junk+1)
	for range junk {
		msgs = append(msgs, [][]byte{frame})
	}
	msgs = append(msgs, [][]byte{statsFrame})
	h := &countHandler{}
	clock := newFakeClock(100 * time.Microsecond) // one reading per drop: 10 s in all
	var observed int
	delivered := 0
	l := newStatsLoop(t, &sliceRecv{msgs: msgs}, func(context.Context, Delivery[vllmwire.Message]) error {
		delivered++
		return nil
	}, func(c *Config[vllmwire.Message]) {
		c.Logger = slog.New(h)
		c.Now = clock.Now
		c.OnDrop = func(Drop) { observed++ }
	})
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Dropped[decodeguard.ReasonDecode] != junk || st.Dropped.Total() != junk || st.Received != junk+1 ||
		st.Delivered != 1 || delivered != 1 || observed != junk {
		t.Fatalf("stats %+v, delivered %d, observed %d", st, delivered, observed)
	}
	recs := h.records()
	t.Logf("%d junk frames -> %d log lines", junk, len(recs))
	if len(recs) < 10 || len(recs) > 40 {
		for _, r := range recs {
			t.Log(r.msg, r.attrs)
		}
		t.Fatalf("%d log lines, want about 11", len(recs))
	}
	if n := sumCounts(recs); n != junk {
		t.Fatalf("log counts add up to %d, want %d", n, junk)
	}
	first := recs[0]
	if !strings.Contains(first.msg, "first") || first.attrs["reason"] != "decode" || first.attrs["component"] != "stats" ||
		first.attrs["prefix_hex"] != "c11b5d303b70776e6564071b5b324a" || first.attrs["len"] != "15" || first.attrs["frames"] != "1" ||
		first.count != 1 {
		t.Fatalf("first line %s %v", first.msg, first.attrs)
	}
	for _, r := range recs[1:] {
		if !strings.Contains(r.msg, "summary") || r.attrs["conns"] != "1" || r.attrs["component"] != "stats" {
			t.Fatalf("line %s %v", r.msg, r.attrs)
		}
	}
	checkHonest(t, recs)
	checkSafe(t, recs)
}

// TestLogFloodMixed: the seeds in rotation, 100,000 frames with the clock
// standing still: one first-drop line per reason, then summaries; the
// counts add up.
func TestLogFloodMixed(t *testing.T) {
	const n = 100_000
	msgs := make([][][]byte, 0, n)
	want := map[decodeguard.Reason]uint64{}
	for i := range n {
		sd := typedSeeds[i%len(typedSeeds)]
		msgs = append(msgs, [][]byte{sd.frame})
		want[sd.reason]++
	}
	h := &countHandler{}
	l := newStatsLoop(t, &sliceRecv{msgs: msgs}, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Logger = slog.New(h)
			c.Now = newFakeClock(0).Now
		})
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	for r, c := range want {
		if st.Dropped[r] != c {
			t.Fatalf("%v: %d drops, want %d", r, st.Dropped[r], c)
		}
	}
	recs := h.records()
	t.Logf("%d mixed junk frames -> %d log lines", n, len(recs))
	firsts := 0
	for _, r := range recs {
		if strings.Contains(r.msg, "first") {
			firsts++
		}
	}
	if firsts != len(want) || len(recs) < 2*len(want) || len(recs) > 10*len(want) || sumCounts(recs) != n {
		t.Fatalf("%d lines (%d first, want %d), counts %d", len(recs), firsts, len(want), sumCounts(recs))
	}
	checkHonest(t, recs)
	checkSafe(t, recs)
}

// TestLogBurstReportedByTimer: a burst that stops is summarised while the
// loop waits for more input, by the limiter's timer, not at the next drop
// or when Run returns.
func TestLogBurstReportedByTimer(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	h := &countHandler{}
	r := newChanRecv(200)
	for range 100 {
		r.send([]byte{0xc1})
	}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Logger = slog.New(h)
			c.LogInterval = 50 * time.Millisecond
		})
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for sumCounts(h.records()) < 100 {
		select {
		case err := <-done:
			t.Fatalf("Run ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("burst not summarised while the loop waits: %d lines, counts %d", len(h.records()), sumCounts(h.records()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	recs := h.records()
	if len(recs) < 2 || !strings.Contains(recs[len(recs)-1].msg, "summary") {
		t.Fatalf("lines %+v", recs)
	}
	checkHonest(t, recs)
}

// TestLoggerDisabled: a logger whose level hides warnings gets no records
// and the counters still count.
func TestLoggerDisabled(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{{0xc1}}, {{0xc1}}, {statsFrame}}}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Logger = slog.New(slog.NewTextHandler(failWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
		})
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	if l.Stats().Dropped[decodeguard.ReasonDecode] != 2 {
		t.Fatal(l.Stats())
	}
}

type failWriter struct{ t *testing.T }

func (w failWriter) Write(p []byte) (int, error) {
	w.t.Errorf("unexpected log output %q", p)
	return len(p), nil
}

// BenchmarkDropFlood: the cost of one dropped frame (a bare 0xc1 from one
// peer), counted, rate-limited and summarised, with logging enabled but
// discarded by the handler.
func BenchmarkDropFlood(b *testing.B) {
	r := &repeatRecv{}
	r.msg.Frames = [][]byte{{0xc1}}
	n := 0
	l := newStatsLoop(b, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			c.OnDrop = func(Drop) {
				if n++; n >= b.N {
					panic(errBenchDone)
				}
			}
		})
	b.ReportAllocs()
	b.ResetTimer()
	func() {
		defer func() {
			if r := recover(); r != nil && r != errBenchDone {
				panic(r)
			}
		}()
		_ = l.Run(context.Background())
	}()
	b.StopTimer()
	l.log.flush(time.Now())
}
