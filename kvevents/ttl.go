package kvevents

import (
	"context"
	"errors"
	"time"
)

// Retirement (Config.EngineTTL, issue 36): an engine whose connection has
// been gone for EngineTTL gets one UpdateDeparted and its state is freed. A
// dialed or bound source counts "gone" from the moment its socket's last
// connection closed (it stays followed and keeps dialing: a return is a
// new run); a fan-in engine from the moment its topic's connection closed
// (its topic is then forgotten, fanin.go). An engine that stays connected
// is never retired, however long it stays silent: vLLM publishes only when
// its cache changes.

// noteConn arms the retirement timer when the source has no connection
// left, and disarms it when it has one (after so.peers changed).
func (so *source) noteConn() {
	ttl := so.sub.cfg.EngineTTL
	if ttl < 0 || so.fan != nil { // a fan-in source's engines retire one by one
		return
	}
	so.bgMu.Lock()
	defer so.bgMu.Unlock()
	if so.peers.Load() > 0 {
		if so.ttl != nil {
			so.ttl.Stop()
			so.ttl = nil
		}
		return
	}
	if so.ttl != nil || so.stopping {
		return
	}
	so.ttl = time.AfterFunc(ttl, so.expire)
}

// stopTTL disarms the retirement timer (the source is stopping).
func (so *source) stopTTL() {
	so.bgMu.Lock()
	if so.ttl != nil {
		so.ttl.Stop()
		so.ttl = nil
	}
	so.bgMu.Unlock()
}

// expire runs on the timer's goroutine, counted in the wait group of the
// source that owns the socket (a fan-in engine's parent), so that stopping
// it waits for a retirement under way.
func (so *source) expire() {
	so.bgMu.Lock()
	so.ttl = nil
	so.bgMu.Unlock()
	owner := so
	if so.parent != nil {
		owner = so.parent
	}
	owner.bgMu.Lock()
	if !owner.running || owner.stopping {
		owner.bgMu.Unlock()
		return
	}
	owner.wg.Add(1)
	owner.bgMu.Unlock()
	defer owner.wg.Done()
	if so.parent != nil {
		so.parent.fan.retire(so)
		return
	}
	so.retire()
}

// retire retires a dialed or bound source whose connection has stayed gone
// for EngineTTL: UpdateDeparted, then its state is that of a source never
// seen (the next connection's batches are a new run).
func (so *source) retire() {
	so.lock()
	defer so.unlock()
	if so.peers.Load() > 0 || (!so.started && !so.havePos) {
		return // back already, or nothing held for it
	}
	so.forget()
	_ = so.depart("kvevents: engine retired: no connection for Config.EngineTTL")
}

// forget drops everything the source knows of its publisher's run (so.mu
// held).
func (so *source) forget() {
	so.abortReplay()
	so.started, so.havePos, so.proving = false, false, false
	so.next, so.lastLive, so.maxSeen, so.conn, so.connSeq = 0, 0, 0, 0, 0
	so.fromStart = so.sub.cfg.FromStart
	so.failures, so.replayAfter = 0, time.Time{}
}

// depart counts, logs and delivers the source's UpdateDeparted (the turn
// and so.mu held, as emit needs).
func (so *source) depart(msg string) error {
	so.count(func(st *SourceStats) { st.Departed++ })
	so.sub.log.line(logDeparted, so.sub.cfg.Logger, msg, "source", so.src.Name, "engine_ttl", so.sub.cfg.EngineTTL.String())
	return so.emit(Update{Kind: UpdateDeparted})
}

// departRemoved delivers UpdateDeparted for a source Remove stopped (for a
// fan-in source, for each engine it followed), once nothing else of it
// runs: the source's last update. Nothing is delivered while the
// Subscriber closes.
func (so *source) departRemoved() {
	var names []string
	if so.fan != nil {
		names = so.fan.stoppedNames()
	} else {
		so.mu.Lock()
		held := so.started || so.havePos
		so.mu.Unlock()
		if held {
			names = []string{so.src.Name}
		}
	}
	ctx := so.sub.ctx
	for _, n := range names {
		if ctx.Err() != nil {
			return
		}
		if err := so.sub.cfg.Handler(ctx, Update{Kind: UpdateDeparted, Source: n}); err != nil {
			if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
				so.sub.fail(err) // as emit: a Handler ended by its ctx is no failure
			}
			return
		}
	}
}
