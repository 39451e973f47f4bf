package main

import (
	"encoding/json"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
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
