package handshake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// Rank identifies the worker a handshake asks for: its pipeline-parallel
// and tensor-parallel rank.
type Rank struct {
	PP, TP int
}

// String returns "pp_rank=P tp_rank=T".
func (r Rank) String() string {
	return "pp_rank=" + strconv.Itoa(r.PP) + " tp_rank=" + strconv.Itoa(r.TP)
}

// ErrListenerClosed is returned by [Listener.Serve] after [Listener.Close].
var ErrListenerClosed = errors.New("handshake: listener closed")

// ListenerConfig configures a [Listener]. Endpoint and exactly one of
// Payloads and Lookup are required; every other field's zero value means
// its documented default.
type ListenerConfig struct {
	// Endpoint is where the listener binds its ROUTER, e.g.
	// "tcp://0.0.0.0:5600" (port 0 picks a free port; see
	// [Listener.Endpoint]). vLLM's default is port 5600, plus the data
	// parallel index since the V2 handshake.
	Endpoint string

	// Payloads maps each served rank to its reply payload, as
	// [EncodePayload] returns it. The map and the byte slices are copied by
	// [NewListener], which also checks that each payload decodes and that
	// each rank is in [0, 65535].
	Payloads map[Rank][]byte
	// Lookup, instead of Payloads, returns the payload for a rank on each
	// request, or false when the rank is not served. It runs in the
	// listener's goroutine; the returned bytes must not change while the
	// listener may still send them (Send copies them before returning). A
	// V1 request is answered with the agent_metadata_bytes found inside the
	// payload Lookup returns; if that payload is not one EncodePayload
	// could have returned,
	// Serve ends with an error, since that is a bug in the caller. It may
	// call the Listener's Stats, Endpoint and Close (Serve then returns
	// ErrListenerClosed once Lookup has returned); it must not wait for
	// Serve to return.
	Lookup func(pp, tp int) ([]byte, bool)

	// V1Rank is the rank a V1 request (the raw bytes "get_meta_msg", which
	// names no rank) is answered for. Zero means pp 0, tp 0; a negative
	// rank is an error. vLLM
	// releases that sent V1 requests ran one listener per TP rank on port
	// base+tp_rank, so a Go agent imitating one of those sets V1Rank to the
	// rank of that port. A V1 reply is the bare msgpack NixlAgentMetadata,
	// which is what a V1 client decodes.
	V1Rank Rank

	// ErrorReplies makes the listener answer a well-formed request for a
	// rank it does not serve with an explicit error, so the client fails at
	// once instead of after its receive timeout (vLLM's: 5 s; V1 clients set
	// none and would wait for ever). The request is still counted as a
	// drop of reason unknown-rank. The error reply keeps the frame shape of
	// the request's variant so that every vLLM client gets past its framing
	// checks and fails in its payload checks:
	//
	//   - V2 and V3: a NixlHandshakePayload whose compatibility_hash is
	//     "zmqguard-error: " followed by the reason (for example
	//     "zmqguard-error: unknown rank: this listener does not serve
	//     pp_rank=0 tp_rank=5") and whose agent_metadata_bytes is empty,
	//     followed for V3 by the usual timestamp frame. vLLM's client decodes
	//     it, then raises RuntimeError("NIXL compatibility hash mismatch.
	//     Local: <its hash>, Remote: zmqguard-error: ...") — so the reason
	//     appears in its log. With enforce_handshake_compat disabled it
	//     decodes the empty agent_metadata_bytes instead, which raises
	//     msgspec.DecodeError, re-raised as RuntimeError("Failed to decode
	//     NixlAgentMetadata"). Either way the handshake future fails at
	//     once; vLLM logs it (failure types handshake_setup_failed and
	//     handshake_failed) and marks the waiting requests' KV loads as
	//     failed, exactly as it does after a timeout, only 5 s sooner.
	//   - V1: a msgpack str holding the same text. A V1 client's
	//     msgspec.msgpack.Decoder(NixlAgentMetadata).decode raises
	//     msgspec.ValidationError ("Expected `object`, got `str`") before it
	//     uses anything.
	//
	// This package's [Fetch] recognises both forms as [ErrRejected].
	ErrorReplies bool

	// AcceptBareDealer answers requests that arrive without the empty
	// delimiter frame, as a DEALER socket that is not imitating a REQ sends
	// them, with a reply without delimiter. By default (false) such a
	// message is dropped as reason envelope: vLLM's clients are REQ sockets.
	AcceptBareDealer bool

	// Clock returns the seconds sent in a V3 reply's timestamp frame: any
	// monotonic clock in seconds (vLLM sends time.perf_counter(), whose epoch
	// is arbitrary; the receiver estimates a clock offset from it). Nil
	// means the seconds since this package was initialised, read from Go's
	// monotonic clock.
	Clock func() float64

	// Socket configures the ROUTER socket (transport limits, HWM, logger);
	// its zero fields mean the socket package's defaults, and a nil
	// Socket.Logger means Logger. RouterDropUnroutable is always set: a
	// reply to a client that has gone is counted in the socket's
	// Stats.DroppedUnroutable, not an error.
	Socket socket.Options
	// Name names the listener in log lines and loop errors. Empty means
	// "nixl-handshake".
	Name string
	// Logger receives the rate-limited drop lines (and the socket's, unless
	// Socket.Logger is set). Nil means slog.Default().
	Logger *slog.Logger
	// OnDrop, if set, is called synchronously for every dropped request,
	// with its reason (see [loop.Drop]). It must not block. It may call
	// Stats and Close, like Lookup.
	OnDrop func(loop.Drop)
}

// ListenerStats is a snapshot of a [Listener]'s counters.
type ListenerStats struct {
	// Served counts the requests answered with metadata, by [Variant]
	// (index 0 is unused). A request is counted before its reply is handed
	// to the socket, so a client holding its reply is already counted.
	Served ServedCounts `json:"served"`
	// ErrorReplies counts the explicit error replies sent (see
	// [ListenerConfig.ErrorReplies]); each is also a drop of reason
	// unknown-rank in Loop, counted when the handler returns, just after
	// the reply is handed to the socket.
	ErrorReplies uint64 `json:"error_replies"`
	// RegistrationsRefused counts push-mode block registrations refused
	// with an explicit reply (see [Listener]).
	RegistrationsRefused uint64 `json:"registrations_refused"`
	// Loop holds the receive loop's counters: received, delivered, dropped
	// by reason (envelope, decode, validate, unknown-rank, ...).
	Loop loop.Stats `json:"loop"`
	// Socket holds the ROUTER's counters: connections, transport and
	// handshake refusals, replies dropped because the client had gone.
	Socket socket.Stats `json:"socket"`
}

// sender is what the listener sends replies through: the ROUTER socket, or
// a stand-in in benchmarks.
type sender interface {
	Send(ctx context.Context, frames ...[]byte) error
}

// Listener is the prefill side of the NIXL handshake: a ROUTER socket that
// answers every well-formed request from a decode worker with the metadata
// of the requested rank, and drops (and counts) everything else without
// ever stopping. Create it with [NewListener], run it with
// [Listener.Serve], release it with [Listener.Close].
//
// What is dropped, by reason: a message without the empty delimiter frame
// (a bare DEALER) or with other than one body frame (envelope, or oversize
// past the socket's frame limit); a body that is not a request (decode:
// not msgpack, not an array, wrong arity, wrong element types; validate:
// a message other than get_meta_msg, a negative or absurd rank); a
// well-formed request for a rank not served (unknown-rank). Connections
// that are not ZMTP at all are refused by the socket and counted in
// ListenerStats.Socket.
type Listener struct {
	sock    *socket.Socket
	loop    *loop.Loop[Request]
	send    sender
	name    string
	clock   func() float64
	lookup  func(pp, tp int) ([]byte, bool)
	static  map[Rank][]byte // copy of Payloads (nil with Lookup)
	v1Meta  []byte          // the V1 rank's metadata, with Payloads
	v1Rank  Rank
	errRepl bool

	// Reused by the handler goroutine only.
	reply [][]byte
	ts    []byte
	ebuf  []byte

	served       [4]atomic.Uint64
	errorReplies atomic.Uint64
	refusedRegs  atomic.Uint64

	closeOnce sync.Once
	closed    atomic.Bool
}

// NewListener checks cfg, binds the ROUTER socket on cfg.Endpoint and
// returns the listener, ready for [Listener.Serve]. Peers may connect as
// soon as it returns; their requests wait until Serve runs.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	l, err := newListener(cfg)
	if err != nil {
		return nil, err
	}
	opts, _ := sockopt.Apply(cfg.Socket, sockopt.Overrides{Logger: cfg.Logger})
	opts.RouterDropUnroutable = true
	sock, err := socket.New("ROUTER", opts)
	if err != nil {
		return nil, fmt.Errorf("handshake: listener socket: %w", err)
	}
	if err := sock.Bind(cfg.Endpoint); err != nil {
		sock.Close()
		return nil, fmt.Errorf("handshake: listener bind %s: %w", cfg.Endpoint, err)
	}
	if err := l.attach(sock, sock, cfg); err != nil {
		sock.Close()
		return nil, err
	}
	l.sock = sock
	return l, nil
}

// fillDefaults returns cfg with every zero field that has a default set to
// it. NewListener fills first, then verifies the filled values.
func fillDefaults(cfg ListenerConfig) ListenerConfig {
	if cfg.Name == "" {
		cfg.Name = "nixl-handshake"
	}
	if cfg.Clock == nil {
		cfg.Clock = monotonicSeconds
	}
	return cfg
}

// newListener fills cfg's defaults, verifies the result and builds
// everything but the socket and loop.
func newListener(cfg ListenerConfig) (*Listener, error) {
	cfg = fillDefaults(cfg)
	if cfg.Endpoint == "" {
		return nil, errors.New("handshake: ListenerConfig.Endpoint is empty")
	}
	if (cfg.Payloads == nil) == (cfg.Lookup == nil) {
		return nil, errors.New("handshake: ListenerConfig needs exactly one of Payloads and Lookup")
	}
	if cfg.V1Rank.PP < 0 || cfg.V1Rank.TP < 0 {
		return nil, fmt.Errorf("handshake: ListenerConfig.V1Rank %v is negative", cfg.V1Rank)
	}
	l := &Listener{
		name:    cfg.Name,
		clock:   cfg.Clock,
		v1Rank:  cfg.V1Rank,
		errRepl: cfg.ErrorReplies,
		reply:   make([][]byte, 0, 4),
		ts:      make([]byte, 0, 16),
	}
	if cfg.Lookup != nil {
		l.lookup = cfg.Lookup
		return l, nil
	}
	l.static = make(map[Rank][]byte, len(cfg.Payloads))
	for _, r := range slices.SortedFunc(maps.Keys(cfg.Payloads), compareRank) {
		p := cfg.Payloads[r]
		if r.PP < 0 || r.TP < 0 || r.PP > nixlwire.MaxRank || r.TP > nixlwire.MaxRank {
			return nil, fmt.Errorf("handshake: ListenerConfig.Payloads: rank %v out of range [0, %d]", r, nixlwire.MaxRank)
		}
		if _, err := nixlwire.DecodePayload(p); err != nil {
			return nil, fmt.Errorf("handshake: ListenerConfig.Payloads[%v] is not a NixlHandshakePayload: %w", r, err)
		}
		l.static[r] = slices.Clone(p)
	}
	if p, ok := l.static[l.v1Rank]; ok {
		meta, err := payloadMetadata(p)
		if err != nil {
			return nil, fmt.Errorf("handshake: ListenerConfig.Payloads[%v]: %w", l.v1Rank, err)
		}
		l.v1Meta = meta
	}
	l.lookup = l.staticLookup
	return l, nil
}

func compareRank(a, b Rank) int {
	if a.PP != b.PP {
		return a.PP - b.PP
	}
	return a.TP - b.TP
}

func (l *Listener) staticLookup(pp, tp int) ([]byte, bool) {
	p, ok := l.static[Rank{pp, tp}]
	return p, ok
}

// attach builds the receive loop over r, replying through s.
func (l *Listener) attach(r loop.Receiver, s sender, cfg ListenerConfig) error {
	env := &envelope.Options{MinBody: 1, MaxBody: 1, Lenient: cfg.AcceptBareDealer}
	lp, err := loop.New(r, loop.Config[Request]{
		Name:     l.name,
		Logger:   cfg.Logger,
		Envelope: env,
		Decode:   decodeRequest,
		Handler:  l.handle,
		OnDrop:   cfg.OnDrop,
	})
	if err != nil {
		return fmt.Errorf("handshake: listener loop: %w", err)
	}
	l.loop, l.send = lp, s
	return nil
}

// decodeRequest is the loop's decoder: one body frame, parsed by
// parseRequest (which does not allocate on valid input).
func decodeRequest(frames [][]byte, dst *Request) error {
	*dst = Request{}
	if len(frames) != 1 {
		return decodeguard.NewError(decodeguard.ReasonEnvelope,
			"handshake request: expected 1 body frame, got "+strconv.Itoa(len(frames)))
	}
	r, err := parseRequest(frames[0])
	if err != nil && isRegistration(frames[0]) {
		*dst = Request{Variant: variantRegister}
		return nil
	}
	*dst = r
	return err
}

// variantRegister marks a push-mode block registration, which handle
// refuses explicitly. It is never a [Request.Variant] outside the listener.
const variantRegister Variant = 0xf0

// registrationLimits bounds the pre-scan of a possible registration.
var registrationLimits = decodeguard.Limits{}

// isRegistration reports whether b has the shape of vLLM's push-mode block
// registration (vLLM PR #35264): a msgpack array (REGISTER_BLOCKS_MSG, map)
// whose first element is bin or str and whose map has a "request_id" key.
// The decode side sends it from a REQ to the prefill side channel and waits
// 5 s for {"status": "success", ...}; a listener that serves metadata only
// must refuse it at once rather than let it time out.
func isRegistration(b []byte) bool {
	if msgpscan.Scan(b, &registrationLimits) != nil {
		return false
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 2 {
		return false
	}
	switch msgp.NextType(rest) {
	case msgp.BinType, msgp.StrType:
	default:
		return false
	}
	if rest, err = msgp.Skip(rest); err != nil || msgp.NextType(rest) != msgp.MapType {
		return false
	}
	m, rest, err := msgp.ReadMapHeaderBytes(rest)
	if err != nil {
		return false
	}
	for range m {
		var key []byte
		if msgp.NextType(rest) != msgp.StrType {
			return false
		}
		if key, rest, err = msgp.ReadStringZC(rest); err != nil {
			return false
		}
		if string(key) == "request_id" {
			return true
		}
		if rest, err = msgp.Skip(rest); err != nil {
			return false
		}
	}
	return false
}

// refuseRegistration answers a push-mode block registration with the
// failure the decode side expects to parse, {"status": "error", "message":
// ...}, so that it fails at once instead of after its 5 s timeout.
func (l *Listener) refuseRegistration(ctx context.Context, d loop.Delivery[Request]) error {
	l.ebuf = msgp.AppendMapHeader(l.ebuf[:0], 2)
	l.ebuf = msgp.AppendString(l.ebuf, "status")
	l.ebuf = msgp.AppendString(l.ebuf, "error")
	l.ebuf = msgp.AppendString(l.ebuf, "message")
	l.ebuf = msgp.AppendString(l.ebuf, nixlwire.ErrorReplyPrefix+"push-mode block registration is not served here: this listener serves NIXL metadata only")
	reply := d.Envelope.Reply(l.reply[:0], l.ebuf)
	l.reply = reply[:0]
	l.refusedRegs.Add(1)
	if err := l.send.Send(ctx, reply...); err != nil {
		l.refusedRegs.Add(^uint64(0))
		return l.sendError(ctx, err)
	}
	return nil
}

// Serve receives and answers requests until ctx ends (it returns nil) or
// [Listener.Close] is called (ErrListenerClosed). Bad requests are dropped,
// counted and logged; Serve returns any other error, which means a bug or a
// broken socket (a *loop.Error saying where). Only one Serve may run at a
// time.
func (l *Listener) Serve(ctx context.Context) error {
	err := l.loop.Run(ctx)
	if l.closed.Load() {
		return ErrListenerClosed
	}
	return err
}

// Close stops Serve and closes the socket, disconnecting every client.
// It is idempotent and returns nil.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.loop.Close()
		if l.sock != nil {
			l.sock.Close()
		}
	})
	return nil
}

// Endpoint returns the bound endpoint with the actual port, e.g.
// "tcp://127.0.0.1:41234".
func (l *Listener) Endpoint() string {
	if l.sock == nil {
		return ""
	}
	return l.sock.Endpoint()
}

// Addr returns the bound network address.
func (l *Listener) Addr() net.Addr {
	if l.sock == nil {
		return nil
	}
	ep := l.sock.Endpoint()
	if path, ok := strings.CutPrefix(ep, "ipc://"); ok {
		return &net.UnixAddr{Name: path, Net: "unix"}
	}
	a, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		return nil
	}
	return a
}

// Stats returns a snapshot of the listener's counters.
func (l *Listener) Stats() ListenerStats {
	var s ListenerStats
	for v := V1; v <= V3; v++ {
		s.Served[v] = l.served[v].Load()
	}
	s.ErrorReplies = l.errorReplies.Load()
	s.RegistrationsRefused = l.refusedRegs.Load()
	s.Loop = l.loop.Stats()
	if l.sock != nil {
		s.Socket = l.sock.Stats()
	}
	return s
}

// handle answers one well-formed request. It allocates nothing when the
// rank is served.
func (l *Listener) handle(ctx context.Context, d loop.Delivery[Request]) error {
	req := *d.Value
	if req.Variant == variantRegister {
		return l.refuseRegistration(ctx, d)
	}
	rank := Rank{req.PP, req.TP}
	if req.Variant == V1 {
		rank = l.v1Rank
	}
	payload, ok := l.lookup(rank.PP, rank.TP)
	if !ok {
		return l.unknownRank(ctx, d, req.Variant, rank)
	}
	reply := l.reply[:0]
	switch req.Variant {
	case V1:
		meta := l.v1Meta
		if l.static == nil {
			var err error
			if meta, err = payloadMetadata(payload); err != nil {
				// Not the peer's fault: %v, not %w, keeps the error
				// unclassified so that it surfaces from Serve.
				return fmt.Errorf("handshake: Lookup(%d, %d) returned a bad payload: %v", rank.PP, rank.TP, err)
			}
		}
		reply = d.Envelope.Reply(reply, meta)
	case V2:
		reply = d.Envelope.Reply(reply, payload)
	default: // V3
		l.ts = nixlwire.AppendTimestamp(l.ts[:0], l.clock())
		reply = d.Envelope.Reply(reply, payload, l.ts)
	}
	l.reply = reply[:0]
	// Counted before the reply leaves, so that a client that has its reply
	// sees itself counted.
	l.served[req.Variant].Add(1)
	if err := l.send.Send(ctx, reply...); err != nil {
		l.served[req.Variant].Add(^uint64(0))
		return l.sendError(ctx, err)
	}
	return nil
}

// unknownRank refuses a request for a rank not served, first sending an
// explicit error reply when configured to.
func (l *Listener) unknownRank(ctx context.Context, d loop.Delivery[Request], v Variant, rank Rank) error {
	msg := "unknown rank: this listener does not serve " + rank.String()
	if l.errRepl {
		reply := l.reply[:0]
		text := nixlwire.ErrorReplyPrefix + msg
		if v == V1 {
			l.ebuf = msgp.AppendString(l.ebuf[:0], text)
			reply = d.Envelope.Reply(reply, l.ebuf)
		} else {
			l.ebuf = appendErrorPayload(l.ebuf[:0], text)
			if v == V2 {
				reply = d.Envelope.Reply(reply, l.ebuf)
			} else {
				l.ts = nixlwire.AppendTimestamp(l.ts[:0], l.clock())
				reply = d.Envelope.Reply(reply, l.ebuf, l.ts)
			}
		}
		l.reply = reply[:0]
		l.errorReplies.Add(1)
		if err := l.send.Send(ctx, reply...); err != nil {
			l.errorReplies.Add(^uint64(0))
			return l.sendError(ctx, err)
		}
	}
	return decodeguard.NewError(decodeguard.ReasonUnknownRank, msg)
}

// appendErrorPayload appends the V2/V3 error reply: a NixlHandshakePayload
// carrying text as its hash and no metadata.
func appendErrorPayload(b []byte, text string) []byte {
	b = msgp.AppendMapHeader(b, 2)
	b = msgp.AppendString(b, "compatibility_hash")
	b = msgp.AppendString(b, text)
	b = msgp.AppendString(b, "agent_metadata_bytes")
	return msgp.AppendBytes(b, nil)
}

// sendError decides what a failed Send means: nothing when the listener
// is stopping, a loop-ending error otherwise (a ROUTER Send fails only when
// the socket is closed or misused; replies to departed clients are counted
// drops).
func (l *Listener) sendError(ctx context.Context, err error) error {
	if ctx.Err() != nil || l.closed.Load() {
		return nil
	}
	return fmt.Errorf("handshake: reply: %w", err)
}

// payloadMetadata returns the agent_metadata_bytes of an encoded
// NixlHandshakePayload without copying or allocating.
func payloadMetadata(p []byte) ([]byte, error) {
	if err := msgpscan.Scan(p, nil); err != nil {
		return nil, err
	}
	n, rest, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return nil, decodeguard.NewError(decodeguard.ReasonDecode, "payload: expected a map")
	}
	for range n {
		var key []byte
		switch msgp.NextType(rest) {
		case msgp.StrType:
			key, rest, err = msgp.ReadStringZC(rest)
		case msgp.BinType:
			key, rest, err = msgp.ReadBytesZC(rest)
		default:
			rest, err = msgp.Skip(rest)
		}
		if err != nil {
			return nil, decodeguard.NewError(decodeguard.ReasonDecode, "payload: bad key")
		}
		if string(key) == "agent_metadata_bytes" && msgp.NextType(rest) == msgp.BinType {
			meta, _, err := msgp.ReadBytesZC(rest)
			if err != nil {
				return nil, decodeguard.NewError(decodeguard.ReasonDecode, "payload: bad agent_metadata_bytes")
			}
			return meta, nil
		}
		if rest, err = msgp.Skip(rest); err != nil {
			return nil, decodeguard.NewError(decodeguard.ReasonDecode, "payload: bad value")
		}
	}
	return nil, decodeguard.NewError(decodeguard.ReasonDecode, "payload: no agent_metadata_bytes (bin)")
}

// processStart is the epoch of monotonicSeconds.
var processStart = time.Now()

// monotonicSeconds returns the seconds elapsed since this package was
// initialised, read from Go's monotonic clock: the default
// ListenerConfig.Clock, playing the part of Python's time.perf_counter()
// (whose epoch is arbitrary too).
func monotonicSeconds() float64 { return time.Since(processStart).Seconds() }
