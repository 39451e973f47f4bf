// Package ratelog is the one rate-limited logging path of zmqguard: every
// drop, refusal and warning line about a peer goes through a [Limiter], and
// every piece of peer text or peer bytes that reaches a line or an error
// string goes through [Escape] or [PrefixHex].
//
//	lim := ratelog.New(ratelog.Config{Logger: logger, Component: "jobs"})
//	if lim.Drop("decode", peer, time.Now()) == ratelog.First {
//		logger.Warn("zmqguard: dropped a message (first from this peer)",
//			ratelog.KeyComponent, "jobs", ratelog.KeyPeer, peer,
//			ratelog.KeyPrefixHex, ratelog.PrefixHex(frame, 32))
//	}
//	lim.Warn("gap", "kvevents: sequence gap", slog.Uint64("missing", n))
//
// # Two kinds of lines
//
// Drops and refusals of a peer ([Limiter.Drop]) follow these rules:
//
//   - The first drop of a reason from a connection (keyed by the full
//     address, host and port: every loopback or NAT peer is its own
//     connection) gets a detail line, written by the caller, that describes
//     that one drop: up to 4 such lines per reason and interval.
//   - Every other drop is counted into its reason's next summary line: how
//     many drops, from how many connections, since the previous line. A
//     summary names no single peer and shows no peer bytes.
//   - A summary is written once the reason's interval has passed: by the
//     next drop, or by a timer, so a burst that stops is reported within
//     about one interval instead of at the next drop or at exit.
//
// Other warnings ([Limiter.Allow], [Limiter.Warn]) are limited per kind, a
// fixed string the program chooses (never peer text): at most one line of a
// kind per interval, and the next line written says how many were held back
// ([KeyHeldBack]).
//
// # One attribute vocabulary
//
// Every line of the library uses these keys for these meanings:
//
//	component  the component that writes: a loop or source set's name, a
//	           socket's type, "kvevents", "coordinator", "zmtpguard"
//	peer       the peer's address (host:port), or a peer's key where a key
//	           is what identifies it (CURVE), always escaped
//	reason     a decodeguard.Reason name ("decode", "policy", ...), or
//	           for a line that is no refusal a fixed word for the
//	           condition ("silent": a peer dropped for silence)
//	count      how many drops a line stands for (1 for a detail line)
//	conns      how many distinct connections a summary counts
//	held_back  lines of this kind not written since the previous one
//	prefix_hex a capped hex prefix of peer bytes, only ever from PrefixHex
//	err        an error's text, escaped with Escape
//	service    the part of a program a line comes from, set by the program
//	           with Logger.With (the CLI's demo: "coordinator",
//	           "handshake", "kv-events"); never "component", which the
//	           library's own lines carry, so a line has each key once
//
// Lines may add keys of their own domain (stage, frames, len, since, seq,
// source, engine_index), never for one of the meanings above.
//
// A Limiter is safe for concurrent use.
package ratelog

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// The attribute keys of the vocabulary (see the package doc).
const (
	KeyComponent = "component"
	KeyPeer      = "peer"
	KeyReason    = "reason"
	KeyCount     = "count"
	KeyConns     = "conns"
	KeyHeldBack  = "held_back"
	KeyPrefixHex = "prefix_hex"
	KeyErr       = "err"
	KeyService   = "service"
)

const (
	// defaultInterval is what a zero Config.Interval means.
	defaultInterval = time.Second
	// FirstWarnings is how many first-from-this-connection detail lines one
	// reason may write per interval; later first drops are counted into the
	// summary.
	FirstWarnings = 4
	// MaxConnsRemembered bounds the (reason, connection) pairs a Limiter
	// remembers for first-drop lines; when it is full it forgets them all
	// (FirstWarnings still bounds the lines).
	MaxConnsRemembered = 4096
	// MaxConnsCounted bounds the distinct connections a summary counts
	// (its "conns" value is at most this).
	MaxConnsCounted = 256
	// maxKinds bounds the reasons and kinds a Limiter keeps state for;
	// beyond it they share the state of otherKind. Reasons and kinds are
	// the program's own strings, so this only guards against a bug.
	maxKinds  = 64
	otherKind = "other"
)

// Config configures a [Limiter].
type Config struct {
	// Logger receives the lines; nil means slog.Default().
	Logger *slog.Logger
	// Interval is the shortest time between two lines of one reason or
	// kind, first lines aside. Zero means 1 s; a negative value means 1 s
	// too (the components that own a Config field for it refuse negative
	// values before they get here).
	Interval time.Duration
	// Component leads every line the Limiter writes ([KeyComponent]);
	// empty means no component attribute.
	Component string
	// Attrs follow the component in every line the Limiter writes.
	Attrs []slog.Attr
	// Message is the summary lines' message; empty means "zmqguard:
	// dropped messages (summary)".
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
	reason string
	conn   string
}

// state is one reason's (Drop) or one kind's (Allow) limiter state.
type state struct {
	last        time.Time // the latest line of this reason (first or summary)
	windowStart time.Time // start of the first-line window
	firsts      int       // first lines in that window
	pending     uint64    // drops no line has reported
	conns       map[string]struct{}
}

// Limiter decides which drops and warnings get a log line and writes the
// summaries.
type Limiter struct {
	log      *slog.Logger
	interval time.Duration
	attrs    []slog.Attr // component first, then Config.Attrs
	msg      string

	mu    sync.Mutex
	seen  map[key]struct{}
	per   map[string]*state // by reason (Drop)
	kinds map[string]*state // by kind (Allow)
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
		cfg.Interval = defaultInterval
	}
	if cfg.Message == "" {
		cfg.Message = "zmqguard: dropped messages (summary)"
	}
	attrs := make([]slog.Attr, 0, len(cfg.Attrs)+1)
	if cfg.Component != "" {
		attrs = append(attrs, slog.String(KeyComponent, cfg.Component))
	}
	attrs = append(attrs, cfg.Attrs...)
	return &Limiter{log: cfg.Logger, interval: cfg.Interval, attrs: attrs, msg: cfg.Message,
		seen: make(map[key]struct{}), per: make(map[string]*state), kinds: make(map[string]*state)}
}

// Logger returns the logger lines go to.
func (l *Limiter) Logger() *slog.Logger { return l.log }

// Interval returns the limiter's interval.
func (l *Limiter) Interval() time.Duration { return l.interval }

// Enabled reports whether the logger writes warnings at all.
func (l *Limiter) Enabled() bool { return l.log.Enabled(context.Background(), slog.LevelWarn) }

// stateOf returns m's state for name, creating it; l.mu is held.
func stateOf(m map[string]*state, name string) *state {
	st := m[name]
	if st == nil {
		if len(m) >= maxKinds {
			name = otherKind
			if st = m[name]; st != nil {
				return st
			}
		}
		st = &state{}
		m[name] = st
	}
	return st
}

// Drop records one drop of reason (a decodeguard.Reason name) from
// connection conn ("" if unknown) at time now, and says whether the caller
// should write a detail line for it. It may write a summary line itself.
func (l *Limiter) Drop(reason string, conn string, now time.Time) Verdict {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now, l.nowReal = now, time.Now()
	st := stateOf(l.per, reason)
	k := key{reason, conn}
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
		l.summary(reason, st, now)
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

// Allow reports whether a line of kind (a fixed string naming a sort of
// line, never peer text) may be written at now: at most one per interval.
// When it may, heldBack is the number of lines of that kind refused since
// the previous one; the caller adds it as [KeyHeldBack] when it is not
// zero ([Limiter.Warn] does).
func (l *Limiter) Allow(kind string, now time.Time) (ok bool, heldBack uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := stateOf(l.kinds, kind)
	if !st.last.IsZero() && now.Sub(st.last) < l.interval {
		st.pending++
		return false, 0
	}
	st.last = now
	heldBack, st.pending = st.pending, 0
	return true, heldBack
}

// Warn writes a warning line of kind under [Limiter.Allow]'s rule: the
// limiter's component and attributes, then attrs, then [KeyHeldBack] when
// lines were held back. Peer text in attrs must have gone through
// [Escape] or [PrefixHex].
func (l *Limiter) Warn(kind, msg string, attrs ...slog.Attr) {
	l.log1(slog.LevelWarn, kind, msg, attrs)
}

// Error is [Limiter.Warn] at error level.
func (l *Limiter) Error(kind, msg string, attrs ...slog.Attr) {
	l.log1(slog.LevelError, kind, msg, attrs)
}

func (l *Limiter) log1(level slog.Level, kind, msg string, attrs []slog.Attr) {
	ok, held := l.Allow(kind, time.Now())
	ctx := context.Background()
	if !ok || !l.log.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, len(l.attrs)+len(attrs)+1)
	all = append(all, l.attrs...)
	all = append(all, attrs...)
	if held > 0 {
		all = append(all, slog.Uint64(KeyHeldBack, held))
	}
	l.log.LogAttrs(ctx, level, msg, all...)
}

// fire is the timer: it writes the summaries whose interval has passed
// and re-arms itself while drops wait.
func (l *Limiter) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	now := l.now.Add(time.Since(l.nowReal))
	waiting := false
	var next = l.interval
	for _, r := range slices.Sorted(maps.Keys(l.per)) {
		st := l.per[r]
		if st.pending == 0 {
			continue
		}
		if d := now.Sub(st.last); d >= l.interval {
			l.summary(r, st, now)
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
	for _, r := range slices.Sorted(maps.Keys(l.per)) {
		if st := l.per[r]; st.pending > 0 {
			l.summary(r, st, now)
		}
	}
}

// Pending returns the number of drops no line has reported yet.
func (l *Limiter) Pending() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint64
	for _, st := range l.per {
		n += st.pending
	}
	return n
}

// summary writes one summary line for reason; l.mu is held.
func (l *Limiter) summary(reason string, st *state, now time.Time) {
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
		slog.String(KeyReason, reason),
		slog.Uint64(KeyCount, count),
		slog.Int(KeyConns, conns),
		slog.Duration("since", since),
	)
	l.log.LogAttrs(ctx, slog.LevelWarn, l.msg, attrs...)
}
