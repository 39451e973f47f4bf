package handshake

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/socket"
)

// scriptedRouter is a ROUTER that answers every request with reply(body)
// (frames after the delimiter), or not at all when reply returns nil.
func scriptedRouter(t testing.TB, reply func(body []byte) [][]byte) string {
	t.Helper()
	r, err := socket.New("ROUTER", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			m, err := r.Recv(ctx)
			if err != nil {
				return
			}
			if len(m.Frames) != 3 {
				continue
			}
			out := reply(m.Frames[2])
			if out == nil {
				continue
			}
			frames := append([][]byte{bytes.Clone(m.Frames[0]), {}}, out...)
			r.Send(ctx, frames...)
		}
	}()
	t.Cleanup(func() {
		cancel()
		r.Close()
		wg.Wait()
	})
	return r.Endpoint()
}

// closedPort returns a loopback endpoint nobody listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "tcp://" + addr
}

func TestFetchTimeoutError(t *testing.T) {
	ep := scriptedRouter(t, func([]byte) [][]byte { return nil }) // reads, never answers
	req := Request{Variant: V3, PP: 2, TP: 3}
	_, err := Fetch(testCtx(t, 20*time.Second), ep, req, ClientOptions{Timeout: 300 * time.Millisecond, SkipHashCheck: true, Socket: fastOpts()})
	var te *timeoutError
	if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want a *timeoutError", err)
	}
	if te.Endpoint != ep || te.Request != req || !te.Connected || !te.Sent || te.Timeout != 300*time.Millisecond {
		t.Errorf("detail %+v", te)
	}
	msg := err.Error()
	for _, want := range []string{ep, "V3 request", "pp_rank 2", "tp_rank 3", "no reply", "300ms",
		"run `zmqguard probe " + ep + " --pp 2 --tp 3`"} {
		if !strings.Contains(msg, want) {
			t.Errorf("timeout message lacks %q:\n%s", want, msg)
		}
	}
	for _, sentinel := range []error{ErrRefused, ErrBadReplyShape, ErrUndecodablePayload, ErrHashMismatch, ErrEngineIDMismatch, ErrRejected} {
		if errors.Is(err, sentinel) {
			t.Errorf("timeout matches %v", sentinel)
		}
	}
	if got := probeCommand(ep, Request{Variant: V2, TP: 1}); got != "zmqguard probe "+ep+" --pp 0 --tp 1 --variant v2" {
		t.Errorf("ProbeCommand V2 = %q", got)
	}
}

func TestFetchRefused(t *testing.T) {
	ep := closedPort(t)
	_, err := Fetch(testCtx(t, 20*time.Second), ep, Request{Variant: V3, TP: 1}, ClientOptions{Timeout: 300 * time.Millisecond, SkipHashCheck: true, Socket: fastOpts()})
	var fe *fetchError
	if !errors.Is(err, ErrRefused) || !errors.As(err, &fe) || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrRefused", err)
	}
	msg := err.Error()
	for _, want := range []string{ep, "attempts failed", "zmqguard probe " + ep + " --pp 0 --tp 1", "refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refused message lacks %q:\n%s", want, msg)
		}
	}
}

// A port that accepts TCP but speaks no ZMTP: the handshake is refused.
func TestFetchNotZMTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	_, err = Fetch(testCtx(t, 20*time.Second), "tcp://"+ln.Addr().String(), Request{Variant: V3},
		ClientOptions{Timeout: 300 * time.Millisecond, SkipHashCheck: true, Socket: fastOpts()})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "ZMTP") {
		t.Fatalf("got %v, want ErrRefused naming ZMTP", err)
	}
}

func TestFetchBadEndpointAndContext(t *testing.T) {
	if _, err := Fetch(context.Background(), "udp://x:1", Request{}, ClientOptions{SkipHashCheck: true}); err == nil || !strings.Contains(err.Error(), "socket: bad endpoint") {
		t.Errorf("bad endpoint: %v", err)
	}
	ep := scriptedRouter(t, func([]byte) [][]byte { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err := Fetch(ctx, ep, Request{Variant: V3}, ClientOptions{Timeout: time.Minute, SkipHashCheck: true, Socket: fastOpts()})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestFetchRequiresHash: an empty ExpectedHash no longer skips the
// compatibility check quietly: a V2/V3 Fetch without it or SkipHashCheck
// fails at once, before connecting; V1, which has no hash, does not need it.
func TestFetchRequiresHash(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	ctx := testCtx(t, 30*time.Second)
	for _, v := range []Variant{V2, V3} {
		_, err := Fetch(ctx, l.Endpoint(), Request{Variant: v}, ClientOptions{Socket: fastOpts()})
		if !errors.Is(err, errNoExpectedHash) || !strings.Contains(err.Error(), "SkipHashCheck") {
			t.Fatalf("%v without ExpectedHash: %v", v, err)
		}
		if _, err := Fetch(ctx, l.Endpoint(), Request{Variant: v}, ClientOptions{SkipHashCheck: true, Socket: fastOpts()}); err != nil {
			t.Fatalf("%v with SkipHashCheck: %v", v, err)
		}
	}
	if _, err := Fetch(ctx, l.Endpoint(), Request{Variant: V1}, ClientOptions{Socket: fastOpts()}); err != nil {
		t.Fatalf("V1 without ExpectedHash: %v", err)
	}
}

func TestFetchHashAndEngineMismatch(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	ep := l.Endpoint()
	ctx := testCtx(t, 30*time.Second)
	other := strings.Repeat("0", 64)

	for _, v := range []Variant{V2, V3} {
		_, err := Fetch(ctx, ep, Request{Variant: v}, ClientOptions{ExpectedHash: other, Socket: fastOpts()})
		var he *hashMismatchError
		if !errors.As(err, &he) || !errors.Is(err, ErrHashMismatch) {
			t.Fatalf("%v: got %v, want a hash mismatch", v, err)
		}
		if he.Local != other || he.Remote != testHash || !strings.Contains(err.Error(), `local "`+other+`", remote "`+testHash+`"`) {
			t.Errorf("%v: %+v / %v", v, he, err)
		}
		// Disabled check.
		if _, err := Fetch(ctx, ep, Request{Variant: v}, ClientOptions{ExpectedHash: other, SkipHashCheck: true, Socket: fastOpts()}); err != nil {
			t.Errorf("%v with SkipHashCheck: %v", v, err)
		}
	}
	// V1 carries no hash: never checked.
	if _, err := Fetch(ctx, ep, Request{Variant: V1}, ClientOptions{ExpectedHash: other, Socket: fastOpts()}); err != nil {
		t.Errorf("V1 with ExpectedHash: %v", err)
	}
	for _, v := range []Variant{V1, V2, V3} {
		_, err := Fetch(ctx, ep, Request{Variant: v}, ClientOptions{ExpectedHash: testHash, ExpectedEngineID: "decode-\x1b[2J", Socket: fastOpts()})
		var ee *engineIDMismatchError
		if !errors.As(err, &ee) || !errors.Is(err, ErrEngineIDMismatch) || errors.Is(err, ErrHashMismatch) {
			t.Fatalf("%v: got %v, want an engine id mismatch", v, err)
		}
		if ee.Got != "prefill-7" || !strings.Contains(err.Error(), `got "prefill-7"`) || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%v: %q", v, err.Error())
		}
	}
}

func TestFetchBadReplies(t *testing.T) {
	good := encodedPayload(t, "prefill-7", testHash, Rank{})
	ts := nixlwire.AppendTimestamp(nil, 1.5)
	mismatched := encodedPayload(t, "prefill-7", strings.Repeat("f", 64), Rank{})
	badMeta, _ := (&nixlwire.NixlHandshakePayload{CompatibilityHash: testHash, AgentMetadataBytes: []byte{0x92, 0x01}}).MarshalMsg(nil)
	cases := []struct {
		name  string
		req   Request
		reply [][]byte
		want  error
		has   string
	}{
		{"V3 one frame", Request{Variant: V3}, [][]byte{good}, ErrBadReplyShape, "expected 2 frames"},
		{"V3 three frames", Request{Variant: V3}, [][]byte{good, ts, ts}, ErrBadReplyShape, "got 3"},
		{"V2 two frames", Request{Variant: V2}, [][]byte{good, ts}, ErrBadReplyShape, "expected 1 frames"},
		{"V3 bad timestamp", Request{Variant: V3}, [][]byte{good, []byte("\xa3abc")}, ErrBadReplyShape, "timestamp"},
		{"V3 scanner payload", Request{Variant: V3}, [][]byte{{0x45}, ts}, ErrUndecodablePayload, "NixlHandshakePayload"},
		{"V2 escape payload", Request{Variant: V2}, [][]byte{[]byte("\x1b[31mhello")}, ErrUndecodablePayload, "NixlHandshakePayload"},
		{"V2 hash before metadata", Request{Variant: V2}, [][]byte{mismatched}, ErrHashMismatch, "ffff"},
		{"V3 bad metadata", Request{Variant: V3}, [][]byte{badMeta, ts}, ErrUndecodablePayload, "NixlAgentMetadata"},
		{"V1 payload instead of metadata", Request{Variant: V1}, [][]byte{good}, ErrUndecodablePayload, "NixlAgentMetadata"},
		{"V1 str", Request{Variant: V1}, [][]byte{msgp.AppendString(nil, "no")}, ErrUndecodablePayload, "NixlAgentMetadata"},
		{"V2 error reply", Request{Variant: V2}, [][]byte{appendErrorPayload(nil, nixlwire.ErrorReplyPrefix+"busy\x1b")}, ErrRejected, "len="},
		{"V1 error reply", Request{Variant: V1}, [][]byte{msgp.AppendString(nil, nixlwire.ErrorReplyPrefix+"nope")}, ErrRejected, `"zmqguard-error: nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := scriptedRouter(t, func([]byte) [][]byte { return c.reply })
			_, err := Fetch(testCtx(t, 20*time.Second), ep, c.req, ClientOptions{ExpectedHash: testHash, Socket: fastOpts()})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.has) {
				t.Errorf("error lacks %q: %s", c.has, msg)
			}
			if strings.ContainsAny(msg, "\x1b\x00") {
				t.Errorf("raw bytes in error: %q", msg)
			}
			if c.want == ErrUndecodablePayload && !decodeguard.IsBadInput(err) {
				t.Errorf("undecodable payload not classified: %v", err)
			}
		})
	}
}

func TestFetchClockOffset(t *testing.T) {
	l := startListener(t, ListenerConfig{Clock: func() float64 { return monotonicSeconds() + 1000 }})
	r := mustFetch(t, l.Endpoint(), Request{Variant: V3}, Rank{0, 0})
	// The remote clock runs 1000 s ahead; the estimate is off by at most
	// the round trip.
	if d := r.ClockOffset - 1000; d < -r.RTT.Seconds() || d > r.RTT.Seconds() {
		t.Errorf("clock offset %v, RTT %v", r.ClockOffset, r.RTT)
	}
}

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"engine-0":               `"engine-0"`,
		"a\"b":                   `"a\"b"`,
		"\x1b[2J":                "len=4 hex=1b5b324a",
		"é":                      "len=2 hex=c3a9",
		strings.Repeat("a", 129): "len=129 hex=" + strings.Repeat("61", 64) + "…",
	} {
		if got := nixlwire.SafeText(in); got != want {
			t.Errorf("nixlwire.SafeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFetchOversizeReplyCause: a reply over the client's MaxMessageSize
// makes the REQ socket close the connection; the timeout error keeps that
// cause instead of blaming the listener.
func TestFetchOversizeReplyCause(t *testing.T) {
	l := startListener(t, ListenerConfig{})
	o := fastOpts()
	o.Guard.MaxMessageSize = 64
	_, err := Fetch(testCtx(t, 20*time.Second), l.Endpoint(), Request{Variant: V3},
		ClientOptions{Timeout: 2 * time.Second, SkipHashCheck: true, Socket: o})
	var te *timeoutError
	if !errors.As(err, &te) || te.Cause == nil || decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Fatalf("got %v, want a timeout caused by an oversize reply", err)
	}
	if msg := err.Error(); strings.Contains(msg, "receive loop is dead") || !strings.Contains(msg, "connection was closed") {
		t.Errorf("message: %s", msg)
	}
}

// TestConfigConvention: a zero field means its documented default, and a
// negative timeout is an error that names the field and the value, made
// before anything is dialed (issue 30's one config convention). The old
// code took a negative timeout for the default.
func TestConfigConvention(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	_, err := Fetch(ctx, closedPort(t), Request{}, ClientOptions{Timeout: -time.Second, SkipHashCheck: true})
	if err == nil || err.Error() != "handshake: ClientOptions.Timeout -1s is negative" {
		t.Fatalf("Fetch with a negative timeout: %v", err)
	}
	rep, err := Probe(ctx, closedPort(t), Request{}, ProbeOptions{Timeout: -time.Millisecond})
	if err == nil || err.Error() != "handshake: ProbeOptions.Timeout -1ms is negative" || len(rep.Steps) != 0 {
		t.Fatalf("Probe with a negative timeout: %v, steps %v", err, rep.Steps)
	}
	_, err = NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: testPayloads(t), V1Rank: Rank{PP: -1}})
	if err == nil || err.Error() != "handshake: ListenerConfig.V1Rank pp_rank=-1 tp_rank=0 is negative" {
		t.Fatalf("NewListener with a negative V1Rank: %v", err)
	}

	// The zero values work: the listener's Name, Clock, Logger and socket
	// options, the client's Timeout (5 s) and socket options.
	l, err := NewListener(ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: testPayloads(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	sctx, cancel := context.WithCancel(ctx)
	go func() { served <- l.Serve(sctx) }()
	defer func() {
		cancel()
		<-served
		l.Close()
	}()
	r, err := Fetch(ctx, l.Endpoint(), Request{Variant: V3}, ClientOptions{ExpectedHash: testHash})
	if err != nil || r.CompatibilityHash != testHash || r.RemoteTime <= 0 {
		t.Fatalf("Fetch with zero options: %+v, %v", r, err)
	}
	if rep, err := Probe(ctx, l.Endpoint(), Request{}, ProbeOptions{}); err != nil || !rep.OK {
		t.Fatalf("Probe with zero options: %+v, %v", rep, err)
	}
}
