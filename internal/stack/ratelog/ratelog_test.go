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
	l := New(Config{Logger: slog.New(h), Interval: time.Hour, Component: "t"})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dec, env := "decode", "envelope"
	// Two ports of one host are two connections; another reason is its own.
	for _, c := range []struct {
		r    string
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
	if s["reason"] != "decode" || s["count"] != strconv.Itoa(1+100-firsts) || s["conns"] != strconv.Itoa(1+100-firsts) ||
		s["component"] != "t" || s["since"] != "1s" || s["peer"] != "" || s["prefix_hex"] != "" {
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
	l.Drop("decode", "a:1", t0)
	for i := range 10 {
		l.Drop("decode", "a:1", t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := len(h.records()); n != 0 {
		t.Fatalf("%d lines before the interval", n)
	}
	l.Drop("decode", "a:1", t0.Add(time.Second))
	recs := h.records()
	if len(recs) != 1 || recs[0].attrs["count"] != "11" || recs[0].attrs["conns"] != "1" {
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
		l.Drop("oversize", fmt.Sprintf("h:%d", i%3), now)
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
	if !strings.Contains(last.msg, "summary") || last.attrs["count"] != "47" || last.attrs["conns"] != "3" {
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
	l.Drop("decode", "", time.Now())
	l.Drop("decode", "", time.Now())
	l.Flush(time.Now())
	if l.Pending() != 0 {
		t.Fatal("pending")
	}
	if New(Config{}).Logger() != slog.Default() {
		t.Fatal("nil Logger is not slog.Default()")
	}
}

// TestAllowHeldBack: one line of a kind per interval; the next line says
// how many were held back, and kinds do not share a budget.
func TestAllowHeldBack(t *testing.T) {
	l := New(Config{Logger: slog.New(&handler{}), Interval: time.Second})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if ok, held := l.Allow("gap", t0); !ok || held != 0 {
		t.Fatalf("first line: %v %d", ok, held)
	}
	for i := range 5 {
		if ok, _ := l.Allow("gap", t0.Add(time.Duration(i)*time.Millisecond)); ok {
			t.Fatalf("line %d inside the interval allowed", i)
		}
	}
	if ok, _ := l.Allow("reset", t0); !ok {
		t.Fatal("another kind refused")
	}
	if ok, held := l.Allow("gap", t0.Add(time.Second)); !ok || held != 5 {
		t.Fatalf("after the interval: %v held %d, want true 5", ok, held)
	}
}

// TestWarnVocabulary: Warn writes the component first and held_back when
// lines were held back, and nothing else of its own.
func TestWarnVocabulary(t *testing.T) {
	h := &handler{}
	l := New(Config{Logger: slog.New(h), Interval: time.Hour, Component: "kvevents"})
	for range 3 {
		l.Warn("gap", "kvevents: gap", slog.String(KeyPeer, "a:1"))
	}
	recs := h.records()
	if len(recs) != 1 || recs[0].attrs[KeyComponent] != "kvevents" || recs[0].attrs[KeyPeer] != "a:1" ||
		recs[0].attrs[KeyHeldBack] != "" {
		t.Fatalf("lines %+v", recs)
	}
	// A limiter whose interval has passed reports the two held back.
	l2 := New(Config{Logger: slog.New(h), Interval: time.Second, Component: "c"})
	past := time.Now().Add(-time.Hour)
	l2.Allow("k", past)
	l2.Allow("k", past)
	l2.Allow("k", past)
	l2.Warn("k", "m")
	recs = h.records()
	if last := recs[len(recs)-1]; last.attrs[KeyHeldBack] != "2" || last.attrs[KeyComponent] != "c" {
		t.Fatalf("last line %+v", last)
	}
}

// TestKindsBounded: a program bug that invents kinds cannot grow the
// limiter without bound.
func TestKindsBounded(t *testing.T) {
	l := New(Config{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	for i := range 1000 {
		l.Allow(strconv.Itoa(i), now)
		l.Drop(strconv.Itoa(i), "p", now)
	}
	l.mu.Lock()
	nk, np := len(l.kinds), len(l.per)
	l.mu.Unlock()
	if nk > maxKinds+1 || np > maxKinds+1 {
		t.Fatalf("%d kinds, %d reasons kept", nk, np)
	}
	l.Flush(now)
}
