package socket

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// The defaults of [Options], stated in each field's doc.
const (
	defaultHWM               = 1000
	defaultReconnectMin      = 100 * time.Millisecond
	defaultReconnectMax      = 5 * time.Second
	defaultReconnectJitter   = 0.2
	defaultHeartbeatInterval = 2 * time.Second
	defaultHeartbeatTimeout  = 6 * time.Second
	defaultSendQueueBytes    = 4 << 20
	defaultSendTotalBytes    = 256 << 20
	defaultRecvQueueBytes    = 64 << 20
	defaultMemoryBudget      = 64 << 20
	defaultBudgetWait        = 2 * time.Second
	defaultXPubMaxTopics     = 100_000
	defaultXPubMaxTopicBytes = 16 << 20
	defaultReclaimBytes      = 8 << 20
	// defaultXPubWriteTimeout is an XPUB's WriteTimeout when the field is
	// zero (the other types have none).
	defaultXPubWriteTimeout = 10 * time.Second
	// defaultReadBufferSize is the largest per-connection read buffer a
	// Socket asks zmtpguard for when Guard.ReadBufferSize is zero: large
	// enough that one read syscall brings in thousands of small messages or
	// dozens of 4 KiB ones. A connection starts with 4 KiB and grows its
	// buffer only while a peer keeps it full (see
	// zmtpguard.Config.ReadBufferSize), so an idle peer costs a few KiB.
	defaultReadBufferSize = 256 << 10
	// defaultWriteBufferSize is the per-connection write buffer a Socket
	// asks zmtpguard for when Guard.WriteBufferSize is zero.
	defaultWriteBufferSize = 64 << 10
	// maxIdentity is ZMTP's limit on a routing identity.
	maxIdentity = 255
	// maxHWM bounds HWM (16M messages).
	maxHWM = 1 << 24
	// maxHeartbeatTTL is the largest TTL a PING can announce (16 bits of
	// deciseconds).
	maxHeartbeatTTL = 65535 * 100 * time.Millisecond
)

// defaultTCPKeepAlive is TCPKeepAlive's zero-value meaning: Go's own
// defaults, made explicit.
func defaultTCPKeepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}
}

// Options configures a Socket. The zero value of every field means the
// default its doc states, so Options{} is a usable configuration and a
// partly filled one works too. A negative value means "off" only where the
// field's doc says so; anywhere else it is refused. [New] fills the
// defaults first, derived ones included (MemoryBudget from
// Guard.MaxMessageSize, an XPUB's WriteTimeout), then checks the final
// values: its error names the field and the value, for example
// "socket: Options.HWM -1 is negative". [Socket.Options] returns the
// values a socket runs with.
type Options struct {
	// Guard holds the transport limits every connection is checked against
	// (message size, frame count, handshake deadline, connection caps,
	// source allowlist) and the security mechanism: Guard.Curve set selects
	// CURVE encryption with key admission for every connection of the socket
	// (nil is NULL; see zmtpguard.CurveConfig). Its OnViolation hook, if set,
	// is called in addition to the Socket's own accounting. Zero fields mean
	// zmtpguard's defaults, except two a Socket chooses itself: a zero
	// Guard.ReadBufferSize means 256 KiB (a connection starts with 4 KiB
	// and grows its buffer only while a peer keeps it full, so an idle peer
	// costs a few KiB; a busy one reads thousands of small messages per
	// syscall) and a zero Guard.WriteBufferSize means 64 KiB.
	Guard zmtpguard.Config
	// HWM bounds each peer's send queue, in messages. What happens when a
	// queue is full depends on the socket type (see the package doc).
	// Zero means 1000; at most 16M (1<<24).
	HWM int
	// Identity is the routing identity announced in READY on dialed
	// connections (at most 255 bytes); a ROUTER peer uses it to address this
	// socket. Connections accepted by Bind announce no identity
	// (zmtpguard.Listener handshakes without one).
	Identity []byte
	// ReconnectMin is the delay before the first reconnect attempt of a
	// dialed endpoint; the delay doubles after each failure up to
	// ReconnectMax and resets after a successful handshake. Zero means
	// 100 ms.
	ReconnectMin time.Duration
	// ReconnectMax caps the reconnect delay. Zero means 5 s; a value below
	// ReconnectMin is raised to ReconnectMin.
	ReconnectMax time.Duration
	// ReconnectJitter spreads reconnect delays so that many dialers losing
	// the same server do not return in lock-step. Each wait is
	//
	//	wait = min(ReconnectMax, d × (1 + J × (2u − 1)))
	//
	// where d is the current back-off (ReconnectMin doubling to
	// ReconnectMax), J the jitter and u uniform in [0, 1): with the default
	// J = 0.2, a wait lies in [0.8 d, 1.2 d] (capped). Zero means 0.2; a
	// negative value turns jitter off; more than 1 (or NaN) is refused.
	ReconnectJitter float64
	// HeartbeatInterval: a connection that has received nothing for this
	// long is sent a ZMTP 3.1 PING (RFC 37), with HeartbeatTTL and a context
	// the peer echoes in its PONG. Any complete message received (data,
	// PING, PONG, subscription) counts as the peer being alive, as in
	// libzmq. Zero means 2 s; negative turns heartbeats off (the peer's own PINGs are still answered, and a TTL
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
	// peer is not timed out, and PINGs keep going out. Zero means 6 s;
	// at least 1 ms.
	HeartbeatTimeout time.Duration
	// HeartbeatTTL is announced in our PINGs: the peer may drop us if it
	// hears nothing from us for that long (libzmq's ZMQ_HEARTBEAT_TTL).
	// Sent in deciseconds (rounded up), at most 6553.5 s; zero announces
	// none. It must exceed HeartbeatInterval. With a TTL, a PING
	// also goes out after every interval in which we sent nothing, even
	// while the peer talks, so that the peer's TTL never expires on a live
	// socket.
	HeartbeatTTL time.Duration
	// TCPKeepAlive is set on every accepted and dialed TCP connection. The
	// zero value means probes after 15 s idle, every 15 s, 9 unanswered
	// probes end the connection (Go's own defaults, made explicit); Enable
	// false with any other field set (for example Idle: -1) turns keepalive
	// off. With Enable true the fields follow net.KeepAliveConfig (0 =
	// system default, -1 = leave unset); a value under -1 is refused.
	TCPKeepAlive net.KeepAliveConfig
	// RouterHandover, for a ROUTER, lets a new connection announcing an
	// identity that is already connected take it over: the old connection
	// is closed (its cause says so) and counted in Stats.Handovers, as
	// libzmq's ZMQ_ROUTER_HANDOVER. Without it (the default) the new
	// connection is refused and counted in Stats.IdentityRefusals; a
	// restarted peer then gets its identity back once the old connection
	// times out (heartbeats) or closes.
	RouterHandover bool
	// SendQueueBytes bounds each peer's send queue in bytes, beside HWM
	// (a queue always takes one message, whatever its size, when empty).
	// A full queue is treated exactly like one at its HWM. Zero means
	// 4 MiB (1000 messages of 1 MiB would be 1 GiB for one peer); negative
	// means no byte bound.
	SendQueueBytes int
	// SendTotalBytes bounds the bytes queued for all peers together (zero
	// means 256 MiB; negative means no bound). A message that does not
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
	// Recv, across all peers (zero means 64 MiB; negative means no bound).
	// Once reached, readers stop reading their connections (TCP flow
	// control slows the peers) until Recv catches up; each connection may
	// still hold the one message it was reading. The count includes the
	// batch a reader assembles, and is exact, not sampled. One connection
	// reads no further message while 1 MiB or more of its messages wait
	// (see Receiving in the package doc).
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
	// fair share may pass MemoryBudget, never twice it. Zero means 64 MiB,
	// or twice Guard.MaxMessageSize (its final value, default included) if
	// that is more, worked out when the socket is created; negative means
	// no budget (each connection then holds up to MaxMessageSize). A
	// budget set below Guard.MaxMessageSize is refused: a lone max-size
	// message would be evicted.
	//
	// MemoryBudget is the one knob that sizes a socket's budget.
	// Guard.Budget is only how several sockets share one budget (set the
	// same *zmtpguard.Budget in each): the socket then uses it, and
	// MemoryBudget and BudgetWait are its Limit and Wait (filled in when
	// zero); a MemoryBudget or BudgetWait set to another value, a negative
	// MemoryBudget included, is refused (issue 40: Guard.Budget used to win
	// silently). A reader
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
	// before the largest holder is closed. Zero means 2 s, or
	// Guard.Budget's Wait when Guard.Budget is set (see MemoryBudget).
	BudgetWait time.Duration
	// XPubMaxTopics and XPubMaxTopicBytes bound an XPUB's subscriptions
	// across all subscribers (counted once per subscriber and topic), beside
	// the per-subscriber limits (below). Past
	// them, a new topic is refused (ReasonPolicy, Stats.TopicRefusals) from
	// a subscriber holding at least its fair share (the limit divided by the
	// subscribers), never from one below it: a subscription flood costs the
	// flooding subscriber's own allowance. A departed subscriber's topics
	// are freed at once. Zero means 100,000 topics and 16 MiB; negative
	// means no socket-wide bound. The per-subscriber limits are fixed:
	// 10,000 distinct topics and 1 MiB of topic bytes.
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
	// target. Zero means 8 MiB; negative never asks.
	ReclaimBytes int64
	// RouterDropUnroutable, for a ROUTER, makes Send to an identity that is
	// not connected drop the message (counted in Stats.DroppedUnroutable)
	// instead of returning an error matching ErrUnroutable.
	RouterDropUnroutable bool
	// WriteTimeout, when positive, disconnects a peer whose connection
	// accepts no bytes for that long while data waits to be written (a
	// ReasonPolicy violation; the peer's PINGs do not keep it connected:
	// only bytes it reads do). Zero means 10 s for XPUB, whose subscribers that never read would otherwise
	// hold their share of SendTotalBytes for as long as TCP keeps them;
	// none for the other types, where a slow peer stays connected, its
	// queue fills and the socket type's full-queue policy applies. Negative
	// means none.
	WriteTimeout time.Duration
	// OnEvent, if set, is called for every peer event (connected, handshake
	// failed, rejected, disconnected). It runs on the connection's own
	// goroutine: keep it fast and never block in it (a Send that waits for
	// queue space may wait for this very goroutine). It may call the
	// socket's Stats, Peers, Endpoint and Close (Close never waits for
	// the callback: see [Socket.Close]), but not Shutdown, which waits for
	// it. It runs under no lock of the socket's. The Guard hooks
	// OnViolation and OnRelease follow the same rules.
	OnEvent func(Event)
	// Logger receives the socket's log lines; nil means slog.Default().
	// Refused connections and closed ones (a reason in Stats.Refused)
	// are warnings, rate-limited by the rules package loop follows too;
	// other peer events are debug lines. Pass slog.New(slog.DiscardHandler)
	// to silence it. Peer bytes never appear raw.
	Logger *slog.Logger
}

// DefaultOptions returns Options with every default filled in that does
// not depend on another field, for reading or changing. It leaves the
// derived fields zero: MemoryBudget (worked out from Guard.MaxMessageSize
// when the socket is created), BudgetWait (from Guard.Budget when that is
// set) and WriteTimeout (its default depends on the
// socket type). So changing a field of it, Guard.MaxMessageSize
// included, configures the same socket as making the same change to
// Options{} (TCPKeepAlive is one value: set it whole).
func DefaultOptions() Options {
	var o Options
	o.fillIndependent()
	return o
}

// fillIndependent fills every zero field whose default does not depend on
// another field or on the socket type.
func (o *Options) fillIndependent() {
	if o.HWM == 0 {
		o.HWM = defaultHWM
	}
	if o.ReconnectMin == 0 {
		o.ReconnectMin = defaultReconnectMin
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = defaultReconnectMax
	}
	if o.ReconnectJitter == 0 {
		o.ReconnectJitter = defaultReconnectJitter
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = defaultHeartbeatInterval
	}
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = defaultHeartbeatTimeout
	}
	if o.TCPKeepAlive == (net.KeepAliveConfig{}) {
		o.TCPKeepAlive = defaultTCPKeepAlive()
	}
	if o.SendQueueBytes == 0 {
		o.SendQueueBytes = defaultSendQueueBytes
	}
	if o.SendTotalBytes == 0 {
		o.SendTotalBytes = defaultSendTotalBytes
	}
	if o.RecvQueueBytes == 0 {
		o.RecvQueueBytes = defaultRecvQueueBytes
	}
	if o.XPubMaxTopics == 0 {
		o.XPubMaxTopics = defaultXPubMaxTopics
	}
	if o.XPubMaxTopicBytes == 0 {
		o.XPubMaxTopicBytes = defaultXPubMaxTopicBytes
	}
	if o.ReclaimBytes == 0 {
		o.ReclaimBytes = defaultReclaimBytes
	}
	if o.Guard.ReadBufferSize == 0 {
		o.Guard.ReadBufferSize = defaultReadBufferSize
	}
	if o.Guard.WriteBufferSize == 0 {
		o.Guard.WriteBufferSize = defaultWriteBufferSize
	}
	// The rest of Guard is zmtpguard's to default; the socket fills it in
	// too, so that Socket.Options reports the limits its connections run
	// with and MemoryBudget is derived from the final MaxMessageSize.
	g := zmtpguard.DefaultConfig()
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
	if o.Guard.BodyTimeout == 0 {
		o.Guard.BodyTimeout = g.BodyTimeout
	}
}

// withDefaults returns o with every default filled in for a socket of kind
// k: the independent ones, then those derived from them (the final
// ReconnectMax, MemoryBudget, BudgetWait and WriteTimeout).
func (o Options) withDefaults(k kind) Options {
	o.fillIndependent()
	if o.ReconnectMax >= 0 && o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin // a negative one is refused
	}
	if b := o.Guard.Budget; b != nil {
		// A shared budget is this socket's budget (verify refuses other
		// values set beside it).
		if o.MemoryBudget == 0 {
			o.MemoryBudget = b.Limit
		}
		if o.BudgetWait == 0 {
			o.BudgetWait = sharedWait(b)
		}
	}
	if o.MemoryBudget == 0 {
		// Room for two max-size messages: a large MaxMessageSize is never
		// undone by the default budget.
		o.MemoryBudget = max(defaultMemoryBudget, 2*o.Guard.MaxMessageSize)
	}
	if o.BudgetWait == 0 {
		o.BudgetWait = defaultBudgetWait
	}
	if k == kXPub && o.WriteTimeout == 0 {
		o.WriteTimeout = defaultXPubWriteTimeout
	}
	return o
}

// sharedWait is the wait of a shared budget b as zmtpguard applies it
// (zero or negative means 2 s).
func sharedWait(b *zmtpguard.Budget) time.Duration {
	if b.Wait <= 0 {
		return defaultBudgetWait
	}
	return b.Wait
}

// verify checks the final values of o (defaults filled in): every error
// names the field and the value.
func (o *Options) verify() error {
	var errs []error
	bad := func(field string, v any, what string) {
		errs = append(errs, fmt.Errorf("socket: Options.%s %v %s", field, v, what))
	}
	if err := o.Guard.Verify(); err != nil {
		// zmtpguard may join several errors with newlines: keep them
		// apart, so that the whole error stays on one line.
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = append(errs, j.Unwrap()...)
		} else {
			errs = append(errs, err)
		}
	}
	if o.HWM < 0 {
		bad("HWM", o.HWM, "is negative")
	} else if o.HWM > maxHWM {
		bad("HWM", o.HWM, "is over 16M messages")
	}
	if len(o.Identity) > maxIdentity {
		bad("Identity", fmt.Sprintf("of %d bytes", len(o.Identity)), "is over 255 bytes")
	}
	if o.ReconnectMin < 0 {
		bad("ReconnectMin", o.ReconnectMin, "is negative")
	}
	if o.ReconnectMax < 0 {
		bad("ReconnectMax", o.ReconnectMax, "is negative")
	}
	if o.ReconnectJitter > 1 || o.ReconnectJitter != o.ReconnectJitter {
		bad("ReconnectJitter", o.ReconnectJitter, "is over 1 (want 0..1, negative for none)")
	}
	if o.HeartbeatInterval > 0 && o.HeartbeatInterval < time.Millisecond {
		bad("HeartbeatInterval", o.HeartbeatInterval, "is under 1ms")
	}
	if o.HeartbeatTimeout < 0 {
		bad("HeartbeatTimeout", o.HeartbeatTimeout, "is negative")
	} else if o.HeartbeatTimeout < time.Millisecond {
		bad("HeartbeatTimeout", o.HeartbeatTimeout, "is under 1ms")
	}
	if o.HeartbeatTTL < 0 || o.HeartbeatTTL > maxHeartbeatTTL {
		bad("HeartbeatTTL", o.HeartbeatTTL, "is outside 0..6553.5s")
	} else if o.HeartbeatTTL > 0 && o.HeartbeatInterval > 0 && o.HeartbeatTTL <= o.HeartbeatInterval {
		bad("HeartbeatTTL", o.HeartbeatTTL, fmt.Sprintf("must exceed HeartbeatInterval %v", o.HeartbeatInterval))
	}
	if ka := o.TCPKeepAlive; ka.Enable && (ka.Idle < -1 || ka.Interval < -1 || ka.Count < -1) {
		bad("TCPKeepAlive", fmt.Sprintf("%+v", ka), "has a value under -1")
	}
	if mm := o.Guard.MaxMessageSize; o.MemoryBudget > 0 && o.MemoryBudget < mm {
		bad("MemoryBudget", o.MemoryBudget, fmt.Sprintf("is below Guard.MaxMessageSize %d", mm))
	}
	if o.BudgetWait < 0 {
		bad("BudgetWait", o.BudgetWait, "is negative")
	}
	if b := o.Guard.Budget; b != nil {
		if o.MemoryBudget != b.Limit {
			bad("MemoryBudget", o.MemoryBudget, fmt.Sprintf("differs from Guard.Budget.Limit %d (Guard.Budget shares one budget between sockets: set one)", b.Limit))
		}
		if w := sharedWait(b); o.BudgetWait != w {
			bad("BudgetWait", o.BudgetWait, fmt.Sprintf("differs from Guard.Budget.Wait %v (Guard.Budget shares one budget between sockets: set one)", w))
		}
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
