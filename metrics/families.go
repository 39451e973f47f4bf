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
// name ever appears.
const (
	LabelSocket = "socket" // a socket, listener or handshake listener name
	LabelReason = "reason" // a decodeguard.Reason name such as "decode"
	LabelLoop   = "loop"   // a receive loop (or source set) name
	LabelSource = "source" // one source of a source set, or OtherSource
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
// package's API: dashboards and alerts refer to them.
var (
	// Loops (loop.Loop, and the loops inside the references).
	LoopReceived = family("zmqguard_loop_messages_received_total", Counter, "{message}",
		"Messages the receive loop took from its socket.", LabelLoop)
	LoopDelivered = family("zmqguard_loop_messages_delivered_total", Counter, "{message}",
		"Messages that passed every check and reached the handler.", LabelLoop)
	LoopDropped = family("zmqguard_loop_messages_dropped_total", Counter, "{message}",
		"Messages the receive loop dropped, by reason.", LabelLoop, LabelReason)
	LoopHandlerErrors = family("zmqguard_loop_handler_errors_total", Counter, "{error}",
		"Unclassified handler errors and recovered handler panics.", LabelLoop)
	LoopLastDrop = &Family{Name: "zmqguard_loop_last_drop_timestamp_seconds", Kind: Gauge, Unit: "s", Float: true,
		Help: "Unix time of the loop's latest drop (0: none yet).", Labels: []string{LabelLoop}}

	// Sockets (socket.Socket).
	SocketReceived = family("zmqguard_socket_messages_received_total", Counter, "{message}",
		"Messages the socket delivered to its reader.", LabelSocket)
	SocketSent = family("zmqguard_socket_messages_sent_total", Counter, "{message}",
		"Messages handed to a peer's send queue (one per peer for fan-out).", LabelSocket)
	SocketDroppedHWM = family("zmqguard_socket_hwm_dropped_messages_total", Counter, "{message}",
		"Messages dropped because a peer's send queue was full.", LabelSocket)
	SocketDroppedUnroutable = family("zmqguard_socket_unroutable_dropped_messages_total", Counter, "{message}",
		"ROUTER messages dropped because their identity was not connected.", LabelSocket)
	SocketDroppedFiltered = family("zmqguard_socket_filtered_dropped_messages_total", Counter, "{message}",
		"Received messages dropped by the socket's own rules (REQ out of turn, SUB unsubscribed).", LabelSocket)
	SocketViolations = family("zmqguard_socket_violations_total", Counter, "{violation}",
		"Connections and messages the socket refused, by reason.", LabelSocket, LabelReason)
	SocketPeers = family("zmqguard_socket_peers", Gauge, "{peer}",
		"Peers connected now.", LabelSocket)
	SocketConnects = family("zmqguard_socket_connects_total", Counter, "{peer}",
		"Established peers that joined.", LabelSocket)
	SocketDisconnects = family("zmqguard_socket_disconnects_total", Counter, "{peer}",
		"Established peers that left.", LabelSocket)
	SocketAcceptErrors = family("zmqguard_socket_accept_errors_total", Counter, "{error}",
		"Failed accepts on the socket's bound endpoints.", LabelSocket)
	SocketHeartbeatTimeouts = family("zmqguard_socket_heartbeat_timeouts_total", Counter, "{peer}",
		"Peers disconnected because they stayed silent past the heartbeat timeout or their announced TTL.", LabelSocket)
	SocketHandovers = family("zmqguard_socket_handovers_total", Counter, "{peer}",
		"ROUTER identities taken over by a new connection (RouterHandover).", LabelSocket)
	SocketSendQueueBytes = &Family{Name: "zmqguard_socket_send_queue_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes waiting in the socket's per-peer send queues.", Labels: []string{LabelSocket}}
	SocketSendQueueMessages = family("zmqguard_socket_send_queue_messages", Gauge, "{message}",
		"Messages waiting in the socket's per-peer send queues.", LabelSocket)
	SocketReceiveQueueBytes = &Family{Name: "zmqguard_socket_receive_queue_bytes", Kind: Gauge, Unit: "By",
		Help: "Bytes of received messages waiting for Recv.", Labels: []string{LabelSocket}}

	// Guarded listeners (zmtpguard.Listener, zmtpguard.RegisterTransport's stats).
	ZMTPAccepted = family("zmqguard_zmtp_connections_accepted_total", Counter, "{connection}",
		"Connections taken from the OS listener, refused ones included.", LabelSocket)
	ZMTPHandshakes = family("zmqguard_zmtp_handshakes_total", Counter, "{handshake}",
		"Connections whose guarded ZMTP handshake completed.", LabelSocket)
	ZMTPAcceptErrors = family("zmqguard_zmtp_accept_errors_total", Counter, "{error}",
		"Failed accepts.", LabelSocket)
	ZMTPViolations = family("zmqguard_zmtp_violations_total", Counter, "{violation}",
		"Connections refused or closed by the stream guard, by reason.", LabelSocket, LabelReason)
	ZMTPEvicted = family("zmqguard_zmtp_evicted_handshakes_total", Counter, "{handshake}",
		"Pending handshakes aborted to admit a newer connection.", LabelSocket)
	ZMTPOpen = family("zmqguard_zmtp_open_connections", Gauge, "{connection}",
		"Connections counted against the connection cap now.", LabelSocket)
	ZMTPPending = family("zmqguard_zmtp_pending_handshakes", Gauge, "{handshake}",
		"Handshakes in progress now.", LabelSocket)

	// NIXL handshake listeners (handshake.Listener).
	HandshakeServed = family("zmqguard_handshake_requests_served_total", Counter, "{request}",
		"Handshake requests answered with metadata.", LabelSocket)
	HandshakeErrorReplies = family("zmqguard_handshake_error_replies_total", Counter, "{request}",
		"Explicit error replies sent.", LabelSocket)

	// The DP coordinator (coordinator.Coordinator).
	CoordEngines = family("zmqguard_coordinator_engines", Gauge, "{engine}",
		"Engines the coordinator tracks.")
	CoordWave = family("zmqguard_coordinator_wave", Gauge, "{wave}",
		"Current request wave number.")
	CoordRunning = family("zmqguard_coordinator_running", Gauge, "", // not "1": exporters would add _ratio
		"1 while a wave is running, else 0.")
	CoordStarted = family("zmqguard_coordinator_started", Gauge, "",
		"1 once start-up (every engine subscribed) is over, else 0.")
	CoordStatsPublished = family("zmqguard_coordinator_stats_published_total", Counter, "{message}",
		"Stats publications sent to the front-ends.")
	CoordWavePublished = family("zmqguard_coordinator_wave_published_total", Counter, "{message}",
		"Wave publications sent to the front-ends.")
	CoordReadySent = family("zmqguard_coordinator_ready_sent_total", Counter, "{message}",
		"READY broadcasts sent to the engines.")
	CoordStartWaveSent = family("zmqguard_coordinator_start_wave_sent_total", Counter, "{message}",
		"START_DP_WAVE broadcasts sent to the engines.")
	CoordStatsApplied = family("zmqguard_coordinator_stats_applied_total", Counter, "{message}",
		"Scheduler stats the state machine took.")
	CoordStaleStats = family("zmqguard_coordinator_stale_stats_total", Counter, "{message}",
		"Stale scheduler stats ignored.")
	CoordResizes = family("zmqguard_coordinator_resizes_total", Counter, "{message}",
		"SCALE_ELASTIC_EP notices applied.")
	CoordBackUnsubscribed = family("zmqguard_coordinator_back_unsubscribed_total", Counter, "{message}",
		"Unsubscriptions received on the back publish socket.")
	CoordStateDropped = family("zmqguard_coordinator_state_dropped_messages_total", Counter, "{message}",
		"The part of a socket's loop drops refused by the state machine, by reason.", LabelSocket, LabelReason)

	// Source sets (a subscriber following many publishers, an output
	// receiver with one source per engine).
	SourceReceived = family("zmqguard_source_messages_received_total", Counter, "{message}",
		"Messages received from the source.", LabelLoop, LabelSource)
	SourceDropped = family("zmqguard_source_messages_dropped_total", Counter, "{message}",
		"Messages from the source dropped, by reason.", LabelLoop, LabelSource, LabelReason)
	SourceConnected = family("zmqguard_source_connected", Gauge, "{source}",
		"Sources connected now (0 or 1 per named source; a count for \"other\").", LabelLoop, LabelSource)
	Sources = family("zmqguard_sources", Gauge, "{source}",
		"Sources in the set, folded ones included.", LabelLoop)
	SourcesFolded = family("zmqguard_sources_folded", Gauge, "{source}",
		"Sources counted under source=\"other\" because the label cap was reached.", LabelLoop)
)

// families lists every family, in exposition order.
var families = []*Family{
	LoopReceived, LoopDelivered, LoopDropped, LoopHandlerErrors, LoopLastDrop,
	SocketReceived, SocketSent, SocketDroppedHWM, SocketDroppedUnroutable, SocketDroppedFiltered,
	SocketViolations, SocketPeers, SocketConnects, SocketDisconnects, SocketAcceptErrors,
	SocketHeartbeatTimeouts, SocketHandovers, SocketSendQueueBytes, SocketSendQueueMessages, SocketReceiveQueueBytes,
	ZMTPAccepted, ZMTPHandshakes, ZMTPAcceptErrors, ZMTPViolations, ZMTPEvicted, ZMTPOpen, ZMTPPending,
	HandshakeServed, HandshakeErrorReplies,
	CoordEngines, CoordWave, CoordRunning, CoordStarted, CoordStatsPublished, CoordWavePublished,
	CoordReadySent, CoordStartWaveSent, CoordStatsApplied, CoordStaleStats, CoordResizes,
	CoordBackUnsubscribed, CoordStateDropped,
	SourceReceived, SourceDropped, SourceConnected, Sources, SourcesFolded,
}

// The kvindex families (kvindex.go) follow the others.
func init() { families = append(families, kvindexFamilies...) }

// Families returns every metric family a [Set] can report, in a fixed
// order. The slice is a copy; the families are shared and must not be
// modified.
func Families() []*Family {
	return append([]*Family(nil), families...)
}
