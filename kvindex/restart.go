package kvindex

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
)

// Positions returns, per source, the Position of the last batch the index
// applied (Apply of an UpdateBatch) since the source's last reset: what a
// new kvevents.Subscriber gives back in Source.Resume so that the source
// resumes where the index stands, exact where the publisher still holds
// the batches since. A source reset (UpdateReset) has no position until
// its next batch. They come from the snapshot (Config.SnapshotFile) or the
// backend (a PositionStore) when New starts, and follow Apply after.
func (x *Index) Positions() map[string]kvevents.Position {
	x.posMu.Lock()
	defer x.posMu.Unlock()
	return maps.Clone(x.pos)
}

// setPosition records engine's position after its batch applied (in the
// engine's turn, so a PositionStore sees one engine's saves in order).
func (x *Index) setPosition(engine string, p kvevents.Position) {
	x.posMu.Lock()
	x.pos[engine] = p
	x.posMu.Unlock()
	if x.ps != nil {
		if err := x.ps.SavePosition(engine, p); err != nil {
			x.failed("save position", engine, err)
		}
	}
}

// reset clears engine (a publisher reset) and forgets its position.
func (x *Index) reset(engine string) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	defer st.mu.Unlock()
	x.resumed(engine, false)
	st.ops = append(st.ops[:0], Op{Kind: OpClear})
	// The position goes first: a position kept while the entries are
	// already cleared is harmless (a resume replays), the other way round
	// is not.
	err := x.dropPosition(engine)
	// Cleared whatever became of the position.
	return errors.Join(err, x.apply(engine, st.ops))
}

// dropPosition forgets engine's kept position, here and in the
// PositionStore (a failure there is logged and returned).
func (x *Index) dropPosition(engine string) error {
	x.posMu.Lock()
	delete(x.pos, engine)
	x.posMu.Unlock()
	if x.ps == nil {
		return nil
	}
	err := x.ps.DropPosition(engine)
	if err != nil {
		x.failed("drop position", engine, err)
	}
	return err
}

// depart retires engine (kvevents.UpdateDeparted: it left the fleet):
// every entry and mapping of it goes (an OpClear, on any backend), its
// position too, and the index forgets its state, so that an engine that
// comes back under that name starts from nothing. Counted in
// Stats.Departed and logged once per departure.
func (x *Index) depart(engine string) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	x.resumed(engine, false)
	st.ops = append(st.ops[:0], Op{Kind: OpClear})
	err := x.dropPosition(engine)
	c, aerr := x.be.Apply(engine, st.ops)
	x.st.add(c)
	if aerr != nil {
		x.failed("apply", engine, aerr)
	}
	err = errors.Join(err, aerr)
	if r, ok := x.be.(interface{ RetireEngine(string) error }); ok && aerr == nil {
		// A shared backend lets the engine go (redisstore: its writer lease).
		if rerr := r.RetireEngine(engine); rerr != nil {
			x.failed("retire", engine, rerr)
			err = errors.Join(err, rerr)
		}
	}
	if r, ok := x.be.(engineRetirer); ok && aerr == nil {
		// In the engine's turn: nothing of it is stored meanwhile.
		r.retire(engine)
	}
	st.mu.Unlock()
	x.mu.Lock()
	if x.engines[engine] == st {
		delete(x.engines, engine)
		if x.models[st.model]--; x.models[st.model] <= 0 {
			delete(x.models, st.model)
		}
	}
	x.mu.Unlock()
	x.st.departed.Add(1)
	if err != nil {
		x.log.Warn("kvindex: engine departed; dropping its entries failed", slog.String("engine", ratelog.Escape(engine, 64)), slog.Any(ratelog.KeyErr, err))
	} else {
		x.log.Info("kvindex: engine departed; its entries dropped", slog.String("engine", ratelog.Escape(engine, 64)), slog.Uint64("entries", c.Cleared))
	}
	return err
}

// lost makes engine's entries uncertain (a lost range).
func (x *Index) lost(engine string) error {
	if x.closed.Load() {
		return ErrClosed
	}
	st := x.engine(engine)
	st.mu.Lock()
	defer st.mu.Unlock()
	x.resumed(engine, false)
	st.ops = append(st.ops[:0], Op{Kind: OpLost})
	return x.apply(engine, st.ops)
}

// loadPositions reads a PositionStore's positions when New starts.
func (x *Index) loadPositions() error {
	ps, err := x.ps.Positions()
	if errors.Is(err, ErrBackendLost) {
		// Nothing cached yet to drop; the store starts over.
		x.st.backendLosses.Add(1)
		x.log.Error("kvindex: the shared index lost its data before this index started; every source starts over", slog.Any(ratelog.KeyErr, err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("kvindex: reading the sources' positions from the backend: %w", err)
	}
	x.posMu.Lock()
	maps.Copy(x.pos, ps)
	x.posMu.Unlock()
	return nil
}

// failed counts and logs a failed backend call; a lost backend
// (ErrBackendLost) is handled by backendLost instead.
func (x *Index) failed(op, engine string, err error) {
	x.st.errors.Add(1)
	if errors.Is(err, ErrBackendLost) {
		x.backendLost(op, engine, err)
		return
	}
	x.logFailure(op, engine, err)
}

// backendLost is what the index does when the shared store lost its data
// (the backend has dropped its own tables already): it drops what it
// caches about the store (positions, block sizes seen), logs one ERROR,
// counts it and asks the feed, through Config.OnBackendLost, to resync
// every source, so that each engine is re-established as after a reset.
// It may run under an engine's lock: OnBackendLost runs in a goroutine of
// its own.
func (x *Index) backendLost(op, engine string, err error) {
	x.st.backendLosses.Add(1)
	x.posMu.Lock()
	clear(x.pos)
	x.posMu.Unlock()
	x.spaceMu.Lock()
	clear(x.spaces)
	x.spaceMu.Unlock()
	resync := "no Config.OnBackendLost: the sources are not resynced"
	if x.cfg.OnBackendLost != nil {
		resync = "every source is resynced from the start"
	}
	x.log.Error("kvindex: the shared index lost its data (a restart without persistence, FLUSHALL or a failover to an empty replica); cached tables and positions dropped, "+resync,
		slog.String("op", op), slog.String("engine", ratelog.Escape(engine, 64)), slog.Any(ratelog.KeyErr, err))
	if x.cfg.OnBackendLost == nil {
		return
	}
	x.lostMu.Lock()
	defer x.lostMu.Unlock()
	if x.closing {
		return
	}
	// Its own goroutine, which Close does not wait for: the callback may
	// call Close.
	go x.cfg.OnBackendLost()
}
