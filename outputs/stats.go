package outputs

import (
	"cmp"
	"slices"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// EngineStats are one engine's counters.
type EngineStats struct {
	Engine int64 `json:"engine"`
	// Messages and Outputs count the valid messages and the request outputs
	// in them.
	Messages uint64 `json:"messages"`
	Outputs  uint64 `json:"outputs"`
	// Dropped counts drops by reason from this engine's connections.
	Dropped decodeguard.Counts `json:"dropped"`
	// Dead reports that the engine sent ENGINE_CORE_DEAD (cleared when a
	// new connection claims the index: a restarted engine).
	Dead bool `json:"dead"`
	// Peer is the address of the connection that holds the engine index
	// ("" when none does yet).
	Peer string `json:"peer,omitempty"`
}

// Stats is a snapshot of a Receiver's counters.
type Stats struct {
	Release string `json:"release"`
	// Received counts every message taken off the socket.
	Received uint64 `json:"received"`
	// Messages counts valid EngineCoreOutputs handed to the handler,
	// Outputs the request outputs in them.
	Messages uint64 `json:"messages"`
	Outputs  uint64 `json:"outputs"`
	// EngineDead counts ENGINE_CORE_DEAD sentinels from connections that
	// hold an engine index; UnattributedDead those from connections that
	// hold none (dropped, ReasonPolicy).
	EngineDead       uint64 `json:"engine_dead"`
	UnattributedDead uint64 `json:"unattributed_dead"`
	// ClaimsRefused counts valid messages dropped (ReasonPolicy) because
	// their engine index is held by another connection.
	ClaimsRefused uint64 `json:"claims_refused"`
	// Takeovers counts engine indices claimed, after their connection
	// left, by a connection from another host (logged at WARN naming both;
	// EngineStats.Peer is the holder now).
	Takeovers uint64 `json:"takeovers"`
	// QueuedBytes is the bytes of valid messages waiting for their
	// handlers now; Holds counts the times a connection's reader was held
	// because its queue reached ConnQueueBytes; QueueWaits counts the
	// times the receive loop waited because all queues held QueueBytes.
	QueuedBytes int64  `json:"queued_bytes"`
	Holds       uint64 `json:"holds"`
	QueueWaits  uint64 `json:"queue_waits"`
	// Dropped counts dropped messages by reason (all engines).
	Dropped decodeguard.Counts `json:"dropped"`
	// Unattributed counts the drops from connections that had not sent a
	// valid message.
	Unattributed decodeguard.Counts `json:"unattributed"`
	// Refused counts refused connections by reason (the socket's).
	Refused decodeguard.Counts `json:"refused"`
	// Engines are the per-engine counters, by engine index.
	Engines []EngineStats `json:"engines"`
}

// Stats returns a snapshot of the counters; Engines is sorted by index.
func (r *Receiver) Stats() Stats {
	ls := r.lp.Stats()
	st := Stats{
		Release:  r.cfg.Release.String(),
		Received: ls.Received,
		Dropped:  ls.Dropped,
		Refused:  r.sock.Stats().Refused,
	}
	r.queueStats(&st)
	r.mu.Lock()
	for i, n := range r.lateDropped {
		st.Dropped[i] += n
	}
	st.Messages, st.Outputs, st.EngineDead, st.Unattributed = r.messages, r.outputs, r.dead, r.unattributed
	st.UnattributedDead, st.ClaimsRefused, st.Takeovers = r.deadUnattr, r.refused, r.takeovers
	st.Engines = make([]EngineStats, 0, len(r.engines))
	for _, e := range r.engines {
		st.Engines = append(st.Engines, *e)
	}
	r.mu.Unlock()
	slices.SortFunc(st.Engines, func(a, b EngineStats) int { return cmp.Compare(a.Engine, b.Engine) })
	return st
}
