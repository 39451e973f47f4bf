package socket

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
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
// reason, not one per connection, while Stats still counts every one.
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
	waitFor(t, ctx, "every probe counted", func() bool {
		var n uint64
		for _, v := range pull.Stats().Violations {
			n += v
		}
		return n >= floods
	})
	seconds := int(time.Since(start)/time.Second) + 1
	h.mu.Lock()
	defer h.mu.Unlock()
	for reason, n := range h.byReason {
		if n > seconds+1 {
			t.Errorf("reason %s: %d log lines for %d refused connections in ~%d s; want at most one a second", reason, n, floods, seconds)
		}
	}
	if h.total == 0 {
		t.Error("no log line at all for a flood of refused connections")
	}
}
