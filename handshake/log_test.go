package handshake

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

type warnRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnRecorder) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *warnRecorder) WithGroup(string) slog.Handler                { return h }
func (h *warnRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.msgs = append(h.msgs, r.Message)
	h.mu.Unlock()
	return nil
}

func (h *warnRecorder) has(sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

// TestListenerNilLoggerReachesSocket: with a nil Logger the listener's
// socket logs its refusals through slog.Default(), as documented.
func TestListenerNilLoggerReachesSocket(t *testing.T) {
	h := &warnRecorder{}
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	defer slog.SetDefault(old)
	l, err := NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: testPayloads(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(l.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !h.has("socket refused a connection") {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged through slog.Default(): %q", h.msgs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
