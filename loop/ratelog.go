package loop

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
)

const (
	// LogPrefix is how many leading bytes of a dropped message's last frame
	// a log line shows (as hex) and [Drop.Prefix] holds.
	LogPrefix = 32
	// FirstWarnings is how many "first drop from this peer" warnings one
	// reason may write per log interval; later first drops in the same
	// interval are folded into the reason's summary.
	FirstWarnings = 8
	// MaxPeersRemembered bounds the set of (reason, peer host) pairs a loop
	// remembers for its first-drop warnings; once it is full, drops from new
	// hosts only appear in summaries.
	MaxPeersRemembered = 1024
	// DefaultLogInterval is the default Config.LogInterval.
	DefaultLogInterval = time.Second
	// maxErrText caps an error's text in a log line.
	maxErrText = 256
)

// peerKey identifies a (reason, peer host) pair for first-drop warnings.
// The host, not host:port, so that a peer reconnecting from new ports is
// still one peer.
type peerKey struct {
	reason decodeguard.Reason
	host   string
}

// reasonLog is the log state of one reason.
type reasonLog struct {
	last        time.Time // time of the latest line for this reason
	suppressed  uint64    // drops since that line that no line reported
	windowStart time.Time // start of the current first-warning window
	firsts      int       // first-drop warnings written in that window
}

// rateLog writes the drop log lines of one loop. It is used only by the
// goroutine running the loop.
type rateLog struct {
	log         *slog.Logger
	name        string
	interval    time.Duration
	seen        map[peerKey]struct{}
	per         [decodeguard.NumReasons]reasonLog
	pending     int // reasons with suppressed > 0
	stackLogged bool
	// quiet counts the messages delivered since the last drop: the loop
	// reads the clock for tick only once drops have paused for quietTicks
	// messages (a flood still going writes its own summaries from record).
	quiet int
	// seenPeer and seenReason remember the last (peer, reason) found in
	// seen, so that a flood from one peer skips the host lookup.
	seenPeer   *socket.Peer
	seenReason decodeguard.Reason
}

// quietTicks is how many messages in a row must pass without a drop before
// the happy path starts reading the clock to write pending summaries.
const quietTicks = 8

func newRateLog(log *slog.Logger, name string, interval time.Duration) *rateLog {
	return &rateLog{log: log, name: name, interval: interval, seen: make(map[peerKey]struct{})}
}

// peerHost returns the host part of a peer address, or the address itself.
func peerHost(addr string) string {
	if addr == "" {
		return "" // SplitHostPort would allocate its error
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// drop records d and writes at most one line for it (see record).
func (rl *rateLog) drop(d *Drop) { rl.record(d, d.Peer.Addr()) }

// record is drop with the peer's address given.
func (rl *rateLog) record(d *Drop, addr string) {
	r := d.Reason
	if !r.Valid() {
		r = decodeguard.ReasonNone
	}
	st := &rl.per[r]
	now := d.Time
	rl.quiet = 0
	if d.Reason == decodeguard.ReasonDecoderPanic && !rl.stackLogged {
		rl.stackLogged = true
		rl.logPanic(d, addr)
	}
	if st.suppressed == 0 {
		rl.pending++
	}
	st.suppressed++
	if (d.Peer == nil || d.Peer != rl.seenPeer || r != rl.seenReason) && rl.first(st, d, r, addr, now) {
		return
	}
	if st.last.IsZero() || now.Sub(st.last) >= rl.interval {
		rl.line(st, "zmqguard: dropped messages", d, addr, now)
	}
	if rl.pending > 1 {
		// Another reason has drops waiting for a summary, and while this
		// one floods the happy path does not tick (see quiet).
		rl.tick(now)
	}
}

// first handles a drop of reason r from a (peer, reason) pair not known to
// be in seen: it remembers the pair and, if it is new and the reason's
// budget of first-drop warnings allows, writes one and reports true.
func (rl *rateLog) first(st *reasonLog, d *Drop, r decodeguard.Reason, addr string, now time.Time) bool {
	key := peerKey{r, peerHost(addr)}
	_, ok := rl.seen[key]
	if !ok && len(rl.seen) < MaxPeersRemembered {
		rl.seen[key] = struct{}{}
		ok = true
		if now.Sub(st.windowStart) >= rl.interval {
			st.windowStart, st.firsts = now, 0
		}
		if st.firsts < FirstWarnings {
			st.firsts++
			rl.seenPeer, rl.seenReason = d.Peer, r
			rl.line(st, "zmqguard: dropped a message (first from this peer)", d, addr, now)
			return true
		}
	}
	if ok && d.Peer != nil {
		rl.seenPeer, rl.seenReason = d.Peer, r
	}
	return false
}

// line writes one warning for reason state st with d as the sample; it
// stands for every drop of the reason not yet reported, d included.
func (rl *rateLog) line(st *reasonLog, msg string, d *Drop, addr string, now time.Time) {
	count := st.suppressed
	rl.pending--
	since := now.Sub(st.last)
	if st.last.IsZero() {
		since = 0
	}
	st.last, st.suppressed = now, 0
	ctx := context.Background()
	if !rl.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	var buf [2*LogPrefix + len("…")]byte
	h := hex.AppendEncode(buf[:0], d.Prefix)
	if d.lastLen > len(d.Prefix) {
		h = append(h, "…"...)
	}
	rl.log.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("loop", rl.name),
		slog.String("reason", d.Reason.String()),
		slog.String("stage", d.Stage.String()),
		slog.String("peer", addr),
		slog.Uint64("count", count),
		slog.Duration("since", since),
		slog.Int("frames", d.Frames),
		slog.Int("len", d.Length),
		slog.String("hex", string(h)),
		slog.String("err", errText(d.Err)),
	)
}

// tick writes the summaries whose interval has passed, so that the count of
// a flood that has stopped is reported while the loop keeps running.
func (rl *rateLog) tick(now time.Time) {
	for r := range rl.per {
		st := &rl.per[r]
		if st.suppressed > 0 && now.Sub(st.last) >= rl.interval {
			rl.summary(decodeguard.Reason(r), st, now)
		}
	}
}

// flush writes the summaries of every reason with unreported drops.
func (rl *rateLog) flush(now time.Time) {
	for r := range rl.per {
		if st := &rl.per[r]; st.suppressed > 0 {
			rl.summary(decodeguard.Reason(r), st, now)
		}
	}
}

func (rl *rateLog) summary(r decodeguard.Reason, st *reasonLog, now time.Time) {
	count := st.suppressed
	since := now.Sub(st.last)
	if st.last.IsZero() {
		since = 0
	}
	st.last, st.suppressed = now, 0
	rl.pending--
	rl.log.LogAttrs(context.Background(), slog.LevelWarn, "zmqguard: dropped messages",
		slog.String("loop", rl.name),
		slog.String("reason", r.String()),
		slog.Uint64("count", count),
		slog.Duration("since", since),
	)
}

// logPanic writes the one error line per loop that carries a decoder
// panic's stack.
func (rl *rateLog) logPanic(d *Drop, addr string) {
	var stack string
	var pe *decodeguard.PanicError
	if errors.As(d.Err, &pe) {
		stack = string(pe.Stack)
	}
	rl.log.LogAttrs(context.Background(), slog.LevelError,
		"zmqguard: decoder panicked on a peer's message (dropped; stack logged once per loop)",
		slog.String("loop", rl.name),
		slog.String("peer", addr),
		slog.Int("frames", d.Frames),
		slog.Int("len", d.Length),
		slog.String("err", errText(d.Err)),
		slog.String("stack", stack),
	)
}

// errText returns err's text with every byte outside printable ASCII
// escaped and capped, so that a decoder or validator that quotes peer bytes
// in its error cannot put them raw into a log.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return decodeguard.EscapeText(err.Error(), maxErrText)
}
