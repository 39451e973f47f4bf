package socket

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
)

// maxLogErr caps an error's text in a log line.
const maxLogErr = 256

// logger returns the socket's logger: Options.Logger, or slog.Default().
func (s *Socket) logger() *slog.Logger { return s.limiter().Logger() }

// limiter returns the socket's drop-line limiter, created on first use.
// It is internal/stack/ratelog's, the one package loop uses too: one detail
// line for the first refusal of a reason from each connection (a remote
// address with its port), then per reason at most one summary a second
// that counts refusals and connections and names no single peer; a timer
// writes the summary of a burst that has stopped.
func (s *Socket) limiter() *ratelog.Limiter {
	s.logOnce.Do(func() {
		s.lim = ratelog.New(ratelog.Config{
			Logger:    s.opts.Logger,
			Component: string(s.typ),
			Message:   "zmqguard: socket refusals (summary)",
		})
	})
	return s.lim
}

// flushLog writes the pending summaries (at Close).
func (s *Socket) flushLog() { s.limiter().Flush(time.Now()) }

// emit delivers an event to OnEvent and the logger. Events that carry a
// drop reason (a refused handshake, a policy refusal, a connection closed
// for a violation) are warnings under the rate limiter; ordinary events
// (connected, a clean disconnect, a failed dial) are debug lines.
func (s *Socket) emit(e Event) {
	if e.Reason == decodeguard.ReasonNone && e.Err != nil {
		e.Reason = decodeguard.ReasonOf(e.Err)
	}
	if f := s.opts.OnEvent; f != nil {
		f(e)
	}
	ctx := context.Background()
	log := s.logger()
	if e.Reason == decodeguard.ReasonNone && errors.Is(e.Err, ErrHeartbeatTimeout) {
		// A peer gone silent (a vanished host, a frozen process) is worth
		// a warning, like a misbehaving one, under the same limiter: a
		// detail line for the first from each connection, then summaries.
		if s.limiter().Drop("silent", e.Remote, time.Now()) == ratelog.First && log.Enabled(ctx, slog.LevelWarn) {
			log.LogAttrs(ctx, slog.LevelWarn, "zmqguard: socket dropped a silent peer",
				slog.String(ratelog.KeyComponent, string(s.typ)), slog.String("event", e.Kind.String()), slog.String(ratelog.KeyPeer, ratelog.Escape(e.Remote, maxLogErr)),
				slog.String("endpoint", e.Endpoint), slog.String(ratelog.KeyErr, logErr(e.Err)))
		}
		return
	}
	if e.Reason == decodeguard.ReasonNone {
		if log.Enabled(ctx, slog.LevelDebug) {
			log.LogAttrs(ctx, slog.LevelDebug, "zmqguard: socket peer event",
				slog.String(ratelog.KeyComponent, string(s.typ)), slog.String("event", e.Kind.String()),
				slog.String(ratelog.KeyPeer, ratelog.Escape(e.Remote, maxLogErr)), slog.String("endpoint", e.Endpoint),
				slog.String(ratelog.KeyErr, logErr(e.Err)))
		}
		return
	}
	if s.limiter().Drop(e.Reason.String(), e.Remote, time.Now()) != ratelog.First || !log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	msg := "zmqguard: socket refused a connection (first from this peer)"
	if e.Kind == EventDisconnected {
		msg = "zmqguard: socket closed a connection (first from this peer)"
	}
	log.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String(ratelog.KeyComponent, string(s.typ)), slog.String("event", e.Kind.String()),
		slog.String(ratelog.KeyPeer, ratelog.Escape(e.Remote, maxLogErr)), slog.String("endpoint", e.Endpoint),
		slog.String(ratelog.KeyReason, e.Reason.String()), slog.Uint64(ratelog.KeyCount, 1),
		slog.String(ratelog.KeyErr, logErr(e.Err)))
}

const slogError = slog.LevelError

// log writes one line about the socket's own condition (not a peer's), such
// as a listener that stopped; these are never rate-limited.
func (s *Socket) log(_ decodeguard.Reason, level slog.Level, msg string, args ...any) {
	if l := s.logger(); l.Enabled(context.Background(), level) {
		l.Log(context.Background(), level, msg, args...)
	}
}

// logErr renders an error for a log line: escaped and capped, so that no
// peer byte reaches a terminal raw.
func logErr(err error) string {
	if err == nil {
		return ""
	}
	return ratelog.Escape(err.Error(), maxLogErr)
}
