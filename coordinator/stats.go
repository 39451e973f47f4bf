package coordinator

import (
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// SocketStats are the counters of one of the coordinator's sockets and the
// receive loop on it.
type SocketStats struct {
	// Endpoint is the bound endpoint.
	Endpoint string `json:"endpoint"`
	// Received counts messages the loop took from the socket; Accepted those
	// that passed every check, the state machine's included; Dropped the
	// others (decode, validation and state-machine drops), by reason in
	// Drops. Every received message is either accepted or dropped, once.
	Received uint64             `json:"received"`
	Accepted uint64             `json:"accepted"`
	Dropped  uint64             `json:"dropped"`
	Drops    decodeguard.Counts `json:"drops"`
	// StateDrops is the part of Drops refused by the state machine (an
	// engine index it does not have, a scale count beyond Config.MaxEngines).
	StateDrops decodeguard.Counts `json:"state_drops"`
	// Refused counts connections and streams the socket layer refused
	// (raw TCP probes, bad handshakes, oversize messages), by reason; they
	// never reach the loop.
	Refused decodeguard.Counts `json:"refused"`
	// Peers is the number of connected peers; Connects and Disconnects
	// count peers joining and leaving.
	Peers       int    `json:"peers"`
	Connects    uint64 `json:"connects"`
	Disconnects uint64 `json:"disconnects"`
	// Sent counts messages queued to peers (one per subscriber for XPUB
	// publications); DroppedHWM those dropped for a subscriber whose queue
	// was full.
	Sent       uint64 `json:"sent"`
	DroppedHWM uint64 `json:"dropped_hwm"`

	// Loop and Socket are the raw counters these are computed from.
	Loop   loop.Stats   `json:"-"`
	Socket socket.Stats `json:"-"`
}

// Stats is a snapshot of a coordinator's counters, flat enough to print as
// one JSON line.
type Stats struct {
	// Started reports whether start-up is over; Subscribed counts the
	// engine subscriptions it received.
	Started    bool `json:"started"`
	Subscribed int  `json:"subscribed"`
	// Engines is the current engine count; Wave and Running the wave state.
	Engines int `json:"engines"`
	// Loads is each engine's last applied load (waiting, running,
	// kv_cache_usage), by engine index: what the next stats publication
	// carries. A copy; the caller may keep it.
	Loads   []EngineLoad `json:"loads"`
	Wave    int64        `json:"wave"`
	Running bool         `json:"running"`

	// Received, Accepted and Dropped sum the three sockets' counts; Drops
	// sums their drops by reason and Refused their refused connections.
	Received uint64             `json:"received"`
	Accepted uint64             `json:"accepted"`
	Dropped  uint64             `json:"dropped"`
	Drops    decodeguard.Counts `json:"drops"`
	Refused  decodeguard.Counts `json:"refused"`

	// What the coordinator sent: stats publications and wave publications
	// to the front-ends, READY and START_DP_WAVE broadcasts to the engines.
	StatsPublished uint64 `json:"stats_published"`
	WavePublished  uint64 `json:"wave_published"`
	ReadySent      uint64 `json:"ready_sent"`
	StartWaveSent  uint64 `json:"start_wave_sent"`
	// ReadyCoalesced counts READY requests (engine subscriptions after
	// start-up) folded into another READY (Config.ReadyInterval);
	// StartWaveCoalesced identical START_DP_WAVE broadcasts not repeated
	// within ReadyInterval; ControlDropped READY or START_DP_WAVE copies the
	// back publish socket dropped for an engine whose queue was full (each
	// also logged at error level).
	ReadyCoalesced     uint64 `json:"ready_coalesced"`
	StartWaveCoalesced uint64 `json:"start_wave_coalesced"`
	ControlDropped     uint64 `json:"control_dropped"`

	// The state machine's counters: stats taken, stale stats ignored (older
	// (current_wave, step_counter) than the newest taken from the same
	// engine), SCALE_ELASTIC_EP notices applied.
	StatsApplied uint64 `json:"stats_applied"`
	StaleStats   uint64 `json:"stale_stats"`
	Resizes      uint64 `json:"resizes"`
	// StatsResyncs counts engines whose stats ordering was restarted after
	// 3 consecutive stale messages; WaveJumps wave notices refused
	// for moving the wave more than 4 past the current one (or to the last
	// representable wave); WaveResyncs the times 3 such notices in a row
	// were followed anyway.
	StatsResyncs uint64 `json:"stats_resyncs"`
	WaveJumps    uint64 `json:"wave_jumps"`
	WaveResyncs  uint64 `json:"wave_resyncs"`
	// NewerFields counts engine messages carrying EngineCoreOutputs fields
	// beyond the 8 of vLLM main of 2026-08-07 (a newer vLLM's, such as the
	// engine_notifications of vLLM PR #51433): read past and counted,
	// never dropped for it.
	NewerFields uint64 `json:"newer_fields"`
	// BackUnsubscribed counts unsubscriptions ("\x00") received on the back
	// publish socket, which are accepted and ignored (during start-up with a
	// rate-limited warning).
	BackUnsubscribed uint64 `json:"back_unsubscribed"`
	// SilentEngines counts, per engine index (ascending), the heartbeat
	// timeouts of that engine's back output and back publish connections
	// (each also logged at warn level as "engine went silent");
	// SilentUnknown those on the back sockets that could not be tied to
	// one engine (no output seen from the connection, or, on back publish,
	// several engines on the silent host).
	SilentEngines []EngineSilence `json:"silent_engines,omitempty"`
	SilentUnknown uint64          `json:"silent_unknown"`

	// Per socket.
	Front       SocketStats `json:"front"`
	BackOutput  SocketStats `json:"back_output"`
	BackPublish SocketStats `json:"back_publish"`
}

// Stats returns a snapshot of the coordinator's counters. It is safe to
// call at any time, also after Close.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	snap := c.state.stateSnapshot()
	counters := c.state.stateCounters()
	engines := c.state.Engines()
	c.mu.Unlock()
	s := Stats{
		Started: snap.Started, Subscribed: snap.Subscribed,
		Engines: engines, Wave: snap.Wave, Running: snap.Running,
		Loads:          snap.Loads,
		StatsPublished: c.statsPublished.Load(),
		WavePublished:  c.wavePublished.Load(),
		ReadySent:      c.readySent.Load(),
		StartWaveSent:  c.startWaveSent.Load(),

		ReadyCoalesced:     c.readyCoalesced.Load(),
		StartWaveCoalesced: c.startWaveCoalesced.Load(),
		ControlDropped:     c.controlDropped.Load(),
		StatsApplied:       counters.StatsApplied,
		StaleStats:         counters.StaleStats,
		Resizes:            counters.Resizes,
		StatsResyncs:       counters.StatsResyncs,
		WaveJumps:          counters.WaveJumps,
		WaveResyncs:        counters.WaveResyncs,
		NewerFields:        counters.NewerFields,

		BackUnsubscribed: c.backUnsubs.Load(),
	}
	s.SilentEngines, s.SilentUnknown = c.silences()
	c.socketStats(&s.Front, idxFront, c.front, c.frontLoop.Stats())
	c.socketStats(&s.BackOutput, idxBackOutput, c.backOut, c.outLoop.Stats())
	c.socketStats(&s.BackPublish, idxBackPublish, c.backPub, c.pubLoop.Stats())
	for _, ss := range []*SocketStats{&s.Front, &s.BackOutput, &s.BackPublish} {
		s.Received += ss.Received
		s.Accepted += ss.Accepted
		s.Dropped += ss.Dropped
		s.Drops.Add(&ss.Drops)
		s.Refused.Add(&ss.Refused)
	}
	return s
}

func (c *Coordinator) socketStats(dst *SocketStats, idx int, sock *socket.Socket, ls loop.Stats) {
	ss := sock.Stats()
	for r := range dst.StateDrops {
		dst.StateDrops[r] = c.stateDrops[idx][r].Load()
	}
	*dst = SocketStats{
		Endpoint:    sock.Endpoint(),
		Received:    ls.Received,
		Drops:       ls.Dropped,
		StateDrops:  dst.StateDrops,
		Refused:     ss.Refused,
		Peers:       ss.Peers,
		Connects:    ss.Connects,
		Disconnects: ss.Disconnects,
		Sent:        ss.Sent,
		DroppedHWM:  ss.DroppedHWM,
		Loop:        ls,
		Socket:      ss,
	}
	dst.Drops.Add(&dst.StateDrops)
	dst.Dropped = dst.Drops.Total()
	state := dst.StateDrops.Total()
	if ls.Delivered >= state {
		dst.Accepted = ls.Delivered - state
	}
}

// EngineLoad is one engine's load as its last stats reported it, and as
// the coordinator's stats publication carries it to the front-ends.
type EngineLoad struct {
	Waiting      int64   `json:"waiting"`
	Running      int64   `json:"running"`
	KVCacheUsage float64 `json:"kv_cache_usage"`
}
