package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// TestFanInFlagErrors: --fan-in-replay belongs to a --fan-in and needs
// {host}; --replay does not apply to a --fan-in.
func TestFanInFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv-events", "--fan-in-replay", "tcp://{host}:5558"}, "--fan-in-replay must follow the --fan-in"},
		{[]string{"kv-events", "--connect", "tcp://127.0.0.1:1", "--fan-in-replay", "tcp://{host}:5558"}, "--fan-in-replay must follow the --fan-in"},
		{[]string{"kv-events", "--fan-in", "tcp://127.0.0.1:0", "--fan-in-replay", "tcp://10.0.0.1:5558"}, "has no {host}"},
		{[]string{"kv-index", "--fan-in", "tcp://127.0.0.1:0", "--replay", "tcp://127.0.0.1:1", "--http", "127.0.0.1:0"}, "takes --fan-in-replay, not --replay"},
	} {
		code, _, stderr := runBin(t, 20*time.Second, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want a refusal saying %q\n%s", c.args, code, c.want, stderr)
		}
	}
}

// connectPublisher is an engine whose PUB connects to ep with topic.
func connectPublisher(t *testing.T, ep, topic string) *kvevents.Publisher {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: ep, Topic: topic, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// TestKVEventsFanIn: kv-events --fan-in prints each engine under its
// topic, and a departed line once an engine's connection has been gone for
// --engine-ttl.
func TestKVEventsFanIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-events", "--fan-in", "tcp://127.0.0.1:0", "--engine-ttl", "300ms", "--log-format", "json")
	defer p.terminate(10 * time.Second)
	ep := p.logField("kv-events following", "endpoint", 20*time.Second)
	a, b := connectPublisher(t, ep, "kv@127.0.0.1@m-a"), connectPublisher(t, ep, "kv@127.0.0.1@m-b")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stdout.String(), `"source": "kv@127.0.0.1@m-a"`) || !strings.Contains(p.stdout.String(), `"source": "kv@127.0.0.1@m-b"`) {
		if time.Now().After(deadline) {
			t.Fatalf("both engines not printed within 30 s:\n%s\n%s", p.stdout, p.stderr)
		}
		a.Publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(1)}})
		b.Publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(2)}})
		time.Sleep(20 * time.Millisecond)
	}
	a.Close()
	want := `{"source": "kv@127.0.0.1@m-a", "type": "departed"}`
	for !strings.Contains(p.stdout.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30 s:\n%s\n%s", want, p.stdout, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(p.stdout.String(), `{"source": "kv@127.0.0.1@m-b", "type": "departed"}`) {
		t.Errorf("m-b, connected, departed:\n%s", p.stdout)
	}
}

// TestKVIndexFanIn: kv-index --fan-in follows each engine under its topic
// in /stats, and drops a departed one.
func TestKVIndexFanIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-index", "--fan-in", "tcp://127.0.0.1:0", "--fan-in-replay", "tcp://{host}:5558", "--engine-ttl", "300ms",
		"--http", "127.0.0.1:0", "--log-format", "json")
	defer p.terminate(10 * time.Second)
	ep := p.logField("kv-index following", "endpoint", 20*time.Second)
	if tpl := p.logField("kv-index following", "fan_in_replay", 20*time.Second); tpl != "tcp://{host}:5558" {
		t.Errorf("following line's fan_in_replay %q", tpl)
	}
	addr := p.logField("kv-index endpoint serving", "http_addr", 20*time.Second)
	a, b := connectPublisher(t, ep, "kv@127.0.0.1@m-a"), connectPublisher(t, ep, "kv@127.0.0.1@m-b")
	hc := &http.Client{Timeout: 10 * time.Second}
	stats := func() map[string]any {
		resp, err := hc.Get("http://" + addr + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st map[string]any
		json.NewDecoder(resp.Body).Decode(&st)
		srcs, _ := st["sources"].(map[string]any)
		return srcs
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		srcs := stats()
		ea, _ := srcs["kv@127.0.0.1@m-a"].(map[string]any)
		eb, _ := srcs["kv@127.0.0.1@m-b"].(map[string]any)
		if ea != nil && eb != nil && num(ea, "batches") > 0 && num(eb, "batches") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("both engines not in /stats within 30 s: %v\n%s", srcs, p.stderr)
		}
		a.Publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(1)}})
		b.Publish(kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(2)}})
		time.Sleep(20 * time.Millisecond)
	}
	a.Close()
	for {
		srcs := stats()
		if srcs["kv@127.0.0.1@m-a"] == nil && srcs["kv@127.0.0.1@m-b"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m-a not retired (or m-b gone) within 30 s: %v\n%s", srcs, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.waitStderr("fan-in engine retired", 10*time.Second)
}
