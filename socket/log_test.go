package socket

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// countingHandler counts the records it is given, by their "reason".
type countingHandler struct {
	mu       sync.Mutex
	byReason map[string]int
	total    int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total++
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			h.byReason[a.Value.String()]++
		}
		return true
	})
	return nil
}

// A scanner's flood of refused connections must cost a few log lines per
// reason and second (the first refusals from up to ratelog.FirstWarnings
// connections, then one summary), not one per connection, while Stats
// still counts every one.
func TestRefusedConnectionLogsAreRateLimited(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := &countingHandler{byReason: map[string]int{}}
	pull := mustSocket(t, NewPull, func(o *Options) { o.Logger = slog.New(h) })
	ep := mustBind(t, pull)
	addr := strings.TrimPrefix(ep, "tcp://")
	const floods = 200
	start := time.Now()
	for i := 0; i < floods; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Close()
	}
	poll.WaitForCtx(t, ctx, "every probe counted", func() bool {
		var n uint64
		for _, v := range pull.Stats().Refused {
			n += v
		}
		return n >= floods
	})
	seconds := int(time.Since(start)/time.Second) + 1
	h.mu.Lock()
	defer h.mu.Unlock()
	for reason, n := range h.byReason {
		if n > (ratelog.FirstWarnings+1)*seconds+1 {
			t.Errorf("reason %s: %d log lines for %d refused connections in ~%d s; want at most %d a second",
				reason, n, floods, seconds, ratelog.FirstWarnings+1)
		}
	}
	if h.total == 0 {
		t.Error("no log line at all for a flood of refused connections")
	}
}

// recordHandler keeps every record's message and attributes.
type recordHandler struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *recordHandler) WithGroup(string) slog.Handler                { return h }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *recordHandler) count() (lines int, counted uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.recs {
		var n uint64
		for _, c := range m["count"] {
			n = n*10 + uint64(c-'0')
		}
		counted += n
	}
	return len(h.recs), counted
}

// TestNilLoggerLogsToDefault: a socket with a nil Options.Logger logs its
// refusals through slog.Default(), and a burst of them is summarised by
// the timer while the socket stays open, with every refusal counted once
// in the lines and no peer named in a summary.
func TestNilLoggerLogsToDefault(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	h := &recordHandler{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)

	pull, err := NewPull(Options{}) // the zero Options is usable
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	ep := mustBind(t, pull)
	addr := strings.TrimPrefix(ep, "tcp://")
	const floods = 50
	for range floods {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		c.Close()
	}
	poll.WaitForCtx(t, ctx, "every refusal in a log line while the socket is open", func() bool {
		_, n := h.count()
		return n >= floods
	})
	lines, n := h.count()
	if n != floods || lines > ratelog.FirstWarnings+3 {
		t.Fatalf("%d lines counting %d refusals, want %d", lines, n, floods)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.recs {
		if strings.Contains(m["msg"], "summary") && (m["peer"] != "" || m["conns"] == "") {
			t.Errorf("summary %v", m)
		}
	}
}
