package ratelog_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ratelog"
)

// A flood from one connection: one detail line (the caller's), then the
// rest in one summary line that names no peer.
func Example() {
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	l := ratelog.New(ratelog.Config{Logger: log, Attrs: []slog.Attr{slog.String("loop", "jobs")}})
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i := range 1000 {
		if l.Drop(decodeguard.ReasonDecode, "127.0.0.1:40000", t0.Add(time.Duration(i)*time.Millisecond)) == ratelog.First {
			log.Warn("dropped a message (first from this connection)", "peer", "127.0.0.1:40000", "hex", "c1")
		}
	}
	l.Flush(t0.Add(time.Second))
	// Output:
	// level=WARN msg="dropped a message (first from this connection)" peer=127.0.0.1:40000 hex=c1
	// level=WARN msg="zmqguard: dropped messages (summary)" loop=jobs reason=decode count=999 connections=1 since=1s
}
