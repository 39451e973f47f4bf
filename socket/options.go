package socket

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
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
)

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
	// RouterDropUnroutable, for a ROUTER, makes Send to an identity that is
	// not connected drop the message (counted in Stats.DroppedUnroutable)
	// instead of returning an *UnroutableError.
	RouterDropUnroutable bool
	// WriteTimeout, when positive, disconnects a peer whose connection
	// accepts no bytes for that long while data waits to be written. Zero
	// (the default) keeps a slow peer connected: its queue fills and the
	// socket type's full-queue policy applies.
	WriteTimeout time.Duration
	// OnEvent, if set, is called for every peer event (connected, handshake
	// failed, rejected, disconnected). It runs on the connection's own
	// goroutine: keep it fast and never block in it.
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
	if o.Guard.ReadBufferSize == 0 {
		o.Guard.ReadBufferSize = DefaultReadBufferSize
	}
	if o.Guard.WriteBufferSize == 0 {
		o.Guard.WriteBufferSize = DefaultWriteBufferSize
	}
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
	if len(o.Identity) > zmtpguard.MaxIdentity {
		errs = append(errs, fmt.Errorf("socket: Identity of %d bytes is over 255", len(o.Identity)))
	}
	if o.ReconnectMin < 0 || o.ReconnectMax < 0 {
		errs = append(errs, errors.New("socket: reconnect delays must not be negative"))
	}
	if o.WriteTimeout < 0 {
		errs = append(errs, errors.New("socket: WriteTimeout must not be negative"))
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
	// Connects and Disconnects count established peers joining and leaving.
	Connects    uint64 `json:"connects"`
	Disconnects uint64 `json:"disconnects"`
	// AcceptErrors counts failed accepts on the socket's bound endpoints
	// (EMFILE and the like), each followed by a back-off. They stay counted
	// after Close.
	AcceptErrors uint64 `json:"accept_errors"`
}
