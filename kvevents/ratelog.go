package kvevents

import (
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// Log kinds, each rate-limited on its own; drops get one kind per reason.
const (
	logReset    = "reset"
	logGap      = "gap"
	logLost     = "lost"
	logReplay   = "replay"
	logOverflow = "overflow"
	logProof    = "continuity"
	logHeld     = "held"
	logDeparted = "departed"
	logFanIn    = "fanin/"
	logDrop     = "drop/"
)

// maxLogPayload is how many leading bytes of a refused payload a drop line
// shows, as hex.
const maxLogPayload = 32

// rateLog writes the subscriber's lines through the project's one limiter
// (internal/stack/ratelog): at most one line per kind per interval, the next line
// of that kind saying how many it held back (held_back).
type rateLog struct {
	lim *ratelog.Limiter
}

func newRateLog(l *slog.Logger, interval time.Duration) *rateLog {
	return &rateLog{lim: ratelog.New(ratelog.Config{Logger: l, Interval: interval, Component: "kvevents"})}
}

// line writes a line of kind; args are key-value pairs of the caller's own
// domain (source, from, to), never raw peer text.
func (r *rateLog) line(kind string, _ *slog.Logger, msg string, args ...any) {
	r.lim.Warn(kind, msg, attrs(args)...)
}

// drop logs a refused batch, event or reply; peer bytes only as hex.
func (r *rateLog) drop(reason decodeguard.Reason, source string, seq uint64, err error, payload []byte) {
	a := []slog.Attr{slog.String("source", source), slog.String(ratelog.KeyReason, reason.String())}
	if err != nil {
		a = append(a, slog.String(ratelog.KeyErr, ratelog.Escape(err.Error(), 256)))
	}
	if seq != 0 {
		a = append(a, slog.Uint64("seq", seq))
	}
	if payload != nil {
		a = append(a, slog.Int("len", len(payload)),
			slog.String(ratelog.KeyPrefixHex, ratelog.PrefixHex(payload, maxLogPayload)))
	}
	r.lim.Warn(logDrop+reason.String(), "kvevents: dropped", a...)
}

// attrs turns key-value pairs into attributes.
func attrs(args []any) []slog.Attr {
	out := make([]slog.Attr, 0, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		out = append(out, slog.Any(k, args[i+1]))
	}
	return out
}
