package coordinator

// What the coordinator sends: stats and wave publications to the
// front-ends, READY and START_DP_WAVE to the engines, and the accounting
// of each send.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/socket"
)

// tick runs the state machine's clock: a due stats publication goes out to
// the front-ends.
func (c *Coordinator) tick(ctx context.Context) error {
	c.mu.Lock()
	a := c.state.Tick(time.Now())
	if a.PublishStats {
		c.buf = c.state.AppendStatsPublish(c.buf[:0])
	}
	c.mu.Unlock()
	if !a.PublishStats {
		return nil
	}
	c.statsPublished.Add(1) // before sending, so a peer never sees it first
	if err := c.front.Send(ctx, c.buf); err != nil {
		return c.sendError("front publish", err)
	}
	return nil
}

var (
	readyFrame       = []byte(dpwire.ReadyFrame)
	startDPWaveFrame = []byte(dpwire.StartDPWaveFrame)
)

// act performs what one input called for. Stats publications come from tick
// only. The counters go up before each send, so that a peer that received
// a message never reads a counter that does not include it yet.
// readyInterval is Config.ReadyInterval with its default; zero means no
// coalescing.
func (c *Coordinator) readyInterval() time.Duration {
	switch {
	case c.cfg.ReadyInterval < 0:
		return 0
	case c.cfg.ReadyInterval == 0:
		return defaultReadyInterval
	}
	return c.cfg.ReadyInterval
}

func (c *Coordinator) act(ctx context.Context, a *stateActions) error {
	if a.SendReady {
		now := time.Now()
		if iv := c.readyInterval(); iv > 0 && !c.lastReady.IsZero() && now.Sub(c.lastReady) < iv {
			// Within ReadyInterval of the last READY: owed, sent by
			// sendPendingReady when the interval is over.
			c.readyPending = true
			c.readyCoalesced.Add(1)
		} else if err := c.sendReady(ctx, now); err != nil {
			return err
		}
	}
	if a.SendStartWave {
		now := time.Now()
		if iv := c.readyInterval(); iv > 0 && a.StartWave == c.lastStart && !c.lastStartAt.IsZero() && now.Sub(c.lastStartAt) < iv {
			// The same broadcast again (repeated wakes while paused):
			// the engines have it; do not let a wake flood queue copies.
			c.startWaveCoalesced.Add(1)
		} else {
			c.buf = a.AppendStartDPWave(c.buf[:0])
			c.startWaveSent.Add(1)
			c.lastStart, c.lastStartAt = a.StartWave, now
			if err := c.sendControl(ctx, "START_DP_WAVE", startDPWaveFrame, c.buf); err != nil {
				return err
			}
		}
	}
	if a.PublishWave {
		c.buf = a.AppendWavePublish(c.buf[:0])
		c.wavePublished.Add(1)
		if err := c.front.Send(ctx, c.buf); err != nil {
			return c.sendError("front publish", err)
		}
	}
	return nil
}

func (c *Coordinator) sendReady(ctx context.Context, now time.Time) error {
	c.lastReady, c.readyPending = now, false
	c.readySent.Add(1)
	return c.sendControl(ctx, "READY", readyFrame)
}

// sendPendingReady sends the READY owed, if any, once ReadyInterval has
// passed since the last one.
func (c *Coordinator) sendPendingReady(ctx context.Context) error {
	if !c.readyPending {
		return nil
	}
	return c.sendReady(ctx, time.Now())
}

// sendControl broadcasts a control message on the back publish socket,
// which carries nothing else, and reports loudly (counted in
// Stats.ControlDropped, logged at error level, rate-limited) when the
// socket dropped it for an engine whose queue was full: that engine missed
// it.
func (c *Coordinator) sendControl(ctx context.Context, what string, frames ...[]byte) error {
	before := c.backPub.Stats().DroppedHWM
	if err := c.backPub.Send(ctx, frames...); err != nil {
		return c.sendError("back publish", err)
	}
	if lost := c.backPub.Stats().DroppedHWM - before; lost > 0 {
		total := c.controlDropped.Add(lost)
		c.logLim().Error("control", "coordinator: a control message was dropped for an engine whose queue is full",
			slog.String(ratelog.KeyComponent, LoopBackPublish), slog.String("message", what),
			slog.Uint64("engines_missed", lost), slog.Uint64("control_dropped", total))
	}
	return nil
}

func (c *Coordinator) sendError(which string, err error) error {
	if errors.Is(err, socket.ErrClosed) && c.isClosed() {
		return ErrClosed
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("coordinator: send on %s: %w", which, err)
}
