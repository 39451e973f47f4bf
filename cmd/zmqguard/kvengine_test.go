package main

import (
	"context"
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/kvevents"
)

// sglangTrailingBatch is an SGLang batch [ts, events, attn_dp_rank] whose
// events carry elements after SGLang's own fields (HAND-BUILT: SGLang's
// open proposals add a removal reason after BlockRemoved's medium, SGLang
// issue #39604 / PR #39620, and SWA metadata after BlockStored's medium,
// SGLang PR #26579): a BlockStored [tag, [-7], nil, [5, 6], 2, nil, "GPU",
// 4096, 12], a BlockRemoved [tag, [-5], "GPU", "evicted"] and an
// AllBlocksCleared [tag]. Three trailing elements in all.
func sglangTrailingBatch() []byte {
	p := msgp.AppendArrayHeader(nil, 3)
	p = msgp.AppendFloat64(p, 12.5)
	p = msgp.AppendArrayHeader(p, 3)
	p = msgp.AppendArrayHeader(p, 9)
	p = msgp.AppendString(p, kvevents.BlockStored)
	p = msgp.AppendInt64(msgp.AppendArrayHeader(p, 1), -7)
	p = msgp.AppendNil(p)
	p = msgp.AppendInt64(msgp.AppendInt64(msgp.AppendArrayHeader(p, 2), 5), 6)
	p = msgp.AppendInt64(p, 2)
	p = msgp.AppendNil(p)
	p = msgp.AppendString(p, "GPU")
	p = msgp.AppendInt64(p, 4096)
	p = msgp.AppendInt64(p, 12)
	p = msgp.AppendArrayHeader(p, 4)
	p = msgp.AppendString(p, kvevents.BlockRemoved)
	p = msgp.AppendInt64(msgp.AppendArrayHeader(p, 1), -5)
	p = msgp.AppendString(p, "GPU")
	p = msgp.AppendString(p, "evicted")
	p = msgp.AppendString(msgp.AppendArrayHeader(p, 1), kvevents.AllBlocksCleared)
	return msgp.AppendInt64(p, 0)
}

// runKVEventsSGLang publishes sglangTrailingBatch from an SGLang-format
// publisher (replay replies without a topic frame) and runs kv-events with
// args until it has printed count events, returning its lines.
func runKVEventsSGLang(t *testing.T, count int, args ...string) []map[string]any {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Engine: "sglang", Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@pod@m", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for range 3 {
		pub.PublishRaw(sglangTrailingBatch())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	all := append([]string{"kv-events", "--connect", pub.Endpoint(), "--replay", pub.ReplayEndpoint()}, args...)
	all = append(all, "--topic", "kv@", "--from-start", "--count", strconv.Itoa(count), "--log-format", "json")
	p := start(t, ctx, all...)
	for {
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
			pub.PublishRaw(sglangTrailingBatch())
			continue
		}
		break
	}
	if code := p.wait(time.Second); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	lines := kvLines(t, p.stdout.String())
	if len(lines) != count+1 {
		t.Fatalf("%d lines, want %d events and the counters:\n%s", len(lines), count, p.stdout)
	}
	return lines
}

// TestKVEventsEngineSGLang: kv-events --engine sglang, against an
// SGLang-format publisher whose events carry elements after SGLang's
// fields (hand-built), prints every event with SGLang's values (signed
// hashes, medium, tokens) and counts the trailing elements in
// unknown_fields; without --engine the same bytes are read at vLLM's
// positions, where a trailing element stands at a vLLM field of another
// type: the stores and removals are dropped (decode), only the clears
// print.
func TestKVEventsEngineSGLang(t *testing.T) {
	t.Run("sglang", func(t *testing.T) {
		lines := runKVEventsSGLang(t, 30, "--engine", "sglang")
		for i, l := range lines[:30] {
			hs, _ := l["block_hashes"].([]any)
			switch i % 3 {
			case 0:
				ts, _ := l["token_ids"].([]any)
				if l["type"] != kvevents.BlockStored || len(hs) != 1 || hs[0] != -7.0 || len(ts) != 2 || ts[0] != 5.0 ||
					ts[1] != 6.0 || l["block_size"] != 2.0 || l["medium"] != "GPU" || l["lora_name"] != nil || l["group_idx"] != nil {
					t.Fatalf("line %d: %v", i, l)
				}
			case 1:
				if l["type"] != kvevents.BlockRemoved || len(hs) != 1 || hs[0] != -5.0 || l["medium"] != "GPU" {
					t.Fatalf("line %d: %v", i, l)
				}
			case 2:
				if l["type"] != kvevents.AllBlocksCleared {
					t.Fatalf("line %d: %v", i, l)
				}
			}
		}
		c := lines[30]
		// Batches delivered after the count are counted too: 3 per batch.
		uf := num(c, "counters.total.unknown_fields")
		if batches := num(c, "counters.total.batches"); uf < 30 || uf != 3*batches {
			t.Fatalf("unknown_fields %v for %v batches: %v", uf, batches, c)
		}
		if d := num(c, "counters.total.dropped_events.decode"); d != 0 {
			t.Fatalf("dropped events %v: %v", d, c)
		}
		if num(c, "counters.total.events_by_type.block_stored") < 10 || num(c, "counters.total.events_by_type.block_removed") < 10 {
			t.Fatalf("counters: %v", c)
		}
	})
	t.Run("vllm-positions", func(t *testing.T) {
		lines := runKVEventsSGLang(t, 10)
		for i, l := range lines[:10] {
			if l["type"] != kvevents.AllBlocksCleared {
				t.Fatalf("line %d: %v (want only the clears, the other events dropped)", i, l)
			}
		}
		c := lines[10]
		if d := num(c, "counters.total.dropped_events.decode"); d < 20 || num(c, "counters.total.unknown_fields") != 0 {
			t.Fatalf("counters: %v", c)
		}
	})
}

// TestEngineFlag: --engine belongs to the --connect (or --bind) before it,
// and before any source is every source's default; a bad value, or a
// second --engine for one source, is a one-line usage error naming the
// flag, the value and what is accepted, in kv-events and kv-index.
func TestEngineFlag(t *testing.T) {
	var f kvSourcesFlag
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Var(kvSourceFlag{f: &f}, "connect", "")
	fs.Var(kvSourceFlag{f: &f, bind: true}, "bind", "")
	fs.Var(kvEngineFlag{f: &f}, "engine", "")
	if err := fs.Parse([]string{"--engine", "sglang", "--connect", "a", "--connect", "b", "--engine", "vllm", "--bind", "c"}); err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, s := range f.sources() {
		got = append(got, s.Name+"="+s.Engine)
	}
	if strings.Join(got, " ") != "a=sglang b=vllm c=sglang" {
		t.Fatalf("sources %v", got)
	}
	if f.list[0].Engine != "" {
		t.Fatal("sources changed the flag's list")
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"kv-events", "--connect", "tcp://127.0.0.1:1", "--engine", "sgl"}, []string{`"sgl"`, "-engine", "want vllm or sglang"}},
		{[]string{"kv-events", "--connect", "tcp://127.0.0.1:1", "--engine", "sglang", "--engine", "vllm"},
			[]string{`"vllm"`, "-engine", "tcp://127.0.0.1:1 already has --engine sglang"}},
		{[]string{"kv-events", "--engine", "vllm", "--engine", "sglang", "--connect", "tcp://127.0.0.1:1"},
			[]string{`"sglang"`, "-engine", "--engine vllm already given"}},
		{[]string{"kv-index", "--http", "127.0.0.1:0", "--connect", "tcp://127.0.0.1:1", "--engine", "SGLang"},
			[]string{`"SGLang"`, "-engine", "want vllm or sglang"}},
	} {
		code, _, stderr := runBin(t, 20*time.Second, c.args...)
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2, one line)\n%s", c.args, code, stderr)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: %q lacks %q", c.args, stderr, w)
			}
		}
	}
}
