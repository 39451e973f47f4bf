package kvevents

import (
	"log/slog"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Log kinds, each rate-limited on its own; drops get one kind per reason.
const (
	logReset = iota
	logGap
	logLost
	logReplay
	logOverflow
	logDrop
	numLogKinds = logDrop + decodeguard.NumReasons
)

// rateLog writes at most one line per kind per interval and says, in the
// next line of that kind, how many it held back.
type rateLog struct {
	logger   *slog.Logger
	interval time.Duration
	mu       sync.Mutex
	last     [numLogKinds]time.Time
	held     [numLogKinds]int
}

func newRateLog(l *slog.Logger, interval time.Duration) *rateLog {
	return &rateLog{logger: l, interval: interval}
}

// allow reports whether a line of kind may be written now, and how many
// were held back since the last one.
func (r *rateLog) allow(kind int) (bool, int) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.last[kind]) < r.interval {
		r.held[kind]++
		return false, 0
	}
	r.last[kind] = now
	n := r.held[kind]
	r.held[kind] = 0
	return true, n
}

func (r *rateLog) line(kind int, _ *slog.Logger, msg string, args ...any) {
	ok, held := r.allow(kind)
	if !ok {
		return
	}
	if held > 0 {
		args = append(args, "similar_lines_held_back", held)
	}
	r.logger.Warn(msg, args...)
}

// drop logs a refused batch, event or reply; peer bytes only as hex.
func (r *rateLog) drop(reason decodeguard.Reason, source string, seq uint64, err error, payload []byte) {
	ok, held := r.allow(logDrop + int(reason))
	if !ok {
		return
	}
	args := []any{"source", source, "reason", reason.String(), "err", err}
	if seq != 0 {
		args = append(args, "seq", seq)
	}
	if payload != nil {
		args = append(args, "payload", decodeguard.Hex(payload))
	}
	if held > 0 {
		args = append(args, "similar_lines_held_back", held)
	}
	r.logger.Warn("kvevents: dropped", args...)
}
