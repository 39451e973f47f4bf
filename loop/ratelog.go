package loop

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

const (
	// logPrefix is how many leading bytes of a dropped message's last frame
	// a log line shows (as hex) and [Drop.Prefix] holds.
	logPrefix = 32
	// defaultLogInterval is what a zero Config.LogInterval means.
	defaultLogInterval = time.Second
	// maxErrText caps an error's text in a log line.
	maxErrText = 256
)

// rateLog writes the drop log lines of one loop through the project's one
// rate limiter (internal/stack/ratelog, shared with package socket): a detail
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
		Logger:    log,
		Interval:  interval,
		Component: name,
	})}
}

// drop records d and writes its detail line if it is the first of its
// reason from its connection.
func (rl *rateLog) drop(d *Drop) {
	addr := d.Peer.String()
	if d.Reason == decodeguard.ReasonDecoderPanic && rl.stackLogged.CompareAndSwap(false, true) {
		rl.logPanic(d, addr)
	}
	if rl.lim.Drop(d.Reason.String(), addr, d.Time) != ratelog.First {
		return
	}
	ctx := context.Background()
	log := rl.lim.Logger()
	if !log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	log.LogAttrs(ctx, slog.LevelWarn, "zmqguard: dropped a message (first from this peer)",
		slog.String(ratelog.KeyComponent, rl.name),
		slog.String(ratelog.KeyReason, d.Reason.String()),
		slog.String("stage", d.Stage),
		slog.String(ratelog.KeyPeer, ratelog.Escape(addr, maxErrText)),
		slog.Uint64(ratelog.KeyCount, 1),
		slog.Int("frames", d.Frames),
		slog.Int("len", d.Length),
		slog.String(ratelog.KeyPrefixHex, d.hex()),
		slog.String(ratelog.KeyErr, errText(d.Err)),
	)
}

// flush writes the summaries of every reason with unreported drops.
func (rl *rateLog) flush(now time.Time) { rl.lim.Flush(now) }

// logPanic writes the one error line per loop that carries a decoder
// panic's stack.
func (rl *rateLog) logPanic(d *Drop, addr string) {
	var stack string
	var pe *msgpscan.PanicError
	if errors.As(d.Err, &pe) {
		stack = string(pe.Stack)
	}
	rl.lim.Logger().LogAttrs(context.Background(), slog.LevelError,
		"zmqguard: decoder panicked on a peer's message (dropped; stack logged once per loop)",
		slog.String(ratelog.KeyComponent, rl.name),
		slog.String(ratelog.KeyPeer, ratelog.Escape(addr, maxErrText)),
		slog.Int("frames", d.Frames),
		slog.Int("len", d.Length),
		slog.String(ratelog.KeyErr, errText(d.Err)),
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
	return ratelog.Escape(err.Error(), maxErrText)
}

// hex returns Prefix as lower-case hex, followed by "…" when the last frame
// was longer than the prefix: safe to log.
func (d *Drop) hex() string {
	// Prefix holds at most logPrefix bytes, the head of the last frame.
	var buf [2*logPrefix + len("…")]byte
	h := ratelog.AppendPrefixHex(buf[:0], d.Prefix, logPrefix)
	if d.lastLen > len(d.Prefix) {
		h = append(h, "…"...)
	}
	return string(h)
}
