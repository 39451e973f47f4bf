package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func TestLivenessFlags(t *testing.T) {
	parse := func(args ...string) (*livenessFlags, error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		l := addLivenessFlags(fs)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return l, l.check()
	}
	l, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if o := l.options(); o.HeartbeatInterval != 2*time.Second || o.HeartbeatTimeout != 6*time.Second {
		t.Fatalf("defaults: %v / %v, want 2s / 6s", o.HeartbeatInterval, o.HeartbeatTimeout)
	}
	l, err = parse("--heartbeat-interval", "0")
	if err != nil {
		t.Fatal(err)
	}
	if o := l.options(); o.HeartbeatInterval >= 0 {
		t.Fatalf("--heartbeat-interval 0 gave %v, want heartbeats off (negative)", o.HeartbeatInterval)
	}
	if o := l.options(); o.Verify() != nil {
		t.Fatal(o.Verify())
	}
	for _, bad := range [][]string{{"--heartbeat-interval", "-1s"}, {"--heartbeat-timeout", "0"}} {
		if _, err := parse(bad...); err == nil || !strings.Contains(err.Error(), "heartbeat") {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
}

func TestReportsCountHeartbeatTimeouts(t *testing.T) {
	var st coordinator.Stats
	st.BackOutput.Socket.HeartbeatTimeouts = 2
	st.Front.Socket.HeartbeatTimeouts = 1
	b, err := json.Marshal(newCoordinatorReport(st))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"heartbeat_timeouts":3`, `"back_output":2`, `"front":1`, `"back_publish":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("coordinator report %s lacks %s", b, want)
		}
	}
	var ls handshake.ListenerStats
	ls.Socket.HeartbeatTimeouts = 4
	if b, _ := json.Marshal(newListenerReport("tcp://x:1", ls)); !strings.Contains(string(b), `"heartbeat_timeouts":4`) {
		t.Errorf("listener report %s lacks heartbeat_timeouts", b)
	}
}

// A coordinator run with short heartbeats drops an engine that went silent
// (a handshaken connection that then says nothing, its kernel still
// ACKing), logs it at warn and counts it in its exit line.
func TestCoordinatorDropsSilentEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "coordinator", "--engines", "1", "--log-format", "json",
		"--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0",
		"--heartbeat-interval", "100ms", "--heartbeat-timeout", "300ms")
	backOut := p.logField("coordinator running", "back_output", 20*time.Second)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(backOut, "tcp://"), zmtpguard.Push, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stderr.String(), "silent past the heartbeat timeout") {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat disconnect logged within 20 s:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.stderr.String(), `"level":"WARN"`) {
		t.Errorf("the silent engine is not logged at warn:\n%s", p.stderr)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("coordinator exit %d\nstderr:\n%s", code, p.stderr)
	}
	m := p.jsonLine()
	if num(m, "heartbeat_timeouts") < 1 || num(m, "heartbeat_timeouts_by_socket.back_output") < 1 {
		t.Fatalf("exit line does not count the heartbeat timeout: %s", p.stdout)
	}
	if _, stdout, stderr := runBin(t, 20*time.Second, "coordinator", "-h"); !strings.Contains(stdout+stderr, "-heartbeat-interval") ||
		!strings.Contains(stdout+stderr, "-heartbeat-timeout") {
		t.Errorf("coordinator -h does not list the heartbeat flags:\n%s%s", stdout, stderr)
	}
}

// handshake-listener drops a decode client that connected and went silent,
// and counts it as heartbeat_timeouts in its exit line.
func TestListenerDropsSilentClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "prefill-7", "--log-format", "json",
		"--heartbeat-interval", "100ms", "--heartbeat-timeout", "300ms")
	ep := p.logField("handshake listener serving", "endpoint", 20*time.Second)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"), zmtpguard.Req, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stderr.String(), "silent past the heartbeat timeout") {
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat disconnect logged within 20 s:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("handshake-listener exit %d\nstderr:\n%s", code, p.stderr)
	}
	if m := p.jsonLine(); num(m, "heartbeat_timeouts") < 1 {
		t.Fatalf("exit line does not count the heartbeat timeout: %s", p.stdout)
	}
}
