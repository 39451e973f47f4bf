package loop

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ratelog"
)

const (
	// LogPrefix is how many leading bytes of a dropped message's last frame
	// a log line shows (as hex) and [Drop.Prefix] holds.
	LogPrefix = 32
	// FirstWarnings is how many "first drop from this connection" lines one
	// reason may write per log interval; later first drops in the same
	// interval are counted into the reason's summary.
	FirstWarnings = ratelog.FirstWarnings
	// MaxPeersRemembered bounds the set of (reason, connection) pairs a
	// loop remembers for its first-drop lines; when it is full the loop
	// forgets them all (FirstWarnings still bounds the lines).
	MaxPeersRemembered = ratelog.MaxConnsRemembered
	// DefaultLogInterval is the default Config.LogInterval.
	DefaultLogInterval = ratelog.DefaultInterval
	// maxErrText caps an error's text in a log line.
	maxErrText = 256
)

// rateLog writes the drop log lines of one loop through the project's one
// rate limiter (internal/ratelog, shared with package socket): a detail
// line for the first drop of a reason from each connection (peer address
// with its port), and per reason at most one summary line an interval,
// written by the next drop or by a timer, that counts drops and distinct
// connections and names no single peer.
type rateLog struct {
	lim         *ratelog.Limiter
	name        string
	stackLogged atomic.Bool
}

func newRateLog(log *slog.Logger, name string, interval time.Duration) *rateLog {
	return &rateLog{name: name, lim: ratelog.New(ratelog.Config{
		Logger:   log,
		Interval: interval,
		Attrs:    []slog.Attr{slog.String("loop", name)},
	})}
}

// drop records d and writes its detail line if it is the first of its
// reason from its connection.
func (rl *rateLog) drop(d *Drop) {
	addr := d.Peer.String()
	if d.Reason == decodeguard.ReasonDecoderPanic && rl.stackLogged.CompareAndSwap(false, true) {
		rl.logPanic(d, addr)
	}
	if rl.lim.Drop(d.Reason, addr, d.Time) != ratelog.First {
		return
	}
	ctx := context.Background()
	log := rl.lim.Logger()
	if !log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	var buf [2*LogPrefix + len("…")]byte
	h := hex.AppendEncode(buf[:0], d.Prefix)
	if d.lastLen > len(d.Prefix) {
		h = append(h, "…"...)
	}
	log.LogAttrs(ctx, slog.LevelWarn, "zmqguard: dropped a message (first from this peer)",
		slog.String("loop", rl.name),
		slog.String("reason", d.Reason.String()),
		slog.String("stage", d.Stage.String()),
		slog.String("peer", addr),
		slog.Uint64("count", 1),
		slog.Int("frames", d.Frames),
		slog.Int("len", d.Length),
		slog.String("hex", string(h)),
		slog.String("err", errText(d.Err)),
	)
}

// flush writes the summaries of every reason with unreported drops.
func (rl *rateLog) flush(now time.Time) { rl.lim.Flush(now) }

// logPanic writes the one error line per loop that carries a decoder
// panic's stack.
func (rl *rateLog) logPanic(d *Drop, addr string) {
	var stack string
	var pe *decodeguard.PanicError
	if errors.As(d.Err, &pe) {
		stack = string(pe.Stack)
	}
	rl.lim.Logger().LogAttrs(context.Background(), slog.LevelError,
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
