package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/vllmwire"
)

func sumCounts(recs []logRecord) (n uint64) {
	for _, r := range recs {
		n += r.count
	}
	return n
}

// TestLogFlood: 100,000 junk frames spread over 10 s of (fake) time from
// one peer write 11 lines: the first-drop warning, one summary per second,
// and the last second's summary when Run returns (one valid message after
// the flood is not enough for the loop to look at the clock: see
// TestLogQuietTick). The counts in the lines add up to exactly 100,000, as
// do the counters.
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
	if err := l.Run(testCtx(t)); !errors.Is(err, ErrReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Dropped[decodeguard.ReasonDecode] != junk || st.TotalDropped() != junk || st.Received != junk+1 ||
		st.Delivered != 1 || delivered != 1 || observed != junk {
		t.Fatalf("stats %+v, delivered %d, observed %d", st, delivered, observed)
	}
	recs := h.records()
	t.Logf("%d junk frames -> %d log lines", junk, len(recs))
	if len(recs) != 11 {
		for _, r := range recs {
			t.Log(r.msg, r.attrs)
		}
		t.Fatalf("%d log lines, want 11", len(recs))
	}
	if n := sumCounts(recs); n != junk {
		t.Fatalf("log counts add up to %d, want %d", n, junk)
	}
	first := recs[0]
	if !strings.Contains(first.msg, "first") || first.attrs["reason"] != "decode" || first.attrs["loop"] != "stats" ||
		first.attrs["hex"] != "c11b5d303b70776e6564071b5b324a" || first.attrs["len"] != "15" || first.attrs["frames"] != "1" {
		t.Fatalf("first line %s %v", first.msg, first.attrs)
	}
	for _, r := range recs[1:10] {
		if r.count != 10000 {
			t.Fatalf("summary %v", r.attrs)
		}
	}
	checkSafe(t, recs)
}

// TestLogFloodMixed: the seeds in rotation, 100,000 frames with the clock
// standing still: one first-drop line per reason, then one summary per
// reason when the loop ends.
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
	if err := l.Run(testCtx(t)); !errors.Is(err, ErrReceiverClosed) {
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
	if len(recs) != 2*len(want) || sumCounts(recs) != n {
		t.Fatalf("%d lines (want %d), counts %d", len(recs), 2*len(want), sumCounts(recs))
	}
	checkSafe(t, recs)
}

// TestRateLogPeers drives the rate limiter directly with peer addresses.
func TestRateLogPeers(t *testing.T) {
	h := &countHandler{}
	rl := newRateLog(slog.New(h), "t", time.Second)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	drop := func(r decodeguard.Reason, addr string, at time.Duration) {
		rl.record(&Drop{Reason: r, Time: t0.Add(at), Frames: 1, Length: 1}, addr)
	}

	// One host from many ports is one peer.
	drop(decodeguard.ReasonDecode, "10.1.1.1:1000", 0)
	drop(decodeguard.ReasonDecode, "10.1.1.1:1001", 0)
	// Another host gets its own first warning, and so does another reason.
	drop(decodeguard.ReasonDecode, "10.1.1.2:1000", 0)
	drop(decodeguard.ReasonEnvelope, "10.1.1.1:1000", 0)
	if got := len(h.records()); got != 3 {
		t.Fatalf("%d lines, want 3", got)
	}
	// 2000 new hosts: FirstWarnings-2 more first warnings this second, then
	// only the suppressed count.
	for i := range 2000 {
		drop(decodeguard.ReasonDecode, fmt.Sprintf("10.2.%d.%d:5", i/256, i%256), 0)
	}
	if got, want := len(h.records()), 3+FirstWarnings-2; got != want {
		t.Fatalf("%d lines, want %d", got, want)
	}
	if len(rl.seen) != MaxPeersRemembered {
		t.Fatalf("remembered %d peers", len(rl.seen))
	}
	// A second later the next drop writes the summary.
	drop(decodeguard.ReasonDecode, "10.1.1.1:1000", time.Second)
	recs := h.records()
	last := recs[len(recs)-1]
	if last.count != 2000-(FirstWarnings-2)+1 || last.attrs["since"] != "1s" {
		t.Fatalf("summary %+v", last)
	}
	if rl.pending != 0 {
		t.Fatalf("pending %d", rl.pending)
	}
	// tick only writes once the interval has passed.
	drop(decodeguard.ReasonDecode, "10.1.1.1:1000", time.Second+time.Millisecond)
	n := len(h.records())
	rl.tick(t0.Add(time.Second + 2*time.Millisecond))
	if len(h.records()) != n || rl.pending != 1 {
		t.Fatal("tick wrote early")
	}
	rl.tick(t0.Add(2 * time.Second))
	if recs := h.records(); len(recs) != n+1 || recs[n].count != 1 || rl.pending != 0 {
		t.Fatal("tick did not write")
	}
	if sumCounts(h.records()) != 4+2000+1+1 {
		t.Fatalf("counts %d", sumCounts(h.records()))
	}
	if peerHost("[::1]:80") != "::1" || peerHost("ipc") != "ipc" {
		t.Fatal("peerHost")
	}
}

// TestLoggerDisabled: a logger whose level hides warnings gets no records
// and the counters still count.
func TestLoggerDisabled(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{{0xc1}}, {{0xc1}}, {statsFrame}}}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Logger = slog.New(slog.NewTextHandler(failWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
		})
	if err := l.Run(testCtx(t)); !errors.Is(err, ErrReceiverClosed) {
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

// TestLogQuietTick: after a flood stops, the summary of its last drops is
// written while the loop keeps running, once quietTicks valid messages in a
// row have passed and the interval is over; while junk and valid messages
// alternate, valid messages do not read the clock at all.
func TestLogQuietTick(t *testing.T) {
	junk := []byte{0xc1}
	var msgs [][][]byte
	for range 100 { // alternating: the valid ones must not read the clock
		msgs = append(msgs, [][]byte{junk}, [][]byte{statsFrame})
	}
	for range 2 * quietTicks {
		msgs = append(msgs, [][]byte{statsFrame})
	}
	h := &countHandler{}
	clock := newFakeClock(100 * time.Millisecond)
	var readings int
	delivered := 0
	var linesAtQuiet, linesBefore int
	l := newStatsLoop(t, &sliceRecv{msgs: msgs}, func(context.Context, Delivery[vllmwire.Message]) error {
		delivered++
		switch delivered {
		case 100:
			linesBefore = len(h.records())
		case 100 + 2*quietTicks:
			linesAtQuiet = len(h.records())
		}
		return nil
	}, func(c *Config[vllmwire.Message]) {
		c.Logger = slog.New(h)
		c.Now = func() time.Time { readings++; return clock.Now() }
	})
	if err := l.Run(testCtx(t)); !errors.Is(err, ErrReceiverClosed) {
		t.Fatal(err)
	}
	// 100 drops read the clock once each; the quiet run reads it from its
	// quietTicks-th message until the summary is out.
	if readings > 100+quietTicks+2 {
		t.Errorf("%d clock readings for 100 drops and %d valid messages", readings, delivered)
	}
	recs := h.records()
	if linesAtQuiet <= linesBefore || linesAtQuiet != len(recs) {
		t.Errorf("lines: %d after the flood, %d after the quiet run, %d at the end", linesBefore, linesAtQuiet, len(recs))
	}
	if n := sumCounts(recs); n != 100 {
		t.Errorf("log counts add up to %d, want 100", n)
	}
}
