package socket

import "github.com/zmqguard/zmqguard/decodeguard"

// Stats is a snapshot of a Socket's counters. It marshals to JSON as an
// object of named counters (Refused keyed by reason name).
type Stats struct {
	// Received counts messages delivered by Recv (subscriptions included
	// for XPUB).
	Received uint64 `json:"received"`
	// Sent counts messages handed to a peer's queue (one per peer for XPUB
	// and XSUB fan-out).
	Sent uint64 `json:"sent"`
	// DroppedHWM counts messages dropped because a peer's queue was at its
	// HWM (ROUTER, XPUB, XSUB fan-out).
	DroppedHWM uint64 `json:"dropped_hwm"`
	// DroppedUnroutable counts ROUTER messages dropped because the identity
	// was not connected (with RouterDropUnroutable).
	DroppedUnroutable uint64 `json:"dropped_unroutable"`
	// DroppedFiltered counts received messages dropped by the socket's own
	// rules: REQ replies out of turn or from the wrong peer, SUB messages
	// matching no subscription.
	DroppedFiltered uint64 `json:"dropped_filtered"`
	// Refused counts refused connections and messages by reason:
	// handshake failures, stream violations, oversize messages, bad REQ
	// envelopes (ReasonEnvelope), duplicate ROUTER identities and caps
	// (ReasonPolicy).
	Refused decodeguard.Counts `json:"refused"`
	// Peers is the number of currently connected peers.
	Peers int `json:"peers"`
	// ZMTP30Peers is how many of them announced ZMTP 3.0 in their greeting
	// (go-zeromq/zmq4 v0.17 does): they are sent no PING and are not timed
	// out by heartbeat; TCP keepalive watches them (see Liveness in the
	// package doc).
	ZMTP30Peers int `json:"zmtp30_peers"`
	// Connects and Disconnects count established peers joining and leaving.
	Connects    uint64 `json:"connects"`
	Disconnects uint64 `json:"disconnects"`
	// AcceptErrors counts failed accepts on the socket's bound endpoints
	// (EMFILE and the like), each followed by a back-off. They stay counted
	// after Close.
	AcceptErrors uint64 `json:"accept_errors"`
	// HeartbeatTimeouts counts peers disconnected because they stayed
	// silent past the heartbeat timeout or their announced TTL.
	HeartbeatTimeouts uint64 `json:"heartbeat_timeouts"`
	// PingsSent and PongsReceived count ZMTP 3.1 PINGs this socket sent and
	// PONGs it received.
	PingsSent     uint64 `json:"pings_sent"`
	PongsReceived uint64 `json:"pongs_received"`
	// Handovers counts ROUTER identities taken over by a new connection
	// (Options.RouterHandover); IdentityRefusals counts connections refused
	// because their identity was connected already (also counted in
	// Refused as ReasonPolicy).
	Handovers        uint64 `json:"handovers"`
	IdentityRefusals uint64 `json:"identity_refusals"`
	// DroppedBytes counts messages dropped because a send queue's byte
	// bound (SendQueueBytes or SendTotalBytes) was reached; they are
	// included in DroppedHWM as well.
	DroppedBytes uint64 `json:"dropped_bytes"`
	// DroppedFairShare counts the messages of DroppedBytes refused because
	// their peer's queue was past its fair share of SendTotalBytes
	// (SendTotalBytes divided by the connected peers; see
	// Options.SendTotalBytes).
	DroppedFairShare uint64 `json:"dropped_fair_share"`
	// SendEvictions counts peers disconnected because SendTotalBytes was
	// spent while their queue held more than its fair share and a peer
	// within its share needed room (also in Refused as ReasonPolicy).
	SendEvictions uint64 `json:"send_evictions"`
	// QueuedSendBytes and QueuedRecvBytes are the bytes waiting in send
	// queues and for Recv when the snapshot was taken.
	QueuedSendBytes int64 `json:"queued_send_bytes"`
	QueuedRecvBytes int64 `json:"queued_recv_bytes"`
	// QueuedSendMessages is the number of messages waiting in the peers'
	// send queues when the snapshot was taken (control messages excluded).
	QueuedSendMessages int64 `json:"queued_send_messages"`
	// BudgetBytes is the bytes charged to MemoryBudget when the snapshot
	// was taken (unfinished message bodies and messages waiting for Recv).
	BudgetBytes int64 `json:"budget_bytes"`
	// BudgetStalls counts reads paused because MemoryBudget was spent and
	// the connection held more than its fair share; BudgetEvictions counts
	// connections closed as the largest holder (also in Refused as
	// ReasonPolicy).
	BudgetStalls    uint64 `json:"budget_stalls"`
	BudgetEvictions uint64 `json:"budget_evictions"`
	// Topics and TopicBytes are an XPUB's subscriptions held now (one per
	// subscriber and topic) and their bytes; TopicRefusals counts
	// subscriptions refused by the per-subscriber or socket-wide limits
	// (also in Refused as ReasonPolicy).
	Topics        int    `json:"topics"`
	TopicBytes    int64  `json:"topic_bytes"`
	TopicRefusals uint64 `json:"topic_refusals"`
	// Reclaims counts the collections this socket asked the runtime for
	// after departed connections released ReclaimBytes (see
	// Options.ReclaimBytes), including one another socket had asked for
	// already when this socket's bytes passed the threshold (it takes
	// them too).
	Reclaims uint64 `json:"reclaims"`
	// ConnsEvicted counts connections the bound endpoints closed to admit
	// another when Guard.MaxConns was reached (see zmtpguard's
	// Config.MaxConns for the rule), also in Refused as ReasonPolicy;
	// EvictedIdle, EvictedOverShare and EvictedForReserve divide it by
	// reason (an idle connection, one of a host over its fair share, one
	// closed for a Guard.Reserve network). They stay counted after Close.
	ConnsEvicted      uint64 `json:"conns_evicted"`
	EvictedIdle       uint64 `json:"evicted_idle"`
	EvictedOverShare  uint64 `json:"evicted_over_share"`
	EvictedForReserve uint64 `json:"evicted_for_reserve"`
}
