package kvevents

import (
	"sort"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Range is a range of sequence numbers [From, To).
type Range struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// SourceStats is a snapshot of one source's counters, or, as
// Subscriber.Stats returns it, their sums over every source with each
// source's own in Sources.
type SourceStats struct {
	Name   string `json:"name,omitempty"`
	Live   string `json:"live,omitempty"`
	Replay string `json:"replay,omitempty"`
	// Connected reports whether the live connection is up (in Total: how
	// many sources are connected, in ConnectedSources).
	Connected bool `json:"connected"`
	// LastSeen is when the last live message arrived (zero if none).
	LastSeen time.Time `json:"last_seen"`
	// Batches and Events count what was delivered (events by type;
	// BlockInactive only with Config.DecodeBlockInactive, else each is
	// dropped as unsupported, in DroppedEvents and UnsupportedTypes).
	Batches uint64 `json:"batches"`
	Events  struct {
		BlockStored      uint64 `json:"block_stored"`
		BlockRemoved     uint64 `json:"block_removed"`
		AllBlocksCleared uint64 `json:"all_blocks_cleared"`
		BlockInactive    uint64 `json:"block_inactive"`
	} `json:"events"`
	// UnknownFields sums the delivered batches' Batch.UnknownFields: what
	// the decoder read past because this release does not know it (a
	// trailing batch or event element, an unknown map key), never a
	// refusal.
	UnknownFields uint64 `json:"unknown_fields"`
	// Gaps counts detected gaps; Replays replay sessions; Replayed the
	// batches delivered from replay; Lost the batches reported lost;
	// Resets publisher restarts; Duplicates batches already delivered.
	Gaps       uint64 `json:"gaps"`
	Replays    uint64 `json:"replays"`
	Replayed   uint64 `json:"replayed"`
	Lost       uint64 `json:"lost"`
	Resets     uint64 `json:"resets"`
	Duplicates uint64 `json:"duplicates"`
	// ResetsBy counts Resets by cause: SeqBack a live seq not above the
	// last one, Digest a continuity proof that found another run at the
	// kept seq, Resync calls of Subscriber.Resync; Jump counts live seqs
	// more than 2^32 past the last one (a new run started at that seq: a
	// reset when something had been delivered).
	ResetsBy struct {
		SeqBack uint64 `json:"seq_back"`
		Digest  uint64 `json:"digest"`
		Jump    uint64 `json:"jump"`
		Resync  uint64 `json:"resync"`
	} `json:"resets_by"`
	// ContinuityProven counts new connections whose continuity with the
	// last delivered batch was proven (same seq, same digest, replayed);
	// Unproven those that could not be (no replay endpoint, the publisher
	// no longer holds the batch, the replay failed): each reported as an
	// UpdateLost, the source's entries uncertain.
	ContinuityProven uint64 `json:"continuity_proven"`
	Unproven         uint64 `json:"unproven"`
	// Holder is, for a bound source (Source.Bind), the peer holding its
	// one slot: its address, since when, and the batches delivered since;
	// zero when none is connected.
	Holder struct {
		Addr    string    `json:"addr"`
		Since   time.Time `json:"since"`
		Batches uint64    `json:"batches"`
	} `json:"holder,omitzero"`
	// BufferOverflows counts live batches not buffered during a replay.
	BufferOverflows uint64 `json:"buffer_overflows"`
	// Preempted counts replays stopped after Config.ReplaySlice because
	// another source waited for a slot (they resume from where they were).
	Preempted uint64 `json:"preempted"`
	// LostRanges are the latest lost ranges (at most 16).
	LostRanges []Range `json:"lost_ranges,omitempty"`
	// Dropped counts refused messages and batches by reason (frames,
	// sequence frame, payload size and decode, replay replies).
	Dropped decodeguard.Counts `json:"dropped"`
	// DroppedEvents counts events left out of delivered batches by reason.
	DroppedEvents decodeguard.Counts `json:"dropped_events"`
	// UnsupportedTypes counts the events dropped as unsupported (a type
	// this release does not know, such as a newer vLLM's) by type name,
	// escaped: at most 16 names, then "other" for the rest.
	UnsupportedTypes map[string]uint64 `json:"unsupported_types,omitempty"`
	// Refused counts connections of the live socket refused by the
	// transport guards (bad greeting, handshake, oversize frames, caps).
	Refused decodeguard.Counts `json:"refused"`
	// Departed counts UpdateDeparted deliveries for retirement after
	// Config.EngineTTL (a fan-in engine's retirement is counted in its
	// fan-in source's FanIn.Departed: the engine is forgotten).
	Departed uint64 `json:"departed"`
	// FanIn holds a fan-in source's own counters (Source.FanIn): its open
	// connections (Conns) and those accepted in all (Connections), the
	// topics followed now (Topics, each an engine listed in the sums'
	// Sources by its topic), engines retired after Config.EngineTTL
	// (Departed), and messages refused (Refused), by reason: TopicHeld
	// (another live connection holds the topic), Address (the topic's
	// host part is an IP address other than the peer's), BadTopic (empty
	// or over 256 bytes), TopicLimit and ConnTopicLimit (the bounds of
	// Config.FanInMaxTopics and FanInMaxTopicsPerConn), ConnGone (the
	// message's connection had already closed). Each refusal is logged
	// with the peer's address and the topic (rate-limited per reason).
	FanIn struct {
		Conns       int    `json:"conns"`
		Connections uint64 `json:"connections"`
		Topics      int    `json:"topics"`
		Departed    uint64 `json:"departed"`
		Refused     uint64 `json:"refused"`
		RefusedBy   struct {
			TopicHeld      uint64 `json:"topic_held"`
			Address        uint64 `json:"address"`
			BadTopic       uint64 `json:"bad_topic"`
			TopicLimit     uint64 `json:"topic_limit"`
			ConnTopicLimit uint64 `json:"conn_topic_limit"`
			ConnGone       uint64 `json:"conn_gone"`
		} `json:"refused_by"`
	} `json:"fan_in,omitzero"`
	// ConnectedSources is, in the sums, how many sources are connected.
	ConnectedSources int `json:"connected_sources,omitempty"`
	// Sources holds, in the sums, one entry per followed source, by name
	// (nil in the entries themselves).
	Sources []SourceStats `json:"sources,omitempty"`
}

// Stats returns the counters summed over every source, with each source's
// own in Sources. After Run has returned, Connected says whether a source
// was connected when Run ended.
func (s *Subscriber) Stats() SourceStats {
	s.mu.Lock()
	list := make([]*source, 0, len(s.sources))
	for _, so := range s.sources {
		list = append(list, so)
	}
	s.mu.Unlock()
	for _, so := range list {
		if so.fan != nil {
			list = append(list, so.fan.engines()...)
		}
	}
	st := SourceStats{Sources: make([]SourceStats, 0, len(list))}
	for _, so := range list {
		st.Sources = append(st.Sources, so.stats())
	}
	sort.Slice(st.Sources, func(i, j int) bool { return st.Sources[i].Name < st.Sources[j].Name })
	t := &st
	for _, x := range st.Sources {
		t.Batches += x.Batches
		t.Events.BlockStored += x.Events.BlockStored
		t.Events.BlockRemoved += x.Events.BlockRemoved
		t.Events.AllBlocksCleared += x.Events.AllBlocksCleared
		t.Events.BlockInactive += x.Events.BlockInactive
		t.UnknownFields += x.UnknownFields
		t.Gaps += x.Gaps
		t.Replays += x.Replays
		t.Replayed += x.Replayed
		t.Lost += x.Lost
		t.Resets += x.Resets
		t.ResetsBy.SeqBack += x.ResetsBy.SeqBack
		t.ResetsBy.Digest += x.ResetsBy.Digest
		t.ResetsBy.Jump += x.ResetsBy.Jump
		t.ResetsBy.Resync += x.ResetsBy.Resync
		t.ContinuityProven += x.ContinuityProven
		t.Unproven += x.Unproven
		t.Duplicates += x.Duplicates
		t.BufferOverflows += x.BufferOverflows
		t.Preempted += x.Preempted
		t.Departed += x.Departed
		addFanIn(t, &x)
		t.Dropped.Add(&x.Dropped)
		t.DroppedEvents.Add(&x.DroppedEvents)
		for name, n := range x.UnsupportedTypes {
			t.UnsupportedTypes = countType(t.UnsupportedTypes, name, n)
		}
		t.Refused.Add(&x.Refused)
		if x.Connected {
			t.ConnectedSources++
		}
		if x.LastSeen.After(t.LastSeen) {
			t.LastSeen = x.LastSeen
		}
	}
	t.Connected = t.ConnectedSources > 0
	return st
}

func (so *source) stats() SourceStats {
	so.smu.Lock()
	st := so.st
	st.LostRanges = append([]Range(nil), so.st.LostRanges...)
	if so.st.UnsupportedTypes != nil {
		st.UnsupportedTypes = make(map[string]uint64, len(so.st.UnsupportedTypes))
		for k, v := range so.st.UnsupportedTypes {
			st.UnsupportedTypes[k] = v
		}
	}
	so.smu.Unlock()
	if so.lp != nil {
		ls := so.lp.Stats()
		st.Dropped.Add(&ls.Dropped)
		ss := so.sock.Stats()
		st.Refused = ss.Refused
	}
	if so.fan != nil {
		so.fan.stats(&st)
	}
	st.Connected = so.peers.Load() > 0
	if f := so.frozen.Load(); f != 0 {
		st.Connected = f == 2
	}
	if ns := so.lastSeen.Load(); ns != 0 {
		st.LastSeen = time.Unix(0, ns)
	}
	return st
}

// addFanIn adds x's fan-in counters to the sums t.
func addFanIn(t, x *SourceStats) {
	a, b := &t.FanIn, &x.FanIn
	a.Conns += b.Conns
	a.Connections += b.Connections
	a.Topics += b.Topics
	a.Departed += b.Departed
	a.Refused += b.Refused
	a.RefusedBy.TopicHeld += b.RefusedBy.TopicHeld
	a.RefusedBy.Address += b.RefusedBy.Address
	a.RefusedBy.BadTopic += b.RefusedBy.BadTopic
	a.RefusedBy.TopicLimit += b.RefusedBy.TopicLimit
	a.RefusedBy.ConnTopicLimit += b.RefusedBy.ConnTopicLimit
	a.RefusedBy.ConnGone += b.RefusedBy.ConnGone
}

func (so *source) count(f func(st *SourceStats)) {
	so.smu.Lock()
	f(&so.st)
	so.smu.Unlock()
}

// maxUnsupportedTypes is how many distinct unsupported event type names
// SourceStats.UnsupportedTypes keeps; further names count under "other".
const maxUnsupportedTypes = 16

// countType adds n to name's count in m, or to "other" when m already holds
// maxUnsupportedTypes names (and not this one).
func countType(m map[string]uint64, name string, n uint64) map[string]uint64 {
	if m == nil {
		m = make(map[string]uint64)
	}
	named := len(m)
	if _, ok := m["other"]; ok {
		named--
	}
	if _, ok := m[name]; !ok && name != "other" && named >= maxUnsupportedTypes {
		name = "other"
	}
	m[name] += n
	return m
}
