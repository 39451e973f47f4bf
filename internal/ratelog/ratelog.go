// Package ratelog is the one rate limiter behind every drop log line of
// zmqguard: package loop (dropped messages) and package socket (refused
// connections and messages) both write through it, so both follow the same
// rules.
//
//   - The first drop of a reason from a connection (keyed by the full
//     address, host and port: every loopback or NAT peer is its own
//     connection) gets a detail line that describes that one drop, up to
//     [FirstWarnings] such lines per reason and interval.
//   - Every other drop is counted into its reason's next summary line:
//     how many drops, from how many connections, since the previous line.
//     A summary names no single peer and shows no peer bytes.
//   - A summary is written once the reason's interval has passed: by the
//     next drop, or by a timer, so a burst that stops is reported within
//     about one interval instead of at the next drop or at exit.
//
// Detail lines say "first from this peer": to ZeroMQ a peer is one
// connection. Clients that open a fresh connection per request (vLLM's
// NIXL handshake does) therefore get up to FirstWarnings detail lines per
// reason and interval, and summaries for the rest.
//
// A Limiter is safe for concurrent use.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

const (
	// DefaultInterval is the default Config.Interval.
	DefaultInterval = time.Second
	// FirstWarnings is how many first-from-this-connection detail lines one
	// reason may write per interval; later first drops are counted into the
	// summary.
	FirstWarnings = 4
	// MaxConnsRemembered bounds the (reason, connection) pairs a Limiter
	// remembers for first-drop lines; when it is full it forgets them all
	// (FirstWarnings still bounds the lines).
	MaxConnsRemembered = 4096
	// MaxConnsCounted bounds the distinct connections a summary counts
	// (its "connections" value is at most this).
	MaxConnsCounted = 256
)

// Config configures a [Limiter].
type Config struct {
	// Logger receives the lines; nil means slog.Default().
	Logger *slog.Logger
	// Interval is the shortest time between two lines of one reason, first
	// lines aside (default DefaultInterval).
	Interval time.Duration
	// Attrs lead every summary line and identify the component, for
	// example slog.String("loop", name).
	Attrs []slog.Attr
	// Message is the summary lines' message (default "zmqguard: dropped
	// messages (summary)").
	Message string
}

// Verdict is what [Limiter.Drop] decided for one drop.
type Verdict uint8

const (
	// Counted: the drop goes into a later summary line; write nothing.
	Counted Verdict = iota
	// First: the caller writes one detail line for this drop (count 1).
	First
)

type key struct {
	reason decodeguard.Reason
	conn   string
}

type state struct {
	last        time.Time // the latest line of this reason (first or summary)
	windowStart time.Time // start of the first-line window
	firsts      int       // first lines in that window
	pending     uint64    // drops no line has reported
	conns       map[string]struct{}
}

// Limiter decides which drops get a log line and writes the summaries.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration
	attrs    []slog.Attr
	msg      string

	mu    sync.Mutex
	seen  map[key]struct{}
	per   [decodeguard.NumReasons]state
	timer *time.Timer
	// now is the clock of the latest Drop: the timer measures intervals on
	// the callers' clock (which tests may fake), advanced by the real time
	// since that Drop.
	now     time.Time
	nowReal time.Time
}

// New returns a Limiter.
func New(cfg Config) *Limiter {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Message == "" {
		cfg.Message = "zmqguard: dropped messages (summary)"
	}
	return &Limiter{log: cfg.Logger, interval: cfg.Interval, attrs: cfg.Attrs, msg: cfg.Message,
		seen: make(map[key]struct{})}
}

// Logger returns the logger lines go to.
func (l *Limiter) Logger() *slog.Logger { return l.log }

// Enabled reports whether the logger writes warnings at all.
func (l *Limiter) Enabled() bool { return l.log.Enabled(context.Background(), slog.LevelWarn) }

// Drop records one drop of reason r from connection conn ("" if unknown)
// at time now, and says whether the caller should write a detail line for
// it. It may write a summary line itself.
func (l *Limiter) Drop(r decodeguard.Reason, conn string, now time.Time) Verdict {
	if !r.Valid() {
		r = decodeguard.ReasonNone
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now, l.nowReal = now, time.Now()
	st := &l.per[r]
	k := key{r, conn}
	if _, ok := l.seen[k]; !ok {
		if len(l.seen) >= MaxConnsRemembered {
			clear(l.seen)
		}
		l.seen[k] = struct{}{}
		if st.windowStart.IsZero() || now.Sub(st.windowStart) >= l.interval {
			st.windowStart, st.firsts = now, 0
		}
		if st.firsts < FirstWarnings {
			st.firsts++
			if st.pending == 0 {
				st.last = now
			}
			return First
		}
	}
	st.pending++
	if st.conns == nil {
		st.conns = make(map[string]struct{})
	}
	if len(st.conns) < MaxConnsCounted {
		st.conns[conn] = struct{}{}
	}
	if !st.last.IsZero() && now.Sub(st.last) >= l.interval {
		l.summary(r, st, now)
		return Counted
	}
	if st.last.IsZero() {
		st.last = now
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.interval, l.fire)
	}
	return Counted
}

// fire is the timer: it writes the summaries whose interval has passed
// and re-arms itself while drops wait.
func (l *Limiter) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	now := l.now.Add(time.Since(l.nowReal))
	waiting := false
	var next time.Duration = l.interval
	for r := range l.per {
		st := &l.per[r]
		if st.pending == 0 {
			continue
		}
		if d := now.Sub(st.last); d >= l.interval {
			l.summary(decodeguard.Reason(r), st, now)
		} else {
			waiting = true
			next = min(next, l.interval-d)
		}
	}
	if waiting {
		l.timer = time.AfterFunc(max(next, time.Millisecond), l.fire)
	}
}

// Flush writes the summary of every reason with unreported drops, at time
// now, and stops the timer. The Limiter stays usable.
func (l *Limiter) Flush(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	for r := range l.per {
		if st := &l.per[r]; st.pending > 0 {
			l.summary(decodeguard.Reason(r), st, now)
		}
	}
}

// Pending returns the number of drops no line has reported yet.
func (l *Limiter) Pending() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for r := range l.per {
		n += l.per[r].pending
	}
	return n
}

// summary writes one summary line for reason r; l.mu is held.
func (l *Limiter) summary(r decodeguard.Reason, st *state, now time.Time) {
	count, conns := st.pending, len(st.conns)
	since := now.Sub(st.last)
	st.last, st.pending = now, 0
	clear(st.conns)
	ctx := context.Background()
	if !l.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	attrs := make([]slog.Attr, 0, len(l.attrs)+4)
	attrs = append(attrs, l.attrs...)
	attrs = append(attrs,
		slog.String("reason", r.String()),
		slog.Uint64("count", count),
		slog.Int("connections", conns),
		slog.Duration("since", since),
	)
	l.log.LogAttrs(ctx, slog.LevelWarn, l.msg, attrs...)
}
