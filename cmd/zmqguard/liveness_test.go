package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/sockopt"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
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
	if err := sockopt.Verify(l.options()); err != nil {
		t.Fatal(err)
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
	for _, want := range []string{`"heartbeat_timeouts":3`, `"back_output":2`, `"front":1`, `"back_publish":0`, `"silent_engines":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("coordinator report %s lacks %s", b, want)
		}
	}
	st.SilentEngines = []coordinator.EngineSilence{{EngineIndex: 3, BackOutput: 1, BackPublish: 2}}
	if b, _ := json.Marshal(newCoordinatorReport(st)); !strings.Contains(string(b),
		`"silent_engines":[{"engine_index":3,"back_output":1,"back_publish":2}]`) {
		t.Errorf("coordinator report %s lacks silent_engines", b)
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
	// A live engine (dppeer.Engine: subscribed, READY, answering
	// PINGs) so that start-up is over; then a bare PUSH that pushes one
	// EngineCoreOutputs naming engine 0 (msgpack [0]: every later field at
	// its default) and says nothing more: its silence is engine 0's.
	eng := engineReady(t, ctx, p)
	defer eng.Close()
	backOut := p.logField("coordinator running", "back_output", 20*time.Second)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(backOut, "tcp://"), "PUSH", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := writeFlush(c, []byte{0x91, 0x00}); err != nil {
		t.Fatal(err)
	}
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
	// The exit line names the engine: silent_engines holds engine 0 with
	// its back output disconnect.
	var line struct {
		SilentEngines []coordinator.EngineSilence `json:"silent_engines"`
	}
	if err := json.Unmarshal([]byte(p.stdout.String()), &line); err != nil {
		t.Fatal(err)
	}
	if len(line.SilentEngines) != 1 || line.SilentEngines[0].EngineIndex != 0 || line.SilentEngines[0].BackOutput < 1 {
		t.Fatalf("exit line's silent_engines %+v, want engine 0 with a back_output disconnect: %s", line.SilentEngines, p.stdout)
	}
	if !strings.Contains(p.stderr.String(), "engine went silent") {
		t.Errorf("no \"engine went silent\" warning:\n%s", p.stderr)
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
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"), "REQ", nil, nil)
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

// engineReady dials a dppeer.Engine to p's back sockets and waits for
// its READY.
func engineReady(t *testing.T, ctx context.Context, p *proc) *dppeer.Engine {
	t.Helper()
	eng, err := dppeer.DialEngine(dppeer.EngineConfig{
		BackPublish: p.logField("coordinator running", "back_publish", 20*time.Second),
		BackOutput:  p.logField("coordinator running", "back_output", 20*time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := eng.WaitReady(rctx); err != nil {
		eng.Close()
		t.Fatalf("no READY: %v\n%s", err, p.stderr)
	}
	return eng
}

// writeFlush writes one message and sends it.
func writeFlush(c *zmtpguard.Conn, frames ...[]byte) error {
	if err := c.WriteMessage(frames...); err != nil {
		return err
	}
	return c.Flush()
}
