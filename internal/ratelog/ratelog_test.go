package ratelog

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type rec struct {
	msg   string
	attrs map[string]string
}

type handler struct {
	mu   sync.Mutex
	recs []rec
}

func (h *handler) Enabled(context.Context, slog.Level) bool { return true }
func (h *handler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *handler) WithGroup(string) slog.Handler            { return h }
func (h *handler) Handle(_ context.Context, r slog.Record) error {
	m := rec{msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool { m.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *handler) records() []rec {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rec(nil), h.recs...)
}

// TestPerConnectionFirsts: first lines are keyed by connection (host and
// port), per reason, and bounded per interval; the rest is counted into a
// summary that names no peer and counts the connections.
func TestPerConnectionFirsts(t *testing.T) {
	h := &handler{}
	l := New(Config{Logger: slog.New(h), Interval: time.Hour, Attrs: []slog.Attr{slog.String("loop", "t")}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dec, env := decodeguard.ReasonDecode, decodeguard.ReasonEnvelope
	// Two ports of one host are two connections; another reason is its own.
	for _, c := range []struct {
		r    decodeguard.Reason
		conn string
		want Verdict
	}{
		{dec, "127.0.0.1:1000", First},
		{dec, "127.0.0.1:1000", Counted},
		{dec, "127.0.0.1:1001", First},
		{env, "127.0.0.1:1000", First},
	} {
		if v := l.Drop(c.r, c.conn, t0); v != c.want {
			t.Fatalf("Drop(%v, %s) = %v, want %v", c.r, c.conn, v, c.want)
		}
	}
	// Many new connections: FirstWarnings-2 more firsts, then counted.
	firsts := 0
	for i := range 100 {
		if l.Drop(dec, "10.0.0.1:"+strconv.Itoa(2000+i), t0) == First {
			firsts++
		}
	}
	if firsts != FirstWarnings-2 {
		t.Fatalf("%d more first lines, want %d", firsts, FirstWarnings-2)
	}
	if got := l.Pending(); got != 1+100-uint64(firsts) {
		t.Fatalf("pending %d", got)
	}
	l.Flush(t0.Add(time.Second))
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("lines %+v", recs)
	}
	s := recs[0].attrs
	if s["reason"] != "decode" || s["count"] != strconv.Itoa(1+100-firsts) || s["connections"] != strconv.Itoa(1+100-firsts) ||
		s["loop"] != "t" || s["since"] != "1s" || s["peer"] != "" || s["hex"] != "" {
		t.Fatalf("summary %v", s)
	}
	if l.Pending() != 0 {
		t.Fatal("pending after Flush")
	}
}

// TestSummaryOnNextDrop: once the interval has passed, the next drop
// writes the summary itself.
func TestSummaryOnNextDrop(t *testing.T) {
	h := &handler{}
	l := New(Config{Logger: slog.New(h), Interval: time.Second})
	defer l.Flush(time.Time{})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.Drop(decodeguard.ReasonDecode, "a:1", t0)
	for i := range 10 {
		l.Drop(decodeguard.ReasonDecode, "a:1", t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(h.records()); n != 0 {
		t.Fatalf("%d lines before the interval", n)
	}
	l.Drop(decodeguard.ReasonDecode, "a:1", t0.Add(time.Second))
	recs := h.records()
	if len(recs) != 1 || recs[0].attrs["count"] != "11" || recs[0].attrs["connections"] != "1" {
		t.Fatalf("lines %+v", recs)
	}
}

// TestTimerSummary: a burst that stops is summarised by the timer, with no
// further drop and no Flush.
func TestTimerSummary(t *testing.T) {
	h := &handler{}
	l := New(Config{Logger: slog.New(h), Interval: 20 * time.Millisecond})
	now := time.Now()
	for i := range 50 {
		l.Drop(decodeguard.ReasonOversize, fmt.Sprintf("h:%d", i%3), now)
	}
	deadline := time.Now().Add(20 * time.Second)
	for l.Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no timer summary: %+v", h.records())
		}
		time.Sleep(5 * time.Millisecond)
	}
	recs := h.records()
	last := recs[len(recs)-1]
	if !strings.Contains(last.msg, "summary") || last.attrs["count"] != "47" || last.attrs["connections"] != "3" {
		t.Fatalf("lines %+v", recs)
	}
}

// TestDisabledLogger: a logger that hides warnings gets nothing, and the
// limiter still settles its counts.
func TestDisabledLogger(t *testing.T) {
	l := New(Config{Logger: slog.New(slog.DiscardHandler)})
	if l.Enabled() {
		t.Fatal("discard handler enabled")
	}
	l.Drop(decodeguard.ReasonDecode, "", time.Now())
	l.Drop(decodeguard.ReasonDecode, "", time.Now())
	l.Flush(time.Now())
	if l.Pending() != 0 {
		t.Fatal("pending")
	}
	if New(Config{}).Logger() != slog.Default() {
		t.Fatal("nil Logger is not slog.Default()")
	}
}
