package socket

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Defaults for [Options].
const (
	// DefaultHWM is the default per-peer send queue bound, in messages.
	DefaultHWM = 1000
	// DefaultReconnectMin is the first delay before a dialer reconnects.
	DefaultReconnectMin = 100 * time.Millisecond
	// DefaultReconnectMax caps the dialer's doubling reconnect delay.
	DefaultReconnectMax = 5 * time.Second
	// DefaultReadBufferSize is the largest per-connection read buffer a
	// Socket asks zmtpguard for when Options.Guard.ReadBufferSize is zero:
	// large enough that one read syscall brings in thousands of small
	// messages or dozens of 4 KiB ones. A connection starts with 4 KiB and
	// grows its buffer only while a peer keeps it full (see
	// zmtpguard.Config.ReadBufferSize), so an idle peer costs a few KiB.
	DefaultReadBufferSize = 256 << 10
	// DefaultWriteBufferSize is the per-connection write buffer a Socket
	// asks zmtpguard for when Options.Guard.WriteBufferSize is zero.
	DefaultWriteBufferSize = 64 << 10

	// DefaultHeartbeatInterval is how long a connection to a ZMTP 3.1 peer
	// may be silent (no message received) before the socket sends it a PING.
	DefaultHeartbeatInterval = 2 * time.Second
	// DefaultHeartbeatTimeout is how long after that PING a peer that still
	// sent nothing is disconnected with ErrHeartbeatTimeout.
	DefaultHeartbeatTimeout = 6 * time.Second
	// DefaultReconnectJitter spreads each reconnect delay by ±20 % (see
	// Options.ReconnectJitter), as grpc-go does.
	DefaultReconnectJitter = 0.2
	// DefaultSendQueueBytes bounds each peer's send queue in bytes, beside
	// the HWM in messages (1000 messages of 1 MiB would be 1 GiB for one
	// peer).
	DefaultSendQueueBytes = 4 << 20
	// DefaultXPubWriteTimeout is an XPUB's WriteTimeout when
	// Options.WriteTimeout is zero: a subscriber whose connection accepts
	// no bytes for that long while data waits is disconnected.
	DefaultXPubWriteTimeout = 10 * time.Second
	// DefaultSendTotalBytes bounds the bytes queued for all peers of one
	// socket together: a 1 MiB-message socket with 1,000 peers holds at
	// most 256 MiB in its send queues, not 1,000 × HWM messages.
	DefaultSendTotalBytes = 256 << 20
	// DefaultRecvQueueBytes bounds the bytes of received messages waiting
	// for Recv, across all peers of one socket.
	DefaultRecvQueueBytes = 64 << 20
	// DefaultMemoryBudget bounds, per socket, the bytes of received data
	// in memory: bodies of messages still arriving and messages waiting
	// for Recv (see Options.MemoryBudget). With 1,000 peers each sending a
	// 1 MiB message at once, the socket holds at most twice this, not
	// 1 GiB.
	DefaultMemoryBudget = 64 << 20
	// DefaultXPubMaxTopics and DefaultXPubMaxTopicBytes bound an XPUB's
	// subscriptions across all subscribers (see Options.XPubMaxTopics).
	DefaultXPubMaxTopics     = 100_000
	DefaultXPubMaxTopicBytes = 16 << 20
	// DefaultReclaimBytes: once departed connections have released this
	// many bytes of buffers, the socket asks the runtime for a collection
	// (see Options.ReclaimBytes).
	DefaultReclaimBytes = 8 << 20
	// maxHeartbeatTTL is the largest TTL a PING can announce (16 bits of
	// deciseconds).
	maxHeartbeatTTL = 65535 * 100 * time.Millisecond
)

// DefaultTCPKeepAlive is the TCP keepalive applied to accepted and dialed
// TCP connections when Options.TCPKeepAlive is the zero value: probes after
// 15 s idle, every 15 s, 9 unanswered probes end the connection (Go's own
// defaults, made explicit).
var DefaultTCPKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// Options configures a Socket. The zero value is usable: the constructors
// fill every zero field with its default, so Options{} and
// [DefaultOptions] (which returns those defaults filled in, to read or
// change) configure the same socket, and a partly filled Options works too.
type Options struct {
	// Guard holds the transport limits every connection is checked against
	// (message size, frame count, handshake deadline, connection caps,
	// source allowlist) and the security mechanism: Guard.Curve set selects
	// CURVE encryption with key admission for every connection of the socket
	// (nil is NULL; see zmtpguard.CurveConfig). Its OnViolation hook, if set,
	// is called in addition to the Socket's own accounting.
	Guard zmtpguard.Config
	// HWM bounds each peer's send queue, in messages. What happens when a
	// queue is full depends on the socket type (see the package doc).
	// Default 1000.
	HWM int
	// Identity is the routing identity announced in READY on dialed
	// connections (at most 255 bytes); a ROUTER peer uses it to address this
	// socket. Connections accepted by Bind announce no identity
	// (zmtpguard.Listener handshakes without one).
	Identity []byte
	// ReconnectMin is the delay before the first reconnect attempt of a
	// dialed endpoint; the delay doubles after each failure up to
	// ReconnectMax and resets after a successful handshake. Defaults 100 ms
	// and 5 s.
	ReconnectMin time.Duration
	// ReconnectMax caps the reconnect delay.
	ReconnectMax time.Duration
	// ReconnectJitter spreads reconnect delays so that many dialers losing
	// the same server do not return in lock-step. Each wait is
	//
	//	wait = min(ReconnectMax, d × (1 + J × (2u − 1)))
	//
	// where d is the current back-off (ReconnectMin doubling to
	// ReconnectMax), J the jitter and u uniform in [0, 1): with the default
	// J = 0.2, a wait lies in [0.8 d, 1.2 d] (capped). 0 means the default;
	// a negative value turns jitter off; more than 1 is refused by Verify.
	ReconnectJitter float64
	// HeartbeatInterval: a connection that has received nothing for this
	// long is sent a ZMTP 3.1 PING (RFC 37), with HeartbeatTTL and a context
	// the peer echoes in its PONG. Any complete message received (data,
	// PING, PONG, subscription) counts as the peer being alive, as in
	// libzmq. Default 2 s; negative turns
	// heartbeats off (the peer's own PINGs are still answered, and a TTL
	// its PINGs announce is still enforced). Heartbeats (and
	// HeartbeatTimeout) apply only to peers whose greeting announces ZMTP
	// 3.1 or later; a 3.0 peer such as go-zeromq/zmq4 never gets a PING
	// (see Liveness in the package doc).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout: a peer that sends nothing for HeartbeatTimeout after
	// our PING (that is, silent for HeartbeatInterval + HeartbeatTimeout) is
	// disconnected; the cause matches ErrHeartbeatTimeout (errors.Is), it is
	// counted in Stats.HeartbeatTimeouts and a dialer reconnects. A peer
	// whose own PINGs announce a TTL is also disconnected once it is silent
	// for that TTL. While the socket itself stops reading a peer (the
	// application does not call Recv and the receive queue is full) the
	// peer is not timed out, and PINGs keep going out. Default 6 s.
	HeartbeatTimeout time.Duration
	// HeartbeatTTL is announced in our PINGs: the peer may drop us if it
	// hears nothing from us for that long (libzmq's ZMQ_HEARTBEAT_TTL).
	// Sent in deciseconds (rounded up), at most 6553.5 s; 0 (the default)
	// announces none. It must exceed HeartbeatInterval. With a TTL, a PING
	// also goes out after every interval in which we sent nothing, even
	// while the peer talks, so that the peer's TTL never expires on a live
	// socket.
	HeartbeatTTL time.Duration
	// TCPKeepAlive is set on every accepted and dialed TCP connection. The
	// zero value means DefaultTCPKeepAlive; Enable false with any other
	// field set (for example Idle: -1) turns keepalive off. Fields follow
	// net.KeepAliveConfig (0 = system default, -1 = leave unset).
	TCPKeepAlive net.KeepAliveConfig
	// RouterHandover, for a ROUTER, lets a new connection announcing an
	// identity that is already connected take it over: the old connection
	// is closed (cause ErrHandover) and counted in Stats.Handovers, as
	// libzmq's ZMQ_ROUTER_HANDOVER. Without it (the default) the new
	// connection is refused and counted in Stats.IdentityRefusals; a
	// restarted peer then gets its identity back once the old connection
	// times out (heartbeats) or closes.
	RouterHandover bool
	// SendQueueBytes bounds each peer's send queue in bytes, beside HWM
	// (a queue always takes one message, whatever its size, when empty).
	// A full queue is treated exactly like one at its HWM. Default 4 MiB;
	// negative means no byte bound.
	SendQueueBytes int
	// SendTotalBytes bounds the bytes queued for all peers together
	// (default 256 MiB; negative means no bound). A message that does not
	// fit is treated as if its peer's queue were full. It is shared fairly:
	// a peer whose queue would pass SendTotalBytes divided by the connected
	// peers (its fair share) is refused the message, whatever room is left,
	// exactly as if its queue were full (a drop for that peer with XPUB,
	// ROUTER and XSUB; the next peer with PUSH and DEALER), counted in
	// Stats.DroppedFairShare; a queue always takes one message when empty.
	// So peers that never read hold at most their shares together, and a
	// peer within its share is never refused for the total: when the
	// total is spent by peers over their shares (shares shrink as peers
	// join), the one holding the most is disconnected (ReasonPolicy,
	// Stats.SendEvictions) to make room — with XPUB, ROUTER and XSUB,
	// whose full queues drop anyway; PUSH and DEALER never throw a queue
	// away, they use another peer or wait.
	SendTotalBytes int64
	// RecvQueueBytes bounds the bytes of received messages that wait for
	// Recv, across all peers (default 64 MiB; negative means no bound).
	// Once reached, readers stop reading their connections (TCP flow
	// control slows the peers) until Recv catches up; each connection may
	// still hold the one message it was reading. The count includes the
	// batch a reader assembles, and is exact, not sampled.
	RecvQueueBytes int64
	// MemoryBudget bounds the bytes of received data a socket holds in
	// memory: the bodies of messages still arriving (charged as a
	// connection reads a body that is not yet in its read buffer) and the
	// messages waiting for Recv, across all peers. It is shared fairly:
	// while it is spent, a connection holding more than its fair share
	// (MemoryBudget divided by the connections holding bytes) stops reading
	// (TCP flow control slows its peer; counted in Stats.BudgetStalls), and
	// a connection that waited BudgetWait closes the connection holding the
	// most bytes, if that one holds at least its fair share (a ReasonPolicy
	// violation, counted in Stats.BudgetEvictions). A connection below its
	// fair share is never closed for the budget. Connections within their
	// fair share may pass MemoryBudget, never twice it. Default 64 MiB
	// (DefaultMemoryBudget) or twice Guard.MaxMessageSize if that is more;
	// negative means no budget (each connection then holds up to
	// MaxMessageSize). A budget set below Guard.MaxMessageSize is refused
	// by Verify: a lone max-size message would be evicted. A reader
	// assembling a batch of messages charges the budget up to 4 KiB ahead
	// (so it touches the shared counters once per 4 KiB, not once per
	// small message) and gives back the unused part when it hands the
	// batch over: the budget may over-count by that much per reading
	// connection, never under-count.
	//
	// The socket's memory under attack is then bounded by about
	// 2 × MemoryBudget (receiving) + SendTotalBytes (send queues; kept
	// separate so that subscribers that never read cannot stop the socket
	// from receiving) + per connection its read buffer
	// (Guard.ReadBufferSize, grown only while the peer keeps it full,
	// given back when it is idle) and
	// write buffer (Guard.WriteBufferSize). A message body must also
	// arrive within Guard.BodyTimeout (default 10 s) of its first header.
	MemoryBudget int64
	// BudgetWait is how long a connection stalled by MemoryBudget waits
	// before the largest holder is closed. Default 2 s.
	BudgetWait time.Duration
	// XPubMaxTopics and XPubMaxTopicBytes bound an XPUB's subscriptions
	// across all subscribers (counted once per subscriber and topic), beside
	// the per-subscriber MaxTopicsPerPeer and MaxTopicBytesPerPeer. Past
	// them, a new topic is refused (ReasonPolicy, Stats.TopicRefusals) from
	// a subscriber holding at least its fair share (the limit divided by the
	// subscribers), never from one below it: a subscription flood costs the
	// flooding subscriber's own allowance. A departed subscriber's topics
	// are freed at once. Defaults 100,000 topics and 16 MiB; negative means
	// no socket-wide bound.
	XPubMaxTopics     int
	XPubMaxTopicBytes int64
	// ReclaimBytes: once connections that left have released at least this
	// many bytes of buffers (read buffers, partly received messages; and
	// grown buffers that idle connections gave back), the
	// socket asks the Go runtime for a collection (runtime.GC, in the
	// background, 200 ms after the threshold is passed so that one
	// collection takes a burst of departures, at most once a second across
	// the process), so that the
	// heap returns to its baseline within seconds of an attack ending
	// instead of at the runtime's two-minute forced collection: a process
	// that allocates nothing after the attack never reaches its next GC
	// target. Default 8 MiB; negative never asks.
	ReclaimBytes int64
	// RouterDropUnroutable, for a ROUTER, makes Send to an identity that is
	// not connected drop the message (counted in Stats.DroppedUnroutable)
	// instead of returning an *UnroutableError.
	RouterDropUnroutable bool
	// WriteTimeout, when positive, disconnects a peer whose connection
	// accepts no bytes for that long while data waits to be written (a
	// ReasonPolicy violation; the peer's PINGs do not keep it connected:
	// only bytes it reads do). Zero means the default: DefaultXPubWriteTimeout
	// (10 s) for XPUB, whose subscribers that never read would otherwise
	// hold their share of SendTotalBytes for as long as TCP keeps them;
	// none for the other types, where a slow peer stays connected, its
	// queue fills and the socket type's full-queue policy applies. Negative
	// means none.
	WriteTimeout time.Duration
	// OnEvent, if set, is called for every peer event (connected, handshake
	// failed, rejected, disconnected). It runs on the connection's own
	// goroutine: keep it fast and never block in it (a Send that waits for
	// queue space may wait for this very goroutine). It may call the
	// socket's Stats, Peers, Endpoint and Close: Close from inside it
	// closes the socket at once and finishes in the background without
	// waiting for the callback (see [Socket.Close]). The Guard hooks
	// OnViolation and OnRelease follow the same rules.
	OnEvent func(Event)
	// Logger receives the socket's log lines; nil means slog.Default().
	// Refused connections and closed ones (a reason in Stats.Violations)
	// are warnings, rate-limited by the rules package loop follows too;
	// other peer events are debug lines. Pass slog.New(slog.DiscardHandler)
	// to silence it. Peer bytes never appear raw.
	Logger *slog.Logger
}

// DefaultOptions returns Options with every default filled in.
func DefaultOptions() Options {
	var o Options
	return o.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.HWM == 0 {
		o.HWM = DefaultHWM
	}
	if o.ReconnectMin == 0 {
		o.ReconnectMin = DefaultReconnectMin
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = DefaultReconnectMax
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	if o.ReconnectJitter == 0 {
		o.ReconnectJitter = DefaultReconnectJitter
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.TCPKeepAlive == (net.KeepAliveConfig{}) {
		o.TCPKeepAlive = DefaultTCPKeepAlive
	}
	if o.SendQueueBytes == 0 {
		o.SendQueueBytes = DefaultSendQueueBytes
	}
	if o.SendTotalBytes == 0 {
		o.SendTotalBytes = DefaultSendTotalBytes
	}
	if o.RecvQueueBytes == 0 {
		o.RecvQueueBytes = DefaultRecvQueueBytes
	}
	if o.MemoryBudget == 0 {
		o.MemoryBudget = DefaultMemoryBudget
		if mm := o.Guard.MaxMessageSize; 2*mm > o.MemoryBudget {
			// Room for two max-size messages: a large MaxMessageSize is
			// never undone by the default budget.
			o.MemoryBudget = 2 * mm
		}
	}
	if o.XPubMaxTopics == 0 {
		o.XPubMaxTopics = DefaultXPubMaxTopics
	}
	if o.XPubMaxTopicBytes == 0 {
		o.XPubMaxTopicBytes = DefaultXPubMaxTopicBytes
	}
	if o.ReclaimBytes == 0 {
		o.ReclaimBytes = DefaultReclaimBytes
	}
	g := zmtpguard.DefaultConfig()
	if o.Guard.BodyTimeout == 0 {
		o.Guard.BodyTimeout = g.BodyTimeout
	}
	if o.Guard.ReadBufferSize == 0 {
		o.Guard.ReadBufferSize = DefaultReadBufferSize
	}
	if o.Guard.WriteBufferSize == 0 {
		o.Guard.WriteBufferSize = DefaultWriteBufferSize
	}
	if o.Guard.MaxFrames == 0 {
		o.Guard.MaxFrames = g.MaxFrames
	}
	if o.Guard.MaxMessageSize == 0 {
		o.Guard.MaxMessageSize = g.MaxMessageSize
	}
	if o.Guard.MaxPendingHandshakes == 0 {
		o.Guard.MaxPendingHandshakes = g.MaxPendingHandshakes
	}
	if o.Guard.MaxConns == 0 {
		o.Guard.MaxConns = g.MaxConns
	}
	if o.Guard.HandshakeTimeout == 0 {
		o.Guard.HandshakeTimeout = g.HandshakeTimeout
	}
	if o.Guard.GreetingTimeout == 0 {
		// zmtpguard lowers it to HandshakeTimeout when that is shorter.
		o.Guard.GreetingTimeout = g.GreetingTimeout
	}
	return o
}

// Verify reports whether o is usable: the guard config verifies, no
// negative counts or durations, and an identity of at most 255 bytes.
func (o *Options) Verify() error {
	var errs []error
	if err := o.Guard.Verify(); err != nil {
		errs = append(errs, err)
	}
	if o.HWM < 0 {
		errs = append(errs, fmt.Errorf("socket: HWM must not be negative (got %d)", o.HWM))
	}
	if o.HWM > 1<<24 {
		errs = append(errs, fmt.Errorf("socket: HWM %d is over 16M messages", o.HWM))
	}
	if len(o.Identity) > zmtpwire.MaxIdentity {
		errs = append(errs, fmt.Errorf("socket: Identity of %d bytes is over 255", len(o.Identity)))
	}
	if o.ReconnectMin < 0 || o.ReconnectMax < 0 {
		errs = append(errs, errors.New("socket: reconnect delays must not be negative"))
	}
	if mm := o.Guard.MaxMessageSize; o.MemoryBudget > 0 && o.MemoryBudget < mm {
		errs = append(errs, fmt.Errorf("socket: MemoryBudget %d is below Guard.MaxMessageSize %d", o.MemoryBudget, mm))
	} else if mm == 0 && o.MemoryBudget > 0 && o.MemoryBudget < zmtpguard.DefaultConfig().MaxMessageSize {
		errs = append(errs, fmt.Errorf("socket: MemoryBudget %d is below the default MaxMessageSize %d", o.MemoryBudget, zmtpguard.DefaultConfig().MaxMessageSize))
	}
	if o.BudgetWait < 0 {
		errs = append(errs, fmt.Errorf("socket: BudgetWait must not be negative (got %v)", o.BudgetWait))
	}
	if o.ReconnectJitter > 1 || o.ReconnectJitter != o.ReconnectJitter {
		errs = append(errs, fmt.Errorf("socket: ReconnectJitter %v is over 1 (want 0..1, negative for none)", o.ReconnectJitter))
	}
	if o.HeartbeatInterval > 0 && o.HeartbeatInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("socket: HeartbeatInterval %v is under 1ms", o.HeartbeatInterval))
	}
	if o.HeartbeatTimeout < 0 {
		errs = append(errs, fmt.Errorf("socket: HeartbeatTimeout must not be negative (got %v)", o.HeartbeatTimeout))
	} else if o.HeartbeatTimeout > 0 && o.HeartbeatTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("socket: HeartbeatTimeout %v is under 1ms", o.HeartbeatTimeout))
	}
	if o.HeartbeatTTL < 0 || o.HeartbeatTTL > maxHeartbeatTTL {
		errs = append(errs, fmt.Errorf("socket: HeartbeatTTL %v is outside 0..6553.5s", o.HeartbeatTTL))
	} else if o.HeartbeatTTL > 0 {
		ivl := o.HeartbeatInterval
		if ivl == 0 {
			ivl = DefaultHeartbeatInterval
		}
		if ivl > 0 && o.HeartbeatTTL <= ivl {
			errs = append(errs, fmt.Errorf("socket: HeartbeatTTL %v must exceed HeartbeatInterval %v", o.HeartbeatTTL, ivl))
		}
	}
	if o.TCPKeepAlive.Enable && (o.TCPKeepAlive.Idle < -1 || o.TCPKeepAlive.Interval < -1 || o.TCPKeepAlive.Count < -1) {
		errs = append(errs, fmt.Errorf("socket: TCPKeepAlive %+v has a value under -1", o.TCPKeepAlive))
	}
	return joinErrors(errs)
}

// joinedErrors is errors.Join on one line: a configuration error names
// every problem, separated by "; ".
type joinedErrors []error

func (e joinedErrors) Error() string {
	var b strings.Builder
	for i, err := range e {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e joinedErrors) Unwrap() []error { return e }

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return joinedErrors(errs)
}

// EventKind says what happened to a peer.
type EventKind uint8

// The peer events.
const (
	// EventConnected: a connection completed its handshake and joined the socket.
	EventConnected EventKind = iota + 1
	// EventHandshakeFailed: a connection was refused during the handshake
	// (bad greeting, bad READY, incompatible type, deadline). Err says why.
	EventHandshakeFailed
	// EventRejected: a connection that completed its handshake, or was about
	// to start one, was refused by local policy (duplicate ROUTER identity,
	// connection caps, source allowlist). Err says why.
	EventRejected
	// EventDisconnected: an established peer left; Err is the cause (a
	// *zmtpguard.Violation when the peer broke the rules, io.EOF when it
	// closed, ErrClosed when the socket closed).
	EventDisconnected
	// EventDialFailed: a dial attempt failed before any handshake (for
	// example connection refused); the dialer retries after a back-off.
	EventDialFailed
)

// A heartbeat timeout is reported as EventDisconnected whose Err matches
// ErrHeartbeatTimeout; a ROUTER handover as EventDisconnected of the old
// connection whose Err matches ErrHandover.

var eventNames = [...]string{"", "connected", "handshake-failed", "rejected", "disconnected", "dial-failed"}

// String returns the kind's lower-case name.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one peer event, given to Options.OnEvent.
type Event struct {
	Kind EventKind
	// Peer is the peer concerned; nil for events about a connection that
	// never completed its handshake (then Remote names it).
	Peer *Peer
	// Remote is the remote address as text ("" if unknown).
	Remote string
	// Endpoint is the socket's bound or dialed endpoint the connection
	// belongs to.
	Endpoint string
	// Err is the cause, for every kind but EventConnected.
	Err error
	// Reason classifies Err (decodeguard.ReasonNone when Err is not bad
	// input, for example an ordinary disconnect).
	Reason decodeguard.Reason
}

// String renders the event for logs.
func (e Event) String() string {
	s := e.Kind.String() + " " + e.Remote
	if e.Endpoint != "" {
		s += " on " + e.Endpoint
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Stats is a snapshot of a Socket's counters. It marshals to JSON as an
// object of named counters (Violations keyed by reason name).
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
	// Violations counts refused connections and messages by reason:
	// handshake failures, stream violations, oversize messages, bad REQ
	// envelopes (ReasonEnvelope), duplicate ROUTER identities and caps
	// (ReasonPolicy).
	Violations decodeguard.Counts `json:"violations"`
	// Peers is the number of currently connected peers.
	Peers int `json:"peers"`
	// ZMTP30Peers is how many of them announced ZMTP 3.0 in their greeting
	// (go-zeromq/zmq4 v0.17 does): they are sent no PING and are not timed
	// out by heartbeat; TCP keepalive watches them (see Liveness in the
	// package doc). Peer.ZMTPVersion tells which ones.
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
	// Violations as ReasonPolicy).
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
	// within its share needed room (also in Violations as ReasonPolicy).
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
	// connections closed as the largest holder (also in Violations as
	// ReasonPolicy).
	BudgetStalls    uint64 `json:"budget_stalls"`
	BudgetEvictions uint64 `json:"budget_evictions"`
	// Topics and TopicBytes are an XPUB's subscriptions held now (one per
	// subscriber and topic) and their bytes; TopicRefusals counts
	// subscriptions refused by the per-subscriber or socket-wide limits
	// (also in Violations as ReasonPolicy).
	Topics        int    `json:"topics"`
	TopicBytes    int64  `json:"topic_bytes"`
	TopicRefusals uint64 `json:"topic_refusals"`
	// Reclaims counts the collections this socket asked the runtime for
	// after departed connections released ReclaimBytes (see
	// Options.ReclaimBytes), including one another socket had asked for
	// already when this socket's bytes passed the threshold (it takes
	// them too).
	Reclaims uint64 `json:"reclaims"`
}
