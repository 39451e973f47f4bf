package handshake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// ProbeStep is the outcome of one step of [Probe].
type ProbeStep struct {
	// Name is the step: "connect", "zmtp", "request", "reply", "payload".
	Name string
	// OK reports success; Detail says what was seen, or why it failed.
	OK     bool
	Detail string
	// Duration is how long the step took.
	Duration time.Duration
}

// ProbeReport is what [Probe] found, step by step, for the CLI.
type ProbeReport struct {
	// Endpoint and Request are what was probed.
	Endpoint string
	Request  Request
	// Steps holds each step run, in order; the last one failed unless OK.
	Steps []ProbeStep
	// ConnectTime is the TCP (or unix socket) connect time, HandshakeTime
	// the ZMTP greeting and READY exchange, RTT from sending the request to
	// receiving the whole reply.
	ConnectTime, HandshakeTime, RTT time.Duration
	// PeerType is the socket type the peer announced in its READY (ROUTER
	// for a vLLM listener); nil before the ZMTP step succeeded.
	PeerType zmtpguard.SocketType
	// ReplyFrames holds the size of each reply frame, delimiter included.
	ReplyFrames []int
	// CompatibilityHash is the payload's hash (V2/V3), EngineID the
	// metadata's engine id, RemoteTime the V3 timestamp. They are as sent
	// by the peer: print them through a safe rendering (quoted when short
	// printable ASCII), never raw.
	CompatibilityHash, EngineID string
	RemoteTime                  float64
	// Metadata is the decoded agent metadata, nil unless OK.
	Metadata *NixlAgentMetadata
	// OK is true only when the metadata was received and decoded.
	OK bool
}

// ProbeOptions configures [Probe]. The zero value probes as vLLM's client
// would connect: NULL security, 5 s per step, no output.
type ProbeOptions struct {
	// Timeout bounds each network step. Zero means 5 s; a negative value is
	// an error.
	Timeout time.Duration
	// Out receives one line per step (nil discards them).
	Out io.Writer
	// Curve, when set, makes the ZMTP step a CURVE handshake as the client
	// (Curve.Server must be false; SecretKey is the probe's own key pair,
	// ServerKey the listener's public key), for a listener that serves
	// CURVE only. Nil speaks NULL, as vLLM does.
	Curve *zmtpguard.CurveConfig
}

// Probe triages the handshake with a listener step by step, printing one
// line per step to opts.Out and stopping at the first failure:
//
//	connect  TCP (or unix socket) connect, timed
//	zmtp     ZMTP 3 greeting and READY under zmtpguard, as a REQ: the peer's socket type, timed
//	request  the request frames ["", body] written
//	reply    the whole reply read: its frame count and sizes, round-trip time
//	payload  payload and agent metadata decoded: engine id, compatibility hash, V3 clock
//
// Each line reads "ok: ..." or "FAIL: ..." with the likely causes, so an
// operator can tell which of the reasons a handshake timeout has (nothing
// listening, not ZMTP, a dead receive loop, a rank not served, a payload
// from another release) applies. opts.Timeout bounds each network step;
// ctx bounds the whole probe. A zero req.Variant means V3. With opts.Curve
// set, the zmtp step is a CURVE client handshake (its line then says so,
// and a failure names the likely causes: a wrong server key, or a client
// key the listener does not admit); a Curve with Server set is refused
// before anything is dialed (ErrRefused).
//
// The returned error is nil exactly when report.OK; otherwise it matches
// one of ErrRefused (connect or ZMTP handshake failed), ErrTimeout,
// ErrBadReplyShape, ErrUndecodablePayload or ErrRejected under
// errors.Is, or is ctx's error, or a configuration error (a negative
// opts.Timeout) before anything is dialed.
func Probe(ctx context.Context, endpoint string, req Request, opts ProbeOptions) (ProbeReport, error) {
	if req.Variant < V1 || req.Variant > V3 {
		req.Variant = V3
	}
	timeout, w := opts.Timeout, opts.Out
	if timeout == 0 {
		timeout = defaultTimeout
	}
	if timeout < 0 {
		return ProbeReport{Endpoint: endpoint, Request: req},
			fmt.Errorf("handshake: ProbeOptions.Timeout %v is negative", opts.Timeout)
	}
	if w == nil {
		w = io.Discard
	}
	p := &prober{w: w, rep: ProbeReport{Endpoint: endpoint, Request: req}, curve: opts.Curve}
	var b strings.Builder
	writeRequest(&b, req)
	mech := ""
	if opts.Curve != nil {
		mech = ", CURVE"
	}
	fmt.Fprintf(w, "probe %s: %s, timeout %s%s\n", endpoint, b.String(), timeout, mech)
	err := p.run(ctx, endpoint, req, timeout)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("handshake: probe %s: %w", endpoint, ctx.Err())
		}
		fmt.Fprintf(w, "result: FAIL (%s)\n", p.rep.Steps[len(p.rep.Steps)-1].Name)
		return p.rep, err
	}
	p.rep.OK = true
	fmt.Fprintf(w, "result: ok: metadata received and decoded in %s\n", p.rep.RTT)
	return p.rep, nil
}

type prober struct {
	w     io.Writer
	rep   ProbeReport
	curve *zmtpguard.CurveConfig
}

func (p *prober) ok(name string, d time.Duration, detail string) {
	p.rep.Steps = append(p.rep.Steps, ProbeStep{Name: name, OK: true, Detail: detail, Duration: d})
	fmt.Fprintf(p.w, "%-8s ok: %s\n", name+":", detail)
}

// fail records a failed step and returns the matching error. hint says
// what the failure likely means; the step's line shows it followed by the
// cause, and the returned error holds each once.
func (p *prober) fail(name string, d time.Duration, kind error, hint string, cause error) error {
	line := hint
	if cause != nil {
		if line != "" {
			line += ": "
		}
		line += cause.Error()
	}
	p.rep.Steps = append(p.rep.Steps, ProbeStep{Name: name, Detail: line, Duration: d})
	fmt.Fprintf(p.w, "%-8s FAIL: %s\n", name+":", line)
	detail := name
	if hint != "" {
		detail += ": " + hint
	}
	return &fetchError{Kind: kind, Endpoint: p.rep.Endpoint, Request: p.rep.Request, Detail: detail, Err: cause}
}

func (p *prober) run(ctx context.Context, endpoint string, req Request, timeout time.Duration) error {
	if p.curve != nil && p.curve.Server {
		return p.fail("connect", 0, ErrRefused, "", errors.New("handshake: ProbeOptions.Curve must be a client config (Server false)"))
	}
	network, addr, err := dialTarget(endpoint)
	if err != nil {
		return p.fail("connect", 0, ErrRefused, "", err)
	}

	// connect
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	nc, err := (&net.Dialer{}).DialContext(cctx, network, addr)
	cancel()
	p.rep.ConnectTime = time.Since(t0)
	if err != nil {
		return p.fail("connect", p.rep.ConnectTime, connectKind(err), connectHint(network, addr, timeout, err), err)
	}
	defer nc.Close()
	p.ok("connect", p.rep.ConnectTime, network+" "+nc.RemoteAddr().String()+" in "+p.rep.ConnectTime.String())

	// zmtp
	t0 = time.Now()
	cfg := zmtpguard.Config{HandshakeTimeout: timeout, Curve: p.curve}
	conn, err := zmtpguard.Handshake(ctx, nc, "REQ", nil, &cfg)
	p.rep.HandshakeTime = time.Since(t0)
	if err != nil {
		var v *zmtpguard.Violation
		kind := ErrRefused
		hint := "the port is open but the peer is not a ZMTP 3 socket a REQ may talk to (another service on that port?)"
		isV := errors.As(err, &v)
		switch {
		case p.curve != nil:
			hint = "the CURVE handshake failed: the server key given is not the listener's, the listener does not" +
				" admit this client key, or the listener does not serve CURVE"
		case isV && v.Reason == decodeguard.ReasonHandshake && len(v.Prefix) >= 17 && string(v.Prefix[12:17]) == "CURVE":
			// The peer's greeting names the CURVE mechanism.
			hint = "the peer demands CURVE: give the listener's public key (and a client certificate it admits)"
		}
		if isV && strings.Contains(strings.ToLower(v.Detail), "deadline") || errors.Is(err, os.ErrDeadlineExceeded) {
			kind = ErrTimeout
			hint = "the peer accepted the connection but did not finish the ZMTP greeting within " + timeout.String() +
				" (a wedged accept loop, or not a ZeroMQ socket)"
		}
		return p.fail("zmtp", p.rep.HandshakeTime, kind, hint, err)
	}
	defer conn.Close()
	p.rep.PeerType = conn.Peer().SocketType
	note := ""
	if p.rep.PeerType != "ROUTER" {
		note = " (vLLM's listener is a ROUTER)"
	}
	if p.curve != nil {
		note += ", CURVE (encrypted, server key verified)"
	}
	p.ok("zmtp", p.rep.HandshakeTime, "peer is "+string(p.rep.PeerType)+note+", handshake "+p.rep.HandshakeTime.String())

	// request
	body := appendRequest(nil, req)
	deadline := time.Now().Add(timeout)
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	nc.SetDeadline(deadline)
	t0 = time.Now()
	err = conn.WriteMessage([]byte{}, body)
	if err == nil {
		err = conn.Flush()
	}
	if err != nil {
		return p.fail("request", time.Since(t0), ErrTimeout, "could not write the request", err)
	}
	p.ok("request", time.Since(t0), strconv.Itoa(len(body))+" bytes, "+requestText(req))

	// reply
	var m zmtpguard.Message
	for {
		err = conn.ReadMessage(&m)
		if err != nil || m.Command == "" {
			break
		}
		if m.Command == zmtpwire.CmdPing {
			if conn.WriteCommand(zmtpwire.CmdPong, zmtpwire.PongContext(m.Frames[0])) == nil {
				conn.Flush()
			}
		}
	}
	p.rep.RTT = time.Since(t0)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return p.fail("reply", p.rep.RTT, ErrTimeout, "no reply within "+timeout.String()+
				": the connection works but the listener did not answer (its receive loop is dead or stuck,"+
				" it does not serve "+Rank{req.PP, req.TP}.String()+" and drops the request, or it expects another"+
				" request variant than "+req.Variant.String()+")", err)
		}
		if errors.Is(err, io.EOF) {
			return p.fail("reply", p.rep.RTT, ErrBadReplyShape, "the listener closed the connection without answering", err)
		}
		return p.fail("reply", p.rep.RTT, ErrBadReplyShape, "reading the reply", err)
	}
	for _, f := range m.Frames {
		p.rep.ReplyFrames = append(p.rep.ReplyFrames, len(f))
	}
	want := 2
	shape := `["", metadata]`
	switch req.Variant {
	case V2:
		shape = `["", payload]`
	case V3:
		want, shape = 3, `["", payload, timestamp]`
	}
	got := strconv.Itoa(len(m.Frames)) + " frames, sizes " + frameSizes(m.Frames)
	if len(m.Frames) != want || len(m.Frames[0]) != 0 {
		hint := ""
		if len(m.Frames) > 0 && len(m.Frames[0]) != 0 {
			hint = " (no empty delimiter first: not a ROUTER/REP reply)"
		} else if req.Variant == V3 && len(m.Frames) == 2 {
			hint = " (looks like a V2 listener: try --variant v2)"
		}
		return p.fail("reply", p.rep.RTT, ErrBadReplyShape, "expected "+shape+", got "+got+hint, nil)
	}
	p.ok("reply", p.rep.RTT, got+", round trip "+p.rep.RTT.String())

	// payload
	t0 = time.Now()
	var r Reply
	r.Request = req
	// The probe reports the hash rather than checking it.
	if err := decodeReply(&r, m.Frames[1:], p.rep.Endpoint, ClientOptions{SkipHashCheck: true}); err != nil {
		var fe *fetchError
		if !errors.As(err, &fe) {
			return p.fail("payload", time.Since(t0), ErrUndecodablePayload, "", err)
		}
		hint := fe.Detail
		switch fe.Kind {
		case ErrRejected:
			hint = "the listener answered with an error: " + hint
		case ErrUndecodablePayload:
			hint += " (a listener from another connector version, or not a NIXL side channel)"
		}
		return p.fail("payload", time.Since(t0), fe.Kind, hint, fe.Err)
	}
	p.rep.CompatibilityHash = r.CompatibilityHash
	p.rep.EngineID = r.Metadata.EngineID
	p.rep.RemoteTime = r.RemoteTime
	p.rep.Metadata = &r.Metadata
	detail := "engine_id " + nixlwire.SafeText(r.Metadata.EngineID)
	if req.Variant != V1 {
		detail += ", compatibility_hash " + nixlwire.SafeText(r.CompatibilityHash)
	}
	detail += ", " + strconv.Itoa(len(r.Metadata.KVCachesBaseAddr)) + " regions, " +
		strconv.FormatInt(int64(r.Metadata.NumBlocks), 10) + " blocks, layout " + nixlwire.SafeText(r.Metadata.KVCacheLayout)
	if req.Variant == V3 {
		detail += ", remote clock " + strconv.FormatFloat(r.RemoteTime, 'f', 3, 64) + " s"
	}
	p.ok("payload", time.Since(t0), detail)
	return nil
}

// requestText renders a request as vLLM builds it.
func requestText(r Request) string {
	switch r.Variant {
	case V1:
		return `V1 b"get_meta_msg"`
	case V2:
		return "V2 (GET_META_MSG, " + strconv.Itoa(r.TP) + ")"
	}
	return "V3 (GET_META_MSG, " + strconv.Itoa(r.PP) + ", " + strconv.Itoa(r.TP) + ")"
}

// connectKind classifies a failed connect: a timeout is ErrTimeout,
// anything else ErrRefused.
func connectKind(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	return ErrRefused
}

func connectHint(network, addr string, timeout time.Duration, err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens on " + addr + " (is the prefill engine up, and is the port its side-channel port plus its data-parallel index?)"
	case connectKind(err) == ErrTimeout:
		return "no answer within " + timeout.String() + " (the host is down or a firewall drops the packets)"
	}
	return network + " " + addr
}

// dialTarget turns a ZeroMQ endpoint ("tcp://host:port", "ipc://path", or
// a bare "host:port") into a network and address for net.Dial.
func dialTarget(endpoint string) (network, addr string, err error) {
	scheme, rest, found := strings.Cut(endpoint, "://")
	if !found {
		scheme, rest = "tcp", endpoint
	}
	switch scheme {
	case "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil || host == "" || host == "*" || port == "" {
			return "", "", fmt.Errorf("bad endpoint %s: want tcp://host:port", nixlwire.SafeText(endpoint))
		}
		return "tcp", rest, nil
	case "ipc":
		if rest == "" {
			return "", "", fmt.Errorf("bad endpoint %s: want ipc://path", nixlwire.SafeText(endpoint))
		}
		return "unix", rest, nil
	}
	return "", "", fmt.Errorf("bad endpoint %s: want tcp://host:port or ipc://path", nixlwire.SafeText(endpoint))
}
