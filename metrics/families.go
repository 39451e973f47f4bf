package metrics

import (
	"strings"
)

// Kind is a metric family's type.
type Kind uint8

// The metric kinds.
const (
	// Counter is a monotonic total (Prometheus name ends in _total).
	Counter Kind = iota
	// Gauge is a value that goes up and down.
	Gauge
)

// String returns "counter" or "gauge".
func (k Kind) String() string {
	if k == Gauge {
		return "gauge"
	}
	return "counter"
}

// The label names. Every family uses a subset of these four; no other label
// name ever appears. Family.Labels names a family's own.
const (
	labelSocket = "socket" // a socket, listener or handshake listener name
	labelReason = "reason" // a decodeguard.Reason name such as "decode"
	labelLoop   = "loop"   // a receive loop (or source set) name
	labelSource = "source" // one source of a source set, or OtherSource
)

// Family describes one metric: its Prometheus name and help, its kind, its
// OpenTelemetry unit and its label names. The set of families is fixed
// ([Families]); what varies from scrape to scrape is only which label values
// have samples.
type Family struct {
	// Name is the Prometheus name: zmqguard_ prefix, base units, _total
	// for counters.
	Name string
	// Help is the one-line description.
	Help string
	// Kind is Counter or Gauge.
	Kind Kind
	// Unit is the UCUM unit for OpenTelemetry: "s", "By", or an annotation
	// such as "{message}" (which Prometheus exporters do not turn into a name
	// suffix); "" for 0/1 states.
	Unit string
	// Labels are the label names, in the order of [Sample.Labels].
	Labels []string
	// Float marks a family whose values are not integers (timestamps).
	Float bool
}

// OTelName returns the OpenTelemetry instrument name: the Prometheus name
// with "zmqguard_COMPONENT_" written "zmqguard.COMPONENT." and without the
// "_total" and unit suffixes the Prometheus exporter adds back
// (zmqguard_loop_messages_dropped_total is zmqguard.loop.messages_dropped).
func (f *Family) OTelName() string {
	n := strings.TrimSuffix(f.Name, "_total")
	switch f.Unit {
	case "s":
		n = strings.TrimSuffix(n, "_seconds")
	case "By":
		n = strings.TrimSuffix(n, "_bytes")
	}
	n = strings.TrimPrefix(n, "zmqguard_")
	if comp, rest, ok := strings.Cut(n, "_"); ok {
		return "zmqguard." + comp + "." + rest
	}
	return "zmqguard." + n
}

func family(name string, kind Kind, unit, help string, labels ...string) *Family {
	return &Family{Name: name, Kind: kind, Unit: unit, Help: help, Labels: labels}
}

// The families, by component. Their names and label sets are part of the
// package's API (dashboards and alerts refer to them); [Families] lists
// them.
var (
	// Loops (loop.Loop, and the loops inside the references).
	loopReceived = family("zmqguard_loop_messages_received_total", Counter, "{message}",
		"Messages the receive loop took from its socket.", labelLoop)
	loopDelivered = family("zmqguard_loop_messages_delivered_total", Counter, "{message}",
		"Messages that passed every check and reached the handler.", labelLoop)
	loopDropped = family("zmqguard_loop_messages_dropped_total", Counter, "{message}",
		"Messages the receive loop dropped, by reason.", labelLoop, labelReason)
	loopHandlerErrors = family("zmqguard_loop_handler_errors_total", Counter, "{error}",
		"Unclassified handler errors and recovered handler panics.", labelLoop)
	loopLastDrop = &Family{Name: "zmqguard_loop_last_drop_timestamp_seconds", Kind: Gauge, Unit: "s", Float: true,
		Help: "Unix time of the loop's latest drop (0: none yet).", Labels: []string{labelLoop}}

	// Sockets (socket.Socket).
	socketReceived = family("zmqguard_socket_messages_received_total", Counter, "{message}",
		"Messages the socket delivered to its reader.", labelSocket)
	socketSent = family("zmqguard_socket_messages_sent_total", Counter, "{message}",
		"Messages handed to a peer's send queue (one per peer for fan-out).", labelSocket)
	socketDroppedHWM = family("zmqguard_socket_hwm_dropped_messages_total", Counter, "{message}",
		"Messages dropped because a peer's send queue was full.", labelSocket)
	socketDroppedUnroutable = family("zmqguard_socket_unroutable_dropped_messages_total", Counter, "{message}",
		"ROUTER messages dropped because their identity was not connected.", labelSocket)
	socketDroppedFiltered = family("zmqguard_socket_filtered_dropped_messages_total", Counter, "{message}",
		"Received messages dropped by the socket's own rules (REQ out of turn, SUB unsubscribed).", labelSocket)
	socketRefused = family("zmqguard_socket_refused_total", Counter, "{refusal}",
		"Connections and messages the socket refused, by reason.", labelSocket, labelReason)
	socketPeers = family("zmqguard_socket_peers", Gauge, "{peer}",
		"Peers connected now.", labelSocket)
	socketConnects = family("zmqguard_socket_connects_total", Counter, "{peer}",
		"Established peers that joined.", labelSocket)
	socketDisconnects = family("zmqguard_socket_disconnects_total", Counter, "{peer}",
		"Established peers that left.", labelSocket)
	socketAcceptErrors = family("zmqguard_socket_accept_errors_total", Counter, "{error}",
		"Failed accepts on the socket's bound endpoints.", labelSocket)
	socketHeartbeatTimeouts = family("zmqguard_socket_heartbeat_timeouts_total", Counter, "{peer}",
		"Peers disconnected because they stayed silent past the heartbeat timeout or their announced TTL.", labelSocket)
	socketHandovers = family("zmqguard_socket_handovers_total", Counter, "{peer}",
		"ROUTER identities taken over by a new connection (RouterHandover).", labelSocket)
	socketSendQueueBytes = &Family{Name: "zmqguard_socket_send_queue_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes waiting in the socket's per-peer send queues.", Labels: []string{labelSocket}}
	socketSendQueueMessages = family("zmqguard_socket_send_queue_messages", Gauge, "{message}",
		"Messages waiting in the socket's per-peer send queues.", labelSocket)
	socketReceiveQueueBytes = &Family{Name: "zmqguard_socket_receive_queue_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes of received messages waiting for Recv.", Labels: []string{labelSocket}}
	socketZMTP30Peers = family("zmqguard_socket_zmtp30_peers", Gauge, "{peer}",
		"Connected peers that announced ZMTP 3.0 (no heartbeat; TCP keepalive watches them).", labelSocket)
	socketDroppedFairShare = family("zmqguard_socket_fair_share_dropped_messages_total", Counter, "{message}",
		"Messages refused because their peer's send queue was past its fair share of SendTotalBytes.", labelSocket)
	socketSendEvictions = family("zmqguard_socket_send_evictions_total", Counter, "{peer}",
		"Peers disconnected because SendTotalBytes was spent while their queue held more than its fair share.", labelSocket)
	socketBudgetBytes = &Family{Name: "zmqguard_socket_budget_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes charged to the socket's MemoryBudget now.", Labels: []string{labelSocket}}
	socketBudgetStalls = family("zmqguard_socket_budget_stalls_total", Counter, "{stall}",
		"Reads paused because MemoryBudget was spent and the connection held more than its fair share.", labelSocket)
	socketBudgetEvictions = family("zmqguard_socket_budget_evictions_total", Counter, "{connection}",
		"Connections closed as the largest holder of a spent MemoryBudget.", labelSocket)
	socketConnsEvictedBy = family("zmqguard_socket_connection_evictions_total", Counter, "{connection}",
		"Connections the bound endpoints closed by the Guard.MaxConns rule, by reason: idle (idle or never "+
			"productive, closed first), over_share (its host held more than its fair share), reserve (for a "+
			"Guard.Reserve network's slot).", labelSocket, labelReason)

	// Guarded listeners (zmtpguard.Listener, zmtpguard.RegisterTransport's stats).
	zmtpAccepted = family("zmqguard_zmtp_connections_accepted_total", Counter, "{connection}",
		"Connections taken from the OS listener, refused ones included.", labelSocket)
	zmtpHandshakes = family("zmqguard_zmtp_handshakes_total", Counter, "{handshake}",
		"Connections whose guarded ZMTP handshake completed.", labelSocket)
	zmtpAcceptErrors = family("zmqguard_zmtp_accept_errors_total", Counter, "{error}",
		"Failed accepts.", labelSocket)
	zmtpRefused = family("zmqguard_zmtp_refused_total", Counter, "{refusal}",
		"Connections refused or closed by the stream guard, by reason.", labelSocket, labelReason)
	zmtpEvicted = family("zmqguard_zmtp_evicted_handshakes_total", Counter, "{handshake}",
		"Pending handshakes aborted to admit a newer connection.", labelSocket)
	zmtpConnsEvicted = family("zmqguard_zmtp_evicted_connections_total", Counter, "{connection}",
		"Open connections closed to admit a host under its fair share of a full MaxConns.", labelSocket)
	zmtpConnsEvictedBy = family("zmqguard_zmtp_connection_evictions_total", Counter, "{connection}",
		"Open connections closed by the MaxConns rule, by reason: idle (idle or never productive, closed first), "+
			"over_share (its host held more than its fair share), reserve (for a Reserve network's slot).",
		labelSocket, labelReason)
	zmtpOpen = family("zmqguard_zmtp_open_connections", Gauge, "{connection}",
		"Connections counted against the connection cap now.", labelSocket)
	zmtpPending = family("zmqguard_zmtp_pending_handshakes", Gauge, "{handshake}",
		"Handshakes in progress now.", labelSocket)

	// NIXL handshake listeners (handshake.Listener).
	handshakeServed = family("zmqguard_handshake_requests_served_total", Counter, "{request}",
		"Handshake requests answered with metadata.", labelSocket)
	handshakeErrorReplies = family("zmqguard_handshake_error_replies_total", Counter, "{request}",
		"Explicit error replies sent.", labelSocket)

	// The DP coordinator (coordinator.Coordinator).
	coordEngines = family("zmqguard_coordinator_engines", Gauge, "{engine}",
		"Engines the coordinator tracks.")
	coordWave = family("zmqguard_coordinator_wave", Gauge, "{wave}",
		"Current request wave number.")
	coordRunning = family("zmqguard_coordinator_running", Gauge, "", // not "1": exporters would add _ratio
		"1 while a wave is running, else 0.")
	coordStarted = family("zmqguard_coordinator_started", Gauge, "",
		"1 once start-up (every engine subscribed) is over, else 0.")
	coordStatsPublished = family("zmqguard_coordinator_stats_published_total", Counter, "{message}",
		"Stats publications sent to the front-ends.")
	coordWavePublished = family("zmqguard_coordinator_wave_published_total", Counter, "{message}",
		"Wave publications sent to the front-ends.")
	coordReadySent = family("zmqguard_coordinator_ready_sent_total", Counter, "{message}",
		"READY broadcasts sent to the engines.")
	coordStartWaveSent = family("zmqguard_coordinator_start_wave_sent_total", Counter, "{message}",
		"START_DP_WAVE broadcasts sent to the engines.")
	coordStatsApplied = family("zmqguard_coordinator_stats_applied_total", Counter, "{message}",
		"Scheduler stats the state machine took.")
	coordStaleStats = family("zmqguard_coordinator_stale_stats_total", Counter, "{message}",
		"Stale scheduler stats ignored.")
	coordResizes = family("zmqguard_coordinator_resizes_total", Counter, "{message}",
		"SCALE_ELASTIC_EP notices applied.")
	coordBackUnsubscribed = family("zmqguard_coordinator_back_unsubscribed_total", Counter, "{message}",
		"Unsubscriptions received on the back publish socket.")
	coordStateDropped = family("zmqguard_coordinator_state_dropped_messages_total", Counter, "{message}",
		"The part of a socket's loop drops refused by the state machine, by reason.", labelSocket, labelReason)

	// Source sets (a subscriber following many publishers, an output
	// receiver with one source per engine).
	sourceReceived = family("zmqguard_source_messages_received_total", Counter, "{message}",
		"Messages received from the source.", labelLoop, labelSource)
	sourceDropped = family("zmqguard_source_messages_dropped_total", Counter, "{message}",
		"Messages from the source dropped, by reason.", labelLoop, labelSource, labelReason)
	sourceConnected = family("zmqguard_source_connected", Gauge, "{source}",
		"Sources connected now (0 or 1 per named source; a count for \"other\").", labelLoop, labelSource)
	sourceCount = family("zmqguard_sources", Gauge, "{source}",
		"Sources in the set, folded ones included.", labelLoop)
	sourcesFolded = family("zmqguard_sources_folded", Gauge, "{source}",
		"Sources counted under source=\"other\" because the label cap was reached.", labelLoop)

	// Engine output receivers (outputs.Receiver), under loop=name; their
	// per-engine counters are the source families.
	outputsClaimsRefused = family("zmqguard_outputs_claims_refused_total", Counter, "{message}",
		"Valid messages dropped because their engine index is held by another connection.", labelLoop)
	outputsEngineDead = family("zmqguard_outputs_engine_dead_total", Counter, "{message}",
		"ENGINE_CORE_DEAD sentinels from connections that hold an engine index.", labelLoop)
	outputsUnattributedDead = family("zmqguard_outputs_unattributed_dead_total", Counter, "{message}",
		"ENGINE_CORE_DEAD sentinels from connections that hold no engine index (dropped).", labelLoop)
	outputsQueuedBytes = &Family{Name: "zmqguard_outputs_queued_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes of valid messages waiting for their handlers now.", Labels: []string{labelLoop}}
	outputsHolds = family("zmqguard_outputs_holds_total", Counter, "{hold}",
		"Times a connection's reader was held because its queue reached ConnQueueBytes.", labelLoop)
	outputsQueueWaits = family("zmqguard_outputs_queue_waits_total", Counter, "{wait}",
		"Times the receive loop waited because all queues held QueueBytes.", labelLoop)

	// KV-event subscribers (kvevents.Subscriber), under loop=name, summed
	// over its sources; their per-source counters are the source families.
	kveventsResets = family("zmqguard_kvevents_resets_total", Counter, "{reset}",
		"Publisher runs found new, by reason: seq_back (a sequence number not above the last), digest (a continuity "+
			"proof found another run at the kept seq), jump (a sequence number over 2^32 past the last, a first one "+
			"included), resync (Subscriber.Resync).", labelLoop, labelReason)
	kveventsProven = family("zmqguard_kvevents_continuity_proven_total", Counter, "{connection}",
		"New connections whose continuity with the last delivered batch was proven (same seq and digest, replayed).",
		labelLoop)
	kveventsUnproven = family("zmqguard_kvevents_continuity_unproven_total", Counter, "{connection}",
		"New connections whose continuity could not be proven (reported lost: the source's entries uncertain).",
		labelLoop)
	kveventsUnknownFields = family("zmqguard_kvevents_unknown_fields_total", Counter, "{field}",
		"Fields the decoder read past in delivered batches because this release does not know them "+
			"(elements or keys a later engine release added).", labelLoop)
	kveventsDeparted = family("zmqguard_kvevents_departed_total", Counter, "{engine}",
		"Engines that left the fleet (kvevents.UpdateDeparted): removed, or retired after Config.EngineTTL "+
			"without a connection (issue 36).", labelLoop)
	kveventsFanInConns = family("zmqguard_kvevents_fan_in_connections", Gauge, "{connection}",
		"Open connections to the subscriber's fan-in endpoints (Source.FanIn).", labelLoop)
	kveventsFanInTopics = family("zmqguard_kvevents_fan_in_topics", Gauge, "{topic}",
		"Topics (engines) the fan-in endpoints follow now.", labelLoop)
	kveventsFanInRefused = family("zmqguard_kvevents_fan_in_refused_total", Counter, "{message}",
		"Fan-in messages refused, by reason: topic_held (another live connection holds the topic), address "+
			"(the topic names another IP address than the peer's), bad_topic, topic_limit, conn_topic_limit "+
			"(Config.FanInMaxTopics, FanInMaxTopicsPerConn), conn_gone (its connection had closed).",
		labelLoop, labelReason)
)

// fanInReasons are the reason label values of kveventsFanInRefused, in
// the order of kvevents.SourceStats.FanIn.RefusedBy's fields.
var fanInReasons = []string{"topic_held", "address", "bad_topic", "topic_limit", "conn_topic_limit", "conn_gone"}

// The reason label values of the eviction and reset families (their Stats
// fields' names).
var (
	evictionReasons = []string{"idle", "over_share", "reserve"}
	kvResetReasons  = []string{"seq_back", "digest", "jump", "resync"}
)

// families lists every family, in exposition order.
var families = []*Family{
	loopReceived, loopDelivered, loopDropped, loopHandlerErrors, loopLastDrop,
	socketReceived, socketSent, socketDroppedHWM, socketDroppedUnroutable, socketDroppedFiltered,
	socketRefused, socketPeers, socketConnects, socketDisconnects, socketAcceptErrors,
	socketHeartbeatTimeouts, socketHandovers, socketSendQueueBytes, socketSendQueueMessages, socketReceiveQueueBytes,
	socketZMTP30Peers, socketDroppedFairShare, socketSendEvictions, socketBudgetBytes, socketBudgetStalls,
	socketBudgetEvictions, socketConnsEvictedBy,
	zmtpAccepted, zmtpHandshakes, zmtpAcceptErrors, zmtpRefused, zmtpEvicted, zmtpConnsEvicted, zmtpConnsEvictedBy,
	zmtpOpen, zmtpPending,
	handshakeServed, handshakeErrorReplies,
	coordEngines, coordWave, coordRunning, coordStarted, coordStatsPublished, coordWavePublished,
	coordReadySent, coordStartWaveSent, coordStatsApplied, coordStaleStats, coordResizes,
	coordBackUnsubscribed, coordStateDropped,
	sourceReceived, sourceDropped, sourceConnected, sourceCount, sourcesFolded,
	outputsClaimsRefused, outputsEngineDead, outputsUnattributedDead, outputsQueuedBytes, outputsHolds,
	outputsQueueWaits,
	kveventsResets, kveventsProven, kveventsUnproven, kveventsUnknownFields,
	kveventsDeparted, kveventsFanInConns, kveventsFanInTopics, kveventsFanInRefused,
	// The kvindex families (kvindex.go).
	kvindexBatches, kvindexStored, kvindexRemoved, kvindexCleared, kvindexInactive, kvindexResets,
	kvindexLostRanges, kvindexNotIndexed, kvindexEntriesAdded, kvindexEntriesRemoved, kvindexUnknownRemovals,
	kvindexScores, kvindexUnknownModels, kvindexErrors, kvindexBackendLosses, kvindexDeparted, kvindexSnapshots, kvindexSnapshotErrors,
	kvindexSnapshotRefused, kvindexEntries, kvindexBlocks, kvindexEngines, kvindexCapacity, kvindexBytes,
}

// Families returns every metric family a [Set] can report, in a fixed
// order. The slice is a copy; the families are shared and must not be
// modified.
func Families() []*Family {
	return append([]*Family(nil), families...)
}
