package handshake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/socket"
)

// defaultTimeout is what a zero ClientOptions.Timeout or
// ProbeOptions.Timeout means: vLLM's 5000 ms receive timeout.
const defaultTimeout = 5 * time.Second

// The kinds of handshake failure. Every error [Fetch] and [Probe] return
// for a failed handshake matches exactly one of them under errors.Is; its
// text carries the particulars (the endpoint, the request, what was seen,
// peer strings only through a safe rendering).
var (
	// ErrTimeout: no reply within the timeout — the connection could not be
	// made in time, or it was made and the request sent but the listener
	// never answered. Its text says which, and names the `zmqguard probe`
	// command line that shows the failing step.
	ErrTimeout = errors.New("handshake: timed out")
	// ErrRefused: no connection was established, and at least one attempt
	// failed outright (connection refused, no route, the peer is not a ZMTP
	// listener or not one a REQ may talk to).
	ErrRefused = errors.New("handshake: connection refused")
	// ErrBadReplyShape: the reply has the wrong number of frames for the
	// request's variant, or a V3 reply's timestamp frame is not a number.
	ErrBadReplyShape = errors.New("handshake: bad reply shape")
	// ErrUndecodablePayload: the payload (V2/V3) or the agent metadata (all
	// variants) does not decode. The cause is a classified
	// *decodeguard.Error.
	ErrUndecodablePayload = errors.New("handshake: undecodable payload")
	// ErrHashMismatch: the compatibility hash differs from the expected one
	// (the text names both).
	ErrHashMismatch = errors.New("handshake: compatibility hash mismatch")
	// ErrEngineIDMismatch: the metadata names another engine than the
	// expected one (the text names both).
	ErrEngineIDMismatch = errors.New("handshake: engine id mismatch")
	// ErrRejected: the listener answered with an explicit error reply (see
	// [ListenerConfig.ErrorReplies]), for example because it does not serve
	// the requested rank.
	ErrRejected = errors.New("handshake: rejected by the listener")
)

// errNoExpectedHash is returned by Fetch, before it connects, for a V2 or
// V3 request whose ClientOptions has neither an ExpectedHash nor
// SkipHashCheck. It is a configuration error, not a handshake failure.
var errNoExpectedHash = errors.New("handshake: ClientOptions.ExpectedHash is empty: set it to the local compatibility hash, or set SkipHashCheck to skip the check")

// ClientOptions configures [Fetch]. The zero value is vLLM's client, except
// that a V2 or V3 request needs ExpectedHash or SkipHashCheck.
type ClientOptions struct {
	// Timeout bounds the whole exchange, connection included. Zero means
	// 5 s, vLLM's receive timeout; a negative value is an error.
	Timeout time.Duration
	// ExpectedHash is the local compatibility hash (see
	// [Factors.Hash]); the payload's must equal it. It is required for
	// V2 and V3 requests: an empty ExpectedHash without SkipHashCheck makes
	// Fetch fail with a configuration error before it connects, so a
	// forgotten hash never quietly turns the check off. V1 replies carry no
	// hash and are never checked.
	ExpectedHash string
	// SkipHashCheck disables the compatibility hash check on purpose
	// (vLLM's enforce_handshake_compat=false); ExpectedHash is then ignored.
	SkipHashCheck bool
	// ExpectedEngineID, if set, must equal the metadata's engine_id.
	ExpectedEngineID string
	// Socket configures the REQ socket (transport limits, identity,
	// reconnect delays). Its OnEvent hook, if set, is called in addition to
	// Fetch's own.
	Socket socket.Options
	// Limits bound the decoding of the payload and the metadata (nil means
	// decodeguard's defaults).
	Limits *decodeguard.Limits
}

// Reply is the result of a successful handshake.
type Reply struct {
	// Request is what was asked.
	Request Request
	// CompatibilityHash is the listener's compatibility hash, as sent (V2
	// and V3; empty for V1).
	CompatibilityHash string
	// Metadata is the decoded agent metadata.
	Metadata NixlAgentMetadata
	// RemoteTime is the listener's clock in seconds from a V3 reply's
	// timestamp frame (0 for V1 and V2).
	RemoteTime float64
	// ClockOffset estimates RemoteTime minus this process's monotonic
	// clock (the default [ListenerConfig.Clock]) at the same instant, as vLLM does: the remote time minus the midpoint of the
	// local send and receive times (V3 only).
	ClockOffset float64
	// RTT is the time from sending the request to receiving the reply.
	RTT time.Duration
	// UnknownKeys counts the keys of the NixlHandshakePayload and
	// NixlAgentMetadata maps this package does not know: fields a newer
	// vLLM added, read past (as msgspec does for a dataclass) and never a
	// reason to refuse the reply.
	UnknownKeys int
}

// timeoutError is the detail of an ErrTimeout.
type timeoutError struct {
	// Endpoint is the remote endpoint, Request the request.
	Endpoint string
	Request  Request
	// Timeout is the time waited.
	Timeout time.Duration
	// Connected reports whether a ZMTP connection was established at all;
	// Sent whether the request was handed to it; Disconnected whether the
	// connection was lost afterwards.
	Connected, Sent, Disconnected bool
	// Cause is why the connection was closed while waiting, when the REQ
	// socket closed it for breaking a limit (a *zmtpguard.Violation: for
	// example a reply over Socket.Guard.MaxMessageSize); nil otherwise.
	Cause error
}

// Unwrap returns Cause.
func (e *timeoutError) Unwrap() error { return e.Cause }

// Error names the remote address, the rank and the variant, says what was
// seen, and points to the probe.
func (e *timeoutError) Error() string {
	var b strings.Builder
	b.WriteString("handshake: ")
	switch {
	case !e.Connected:
		b.WriteString("could not connect to " + e.Endpoint + " within " + e.Timeout.String() +
			" (no connection attempt completed: host down, packets dropped, or the port's owner never finished the ZMTP handshake)")
	case !e.Sent:
		b.WriteString("connected to " + e.Endpoint + " but could not send the request within " + e.Timeout.String())
	case e.Cause != nil:
		b.WriteString("no usable reply from " + e.Endpoint + " within " + e.Timeout.String() +
			" (connected and request sent; the connection was closed: " + e.Cause.Error() + ")")
	default:
		b.WriteString("no reply from " + e.Endpoint + " within " + e.Timeout.String() +
			" (connected and request sent; the listener dropped it or its receive loop is dead")
		if e.Disconnected {
			b.WriteString("; the connection was lost while waiting")
		}
		b.WriteString(")")
	}
	b.WriteString(" for ")
	writeRequest(&b, e.Request)
	b.WriteString("; run `" + probeCommand(e.Endpoint, e.Request) + "` to see which step fails")
	return b.String()
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// probeCommand returns the CLI line that triages a failed handshake with
// endpoint for req: `zmqguard probe ENDPOINT --pp P --tp T`, plus
// `--variant vN` for a request other than V3.
func probeCommand(endpoint string, req Request) string {
	s := "zmqguard probe " + endpoint + " --pp " + strconv.Itoa(req.PP) + " --tp " + strconv.Itoa(req.TP)
	if req.Variant == V1 || req.Variant == V2 {
		s += " --variant " + strings.ToLower(req.Variant.String())
	}
	return s
}

func writeRequest(b *strings.Builder, r Request) {
	b.WriteString(variantName(r.Variant))
	b.WriteString(" request for pp_rank " + strconv.Itoa(r.PP) + ", tp_rank " + strconv.Itoa(r.TP))
}

// variantName is r.Variant's name, V3 for the zero value (which
// AppendRequest encodes as V3).
func variantName(v Variant) string {
	if v < V1 || v > V3 {
		return V3.String()
	}
	return v.String()
}

// fetchError is the detail of ErrRefused, ErrBadReplyShape,
// ErrUndecodablePayload and ErrRejected.
type fetchError struct {
	// Kind is the sentinel the error matches.
	Kind error
	// Endpoint is the remote endpoint, Request the request.
	Endpoint string
	Request  Request
	// Detail says what went wrong; it never holds raw peer bytes.
	Detail string
	// Err is the cause, if any (a dial error, a *decodeguard.Error).
	Err error
}

// Error implements error.
func (e *fetchError) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	b.WriteString(": " + e.Endpoint + ", ")
	writeRequest(&b, e.Request)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, e.Kind) true.
func (e *fetchError) Is(target error) bool { return target == e.Kind }

// Unwrap returns the cause.
func (e *fetchError) Unwrap() error { return e.Err }

// hashMismatchError is the detail of ErrHashMismatch.
type hashMismatchError struct {
	Endpoint string
	Request  Request
	// Local is the expected hash, Remote the payload's (as sent, possibly
	// hostile: render it with nixlwire.SafeText before printing it elsewhere).
	Local, Remote string
}

// Error names both hashes.
func (e *hashMismatchError) Error() string {
	var b strings.Builder
	b.WriteString("handshake: compatibility hash mismatch with " + e.Endpoint + ", ")
	writeRequest(&b, e.Request)
	b.WriteString(": local " + nixlwire.SafeText(e.Local) + ", remote " + nixlwire.SafeText(e.Remote) +
		" (prefill and decode differ in vLLM version, model, dtype, attention backend or another factor)")
	return b.String()
}

// Is makes errors.Is(err, ErrHashMismatch) true.
func (e *hashMismatchError) Is(target error) bool { return target == ErrHashMismatch }

// engineIDMismatchError is the detail of ErrEngineIDMismatch.
type engineIDMismatchError struct {
	Endpoint string
	Request  Request
	// Expected is the expected engine id, Got the metadata's (as sent).
	Expected, Got string
}

// Error names both engine ids.
func (e *engineIDMismatchError) Error() string {
	var b strings.Builder
	b.WriteString("handshake: engine id mismatch with " + e.Endpoint + ", ")
	writeRequest(&b, e.Request)
	b.WriteString(": expected " + nixlwire.SafeText(e.Expected) + ", got " + nixlwire.SafeText(e.Got))
	return b.String()
}

// Is makes errors.Is(err, ErrEngineIDMismatch) true.
func (e *engineIDMismatchError) Is(target error) bool { return target == ErrEngineIDMismatch }

// events records what a Fetch's REQ socket saw of its peer.
type events struct {
	mu           sync.Mutex
	connected    bool
	disconnected bool
	failed       int
	lastFail     error
	handshake    bool  // the last failure was a ZMTP handshake refusal
	violation    error // why the socket closed an established connection, if for bad input
}

func (ev *events) observe(e socket.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	switch e.Kind {
	case socket.EventConnected:
		ev.connected = true
	case socket.EventDisconnected:
		ev.disconnected = true
		if e.Reason.Valid() && e.Err != nil {
			ev.violation = e.Err
		}
	case socket.EventDialFailed, socket.EventHandshakeFailed, socket.EventRejected:
		ev.failed++
		ev.lastFail = e.Err
		ev.handshake = e.Kind != socket.EventDialFailed
	}
}

// Fetch performs one handshake as a vLLM decode worker does: it opens a
// fresh REQ socket to endpoint, sends req in its variant's form, waits for
// the reply for at most opts.Timeout, closes the socket, and then checks the
// reply in vLLM's order: frame count → (V3) timestamp → payload decodes →
// compatibility hash equals opts.ExpectedHash → agent metadata decodes →
// engine id equals opts.ExpectedEngineID. An explicit error reply from a
// zmqguard listener is reported as such ([ErrRejected]) before the hash
// check. A zero req.Variant means V3. Fetch also refuses a payload or
// metadata map that lacks a key every vLLM release sends (as msgspec
// does).
//
// Errors: a configuration error for a V2/V3 request without ExpectedHash
// or SkipHashCheck, or for a negative Timeout; a malformed endpoint gives socket.New's "socket: bad endpoint" error; when ctx ends
// first, its error is returned (wrapped); every other failure matches one of
// ErrTimeout, ErrRefused, ErrBadReplyShape, ErrUndecodablePayload,
// ErrRejected, ErrHashMismatch and ErrEngineIDMismatch under errors.Is.
//
// Like vLLM's client, Fetch keeps trying to connect until the timeout (the
// listener may still be starting); only then does it tell a refused
// connection (ErrRefused: every attempt failed) from a silent one
// (ErrTimeout).
func Fetch(ctx context.Context, endpoint string, req Request, opts ClientOptions) (Reply, error) {
	if req.Variant < V1 || req.Variant > V3 {
		req.Variant = V3
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = defaultTimeout
	}
	if timeout < 0 {
		return Reply{}, fmt.Errorf("handshake: ClientOptions.Timeout %v is negative", opts.Timeout)
	}
	if req.Variant != V1 && opts.ExpectedHash == "" && !opts.SkipHashCheck {
		return Reply{}, errNoExpectedHash
	}
	var ev events
	sopts := opts.Socket
	user := sopts.OnEvent
	sopts.OnEvent = func(e socket.Event) {
		ev.observe(e)
		if user != nil {
			user(e)
		}
	}
	sock, err := socket.New("REQ", sopts)
	if err != nil {
		return Reply{}, fmt.Errorf("handshake: client socket: %w", err)
	}
	defer sock.Close()
	if err := sock.Dial(endpoint); err != nil {
		return Reply{}, fmt.Errorf("handshake: %w", err)
	}

	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := appendRequest(make([]byte, 0, 32), req)
	start := time.Now()
	startSec := monotonicSeconds()
	sent := false
	err = sock.Send(tctx, body)
	var msg socket.Msg
	if err == nil {
		sent = true
		msg, err = sock.Recv(tctx)
	}
	rtt := time.Since(start)
	endSec := monotonicSeconds()
	if err != nil {
		if ctx.Err() != nil {
			return Reply{}, fmt.Errorf("handshake: fetch from %s: %w", endpoint, ctx.Err())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return Reply{}, fmt.Errorf("handshake: fetch from %s: %w", endpoint, err)
		}
		ev.mu.Lock()
		defer ev.mu.Unlock()
		if !ev.connected && ev.failed > 0 {
			detail := "no connection in " + timeout.String() + " (" + strconv.Itoa(ev.failed) + " attempts failed"
			if ev.handshake {
				detail += "; the peer refused the ZMTP handshake or is not a ZMTP listener"
			}
			detail += "); run `" + probeCommand(endpoint, req) + "` to triage"
			return Reply{}, &fetchError{Kind: ErrRefused, Endpoint: endpoint, Request: req, Detail: detail, Err: ev.lastFail}
		}
		return Reply{}, &timeoutError{Endpoint: endpoint, Request: req, Timeout: timeout,
			Connected: ev.connected || sent, Sent: sent, Disconnected: ev.disconnected, Cause: ev.violation}
	}
	r := Reply{Request: req, RTT: rtt}
	if err := decodeReply(&r, msg.Frames, endpoint, opts); err != nil {
		return Reply{}, err
	}
	if req.Variant == V3 {
		r.ClockOffset = r.RemoteTime - (startSec+endSec)/2
	}
	return r, nil
}

// decodeReply checks and decodes the reply's body frames (delimiter
// already stripped) into r, in vLLM's order.
func decodeReply(r *Reply, frames [][]byte, endpoint string, opts ClientOptions) error {
	req := r.Request
	fail := func(kind error, detail string, cause error) error {
		return &fetchError{Kind: kind, Endpoint: endpoint, Request: req, Detail: detail, Err: cause}
	}
	want := 1
	if req.Variant == V3 {
		want = 2
	}
	if len(frames) != want {
		return fail(ErrBadReplyShape, "expected "+strconv.Itoa(want)+" frames after the delimiter, got "+strconv.Itoa(len(frames))+
			" (sizes "+frameSizes(frames)+")", nil)
	}
	if req.Variant == V3 {
		ts, err := nixlwire.ParseTimestamp(frames[1])
		if err != nil {
			return fail(ErrBadReplyShape, "timestamp frame", err)
		}
		r.RemoteTime = ts
	}
	metaBytes := frames[0]
	if req.Variant == V1 {
		if text, ok := errorReplyText(frames[0]); ok {
			return fail(ErrRejected, nixlwire.SafeText(text), nil)
		}
	} else {
		p, err := nixlwire.DecodePayloadLimits(frames[0], opts.Limits)
		if err == nil {
			var unknown int
			unknown, err = requireKeys(frames[0], payloadKeys, payloadKeys)
			r.UnknownKeys += unknown
		}
		if err != nil {
			return fail(ErrUndecodablePayload, "NixlHandshakePayload", err)
		}
		if strings.HasPrefix(p.CompatibilityHash, nixlwire.ErrorReplyPrefix) && len(p.AgentMetadataBytes) == 0 {
			return fail(ErrRejected, nixlwire.SafeText(p.CompatibilityHash), nil)
		}
		if !opts.SkipHashCheck && p.CompatibilityHash != opts.ExpectedHash {
			return &hashMismatchError{Endpoint: endpoint, Request: req, Local: opts.ExpectedHash, Remote: p.CompatibilityHash}
		}
		r.CompatibilityHash = p.CompatibilityHash
		metaBytes = p.AgentMetadataBytes
	}
	m, err := nixlwire.DecodeAgentMetadataLimits(metaBytes, opts.Limits)
	if err == nil {
		var unknown int
		unknown, err = requireKeys(metaBytes, metadataKeys, metadataKnownKeys)
		r.UnknownKeys += unknown
	}
	if err != nil {
		return fail(ErrUndecodablePayload, "NixlAgentMetadata", err)
	}
	if opts.ExpectedEngineID != "" && m.EngineID != opts.ExpectedEngineID {
		return &engineIDMismatchError{Endpoint: endpoint, Request: req, Expected: opts.ExpectedEngineID, Got: m.EngineID}
	}
	r.Metadata = fromWire(&m)
	return nil
}

// The keys without a default in every release: msgspec refuses a
// message without them ("Object missing required field"), and so does
// Fetch, although nixlwire's decoders fill in zero values.
var (
	payloadKeys  = []string{"compatibility_hash", "agent_metadata_bytes"}
	metadataKeys = []string{"engine_id", "agent_metadata", "kv_caches_base_addr", "device_id", "num_blocks",
		"block_lens", "kv_cache_layout", "block_size"}
	// metadataKnownKeys are every NixlAgentMetadata key nixlwire decodes
	// (connector version 12); a reply's other keys are counted in
	// Reply.UnknownKeys.
	metadataKnownKeys = append(slices.Clone(metadataKeys), "block_strides", "ssm_sizes", "attn_backend_name",
		"physical_blocks_per_logical_kv_block", "region_num_blocks", "region_group_ids", "region_names",
		"region_mem_types", "dcp_size", "pcp_size", "region_members")
)

// requireKeys checks that the msgpack map b (already decoded successfully,
// so well-formed) has every one of keys, at most 64 of them, and returns
// how many of its keys are not in known.
func requireKeys(b []byte, keys, known []string) (unknown int, err error) {
	n, rest, err := msgp.ReadMapHeaderBytes(b)
	if err != nil {
		return 0, decodeguard.NewError(decodeguard.ReasonDecode, "expected a map")
	}
	var seen uint64
	for range n {
		var key []byte
		switch msgp.NextType(rest) {
		case msgp.StrType:
			key, rest, err = msgp.ReadStringZC(rest)
		default:
			rest, err = msgp.Skip(rest)
		}
		if err == nil {
			rest, err = msgp.Skip(rest)
		}
		if err != nil {
			return 0, decodeguard.NewError(decodeguard.ReasonDecode, "malformed map")
		}
		for i, k := range keys {
			if string(key) == k {
				seen |= 1 << i
			}
		}
		if !slices.Contains(known, string(key)) {
			unknown++
		}
	}
	for i, k := range keys {
		if seen&(1<<i) == 0 {
			return unknown, decodeguard.NewError(decodeguard.ReasonDecode, "missing required key "+k)
		}
	}
	return unknown, nil
}

// errorReplyText reports whether b is a V1 error reply (a msgpack str
// starting with nixlwire.ErrorReplyPrefix) and returns its text.
func errorReplyText(b []byte) (string, bool) {
	if msgp.NextType(b) != msgp.StrType {
		return "", false
	}
	s, rest, err := msgp.ReadStringZC(b)
	if err != nil || len(rest) != 0 || !strings.HasPrefix(string(s), nixlwire.ErrorReplyPrefix) {
		return "", false
	}
	return string(s), true
}

func frameSizes(frames [][]byte) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, f := range frames {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(len(f)))
	}
	b.WriteByte(']')
	return b.String()
}
