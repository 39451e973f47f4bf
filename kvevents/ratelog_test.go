package kvevents

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// TestNegativeLogIntervalRefused: a negative LogInterval used to turn rate
// limiting off silently; it is now an error that names the field.
func TestNegativeLogIntervalRefused(t *testing.T) {
	_, err := NewSubscriber(Config{Handler: func(context.Context, Update) error { return nil },
		LogInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "Config.LogInterval -1s") {
		t.Fatalf("err = %v, want one naming Config.LogInterval -1s", err)
	}
}

type kvRecs struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (h *kvRecs) Enabled(context.Context, slog.Level) bool { return true }
func (h *kvRecs) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *kvRecs) WithGroup(string) slog.Handler            { return h }
func (h *kvRecs) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	h.recs = append(h.recs, m)
	h.mu.Unlock()
	return nil
}

// TestRateLogVocabulary: the subscriber's lines carry the shared
// vocabulary (component, reason, err, prefix_hex, held_back), peer bytes
// only as a capped hex prefix, and one line per kind per interval.
func TestRateLogVocabulary(t *testing.T) {
	h := &kvRecs{}
	rl := newRateLog(slog.New(h), time.Hour)
	payload := []byte("\x1b[31m" + strings.Repeat("x", 100))
	for range 3 {
		rl.drop(decodeguard.ReasonDecode, "tcp://a:1", 7, decodeguard.NewError(decodeguard.ReasonDecode, "bad \x1b"), payload)
	}
	rl.line(logGap, nil, "kvevents: gap", "source", "tcp://a:1", "from", 1, "to", 3)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.recs) != 2 {
		t.Fatalf("%d lines, want 2: %v", len(h.recs), h.recs)
	}
	d := h.recs[0]
	if d["component"] != "kvevents" || d["reason"] != "decode" || d["seq"] != "7" || d["len"] != "105" ||
		d["prefix_hex"] != "1b5b33316d"+strings.Repeat("78", 27)+"…" || strings.Contains(d["err"], "\x1b") {
		t.Fatalf("drop line %v", d)
	}
	if g := h.recs[1]; g["component"] != "kvevents" || g["source"] != "tcp://a:1" || g["held_back"] != "" {
		t.Fatalf("gap line %v", g)
	}
}
