package handshake

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// checkProbeOutput checks that the probe printed one line per step, each
// "ok" but the last when failed, and never a raw control byte.
func checkProbeOutput(t *testing.T, out string, rep ProbeReport, failed string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\x00") {
		t.Errorf("raw bytes in probe output: %q", out)
	}
	for i, s := range rep.Steps {
		line := s.Name + ": ok: "
		if i == len(rep.Steps)-1 && failed != "" {
			line = s.Name + ": FAIL: "
			if s.Name != failed || s.OK {
				t.Errorf("last step %+v, want %s failed", s, failed)
			}
		} else if !s.OK {
			t.Errorf("step %+v not ok", s)
		}
		norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
		if !strings.Contains(norm(out), norm(line)) {
			t.Errorf("output lacks %q:\n%s", line, out)
		}
	}
}

func TestProbeLiveListener(t *testing.T) {
	l := startListener(t, ListenerConfig{Clock: func() float64 { return 12345.678 }})
	for _, req := range []Request{{Variant: V3, TP: 1}, {Variant: V2, TP: 1}, {Variant: V1}} {
		var out strings.Builder
		rep, err := Probe(testCtx(t, 20*time.Second), l.Endpoint(), req, ProbeOptions{Timeout: 5 * time.Second, Out: &out})
		t.Logf("probe output:\n%s", out.String())
		if err != nil || !rep.OK {
			t.Fatalf("%v: probe failed: %v", req.Variant, err)
		}
		if len(rep.Steps) != 5 || rep.PeerType != "ROUTER" || rep.EngineID != "prefill-7" || rep.Metadata == nil {
			t.Errorf("%v: report %+v", req.Variant, rep)
		}
		wantFrames := map[Variant]int{V1: 2, V2: 2, V3: 3}[req.Variant]
		if len(rep.ReplyFrames) != wantFrames || rep.ReplyFrames[0] != 0 {
			t.Errorf("%v: reply frames %v", req.Variant, rep.ReplyFrames)
		}
		if req.Variant == V3 && (rep.RemoteTime != 12345.678 || rep.CompatibilityHash != testHash) {
			t.Errorf("V3: remote time %v hash %q", rep.RemoteTime, rep.CompatibilityHash)
		}
		checkProbeOutput(t, out.String(), rep, "")
		if !strings.Contains(out.String(), "peer is ROUTER") || !strings.Contains(out.String(), "result: ok") {
			t.Errorf("output:\n%s", out.String())
		}
	}
}

func TestProbeClosedPort(t *testing.T) {
	ep := closedPort(t)
	var out strings.Builder
	rep, err := Probe(testCtx(t, 20*time.Second), ep, Request{Variant: V3}, ProbeOptions{Timeout: 2 * time.Second, Out: &out})
	if !errors.Is(err, ErrRefused) || rep.OK {
		t.Fatalf("got %v, want ErrRefused", err)
	}
	checkProbeOutput(t, out.String(), rep, "connect")
	if !strings.Contains(out.String(), "nothing listens on") {
		t.Errorf("output:\n%s", out.String())
	}
	// The cause appears once in the error, not once per layer.
	if n := strings.Count(err.Error(), "dial tcp"); n != 1 {
		t.Errorf("cause repeated %d times: %v", n, err)
	}
}

func TestProbeSilentListener(t *testing.T) {
	ep := scriptedRouter(t, func([]byte) [][]byte { return nil })
	var out strings.Builder
	rep, err := Probe(testCtx(t, 20*time.Second), ep, Request{Variant: V3, PP: 1, TP: 2}, ProbeOptions{Timeout: 300 * time.Millisecond, Out: &out})
	if !errors.Is(err, ErrTimeout) || rep.OK {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	checkProbeOutput(t, out.String(), rep, "reply")
	if !strings.Contains(out.String(), "no reply within 300ms") || !strings.Contains(out.String(), "pp_rank=1 tp_rank=2") {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestProbeFailures(t *testing.T) {
	// An explicit error reply for an unknown rank.
	l := startListener(t, ListenerConfig{ErrorReplies: true})
	var out strings.Builder
	rep, err := Probe(testCtx(t, 20*time.Second), l.Endpoint(), Request{Variant: V3, TP: 7}, ProbeOptions{Timeout: 5 * time.Second, Out: &out})
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("unknown rank: %v", err)
	}
	checkProbeOutput(t, out.String(), rep, "payload")
	if !strings.Contains(out.String(), "does not serve pp_rank=0 tp_rank=7") {
		t.Errorf("output:\n%s", out.String())
	}

	// A V2 listener asked for V3: the shape gives it away.
	ep := scriptedRouter(t, func([]byte) [][]byte { return [][]byte{encodedPayload(t, "x", testHash, Rank{})} })
	out.Reset()
	rep, err = Probe(testCtx(t, 20*time.Second), ep, Request{Variant: V3}, ProbeOptions{Timeout: 5 * time.Second, Out: &out})
	if !errors.Is(err, ErrBadReplyShape) {
		t.Fatalf("V2 reply to V3: %v", err)
	}
	checkProbeOutput(t, out.String(), rep, "reply")
	if !strings.Contains(out.String(), "try --variant v2") {
		t.Errorf("output:\n%s", out.String())
	}

	// Junk payload.
	ep = scriptedRouter(t, func([]byte) [][]byte { return [][]byte{[]byte("\x1b[2Jjunk")} })
	out.Reset()
	rep, err = Probe(testCtx(t, 20*time.Second), ep, Request{Variant: V2}, ProbeOptions{Timeout: 5 * time.Second, Out: &out})
	if !errors.Is(err, ErrUndecodablePayload) {
		t.Fatalf("junk payload: %v", err)
	}
	checkProbeOutput(t, out.String(), rep, "payload")

	// Not ZMTP: the connection works, the handshake does not.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n" + strings.Repeat("x", 64)))
		c.Close()
	}()
	defer wg.Wait()
	defer ln.Close()
	out.Reset()
	rep, err = Probe(testCtx(t, 20*time.Second), "tcp://"+ln.Addr().String(), Request{}, ProbeOptions{Timeout: 2 * time.Second, Out: &out})
	if !errors.Is(err, ErrRefused) || rep.Request.Variant != V3 {
		t.Fatalf("not ZMTP: %v", err)
	}
	checkProbeOutput(t, out.String(), rep, "zmtp")

	// Bad endpoints.
	for _, ep := range []string{"udp://1.2.3.4:5", "tcp://*:5600", "tcp://nohost", "ipc://"} {
		if _, err := Probe(testCtx(t, 5*time.Second), ep, Request{}, ProbeOptions{Timeout: time.Second}); !errors.Is(err, ErrRefused) ||
			!strings.Contains(err.Error(), "bad endpoint") {
			t.Errorf("%s: %v", ep, err)
		}
	}
}

func TestDialTarget(t *testing.T) {
	for in, want := range map[string][2]string{
		"tcp://127.0.0.1:5600": {"tcp", "127.0.0.1:5600"},
		"localhost:5600":       {"tcp", "localhost:5600"},
		"tcp://[::1]:5600":     {"tcp", "[::1]:5600"},
		"ipc:///tmp/x.sock":    {"unix", "/tmp/x.sock"},
	} {
		n, a, err := dialTarget(in)
		if err != nil || n != want[0] || a != want[1] {
			t.Errorf("dialTarget(%q) = %q %q %v", in, n, a, err)
		}
	}
}

// TestProbeNotZMTPCauseOnce: a port that answers HTTP fails the zmtp step;
// the error says so with the guard's cause exactly once.
func TestProbeNotZMTPCauseOnce(t *testing.T) {
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
	_, err = Probe(testCtx(t, 20*time.Second), "tcp://"+ln.Addr().String(), Request{Variant: V3}, ProbeOptions{Timeout: 2 * time.Second})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v, want ErrRefused", err)
	}
	var fe *fetchError
	if !errors.As(err, &fe) || fe.Err == nil {
		t.Fatalf("no cause: %v", err)
	}
	if n := strings.Count(err.Error(), fe.Err.Error()); n != 1 {
		t.Errorf("cause %q appears %d times in %q", fe.Err, n, err)
	}
}

// TestProbeWithCurve: ProbeWith completes against a CURVE-only listener
// with the right server key and an admitted client key, and fails the zmtp
// step, naming CURVE, with a wrong server key, with a key the listener does
// not admit, and without CURVE at all.
func TestProbeWithCurve(t *testing.T) {
	srvPub, srvSec, err := zmtpguard.GenerateCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	cliPub, cliSec, _ := zmtpguard.GenerateCurveKeyPair()
	_, strangerSec, _ := zmtpguard.GenerateCurveKeyPair()
	wrongPub, _, _ := zmtpguard.GenerateCurveKeyPair()
	o := fastOpts()
	o.Guard.Curve = &zmtpguard.CurveConfig{Server: true, SecretKey: srvSec, Authorize: func(key zmtpguard.CurveKey, _ net.Addr) (bool, string) { return key == cliPub, "" }, Logger: quiet}
	o.Logger = quiet
	l := startListener(t, ListenerConfig{Socket: o})
	req := Request{Variant: V3}

	var out strings.Builder
	rep, err := Probe(testCtx(t, 20*time.Second), l.Endpoint(), req, ProbeOptions{Timeout: 5 * time.Second, Out: &out,
		Curve: &zmtpguard.CurveConfig{SecretKey: cliSec, ServerKey: srvPub}})
	t.Logf("probe output:\n%s", out.String())
	if err != nil || !rep.OK || rep.EngineID != "prefill-7" {
		t.Fatalf("CURVE probe: %v, report %+v", err, rep)
	}
	checkProbeOutput(t, out.String(), rep, "")
	if !strings.Contains(out.String(), "CURVE (encrypted, server key verified)") {
		t.Errorf("zmtp line does not say CURVE:\n%s", out.String())
	}

	for name, c := range map[string]*zmtpguard.CurveConfig{
		"wrong server key": {SecretKey: cliSec, ServerKey: wrongPub},
		"unlisted key":     {SecretKey: strangerSec, ServerKey: srvPub},
		"no CURVE":         nil,
	} {
		out.Reset()
		rep, err := Probe(testCtx(t, 20*time.Second), l.Endpoint(), req, ProbeOptions{Timeout: 3 * time.Second, Out: &out, Curve: c})
		t.Logf("%s:\n%s", name, out.String())
		if !errors.Is(err, ErrRefused) && !errors.Is(err, ErrTimeout) || rep.OK {
			t.Fatalf("%s: got %v, want a refused handshake", name, err)
		}
		checkProbeOutput(t, out.String(), rep, "zmtp")
		want := "the CURVE handshake failed"
		if c == nil {
			want = "the peer demands CURVE"
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("%s: output lacks %q:\n%s", name, want, out.String())
		}
	}

	// A server config is refused before dialing.
	if _, err := Probe(testCtx(t, 20*time.Second), l.Endpoint(), req, ProbeOptions{Curve: o.Guard.Curve}); !errors.Is(err, ErrRefused) {
		t.Errorf("server Curve config: %v, want ErrRefused", err)
	}
}
