package main

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// TestKVPublishSGLang: kv-publish --engine sglang sends SGLang's format —
// one BlockStored per page with one signed hash, parents chaining the pages
// — and kv-events follows it live and through replay (SGLang's replies
// carry no topic frame), printing the hashes signed, as SGLang holds them.
func TestKVPublishSGLang(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := start(t, ctx, "kv-publish", "--engine", "sglang", "--bind", "tcp://127.0.0.1:0", "--replay-bind", "tcp://127.0.0.1:0",
		"--topic", "kv@pod@m", "--rate", "100", "--stored", "1", "--log-format", "json")
	ep := pub.logField("kv-publish", "endpoint", 20*time.Second)
	rep := pub.logField("kv-publish", "replay", 20*time.Second)
	// 9 events per batch from the second on: 4 pages stored, 1 removal.
	p := start(t, ctx, "kv-events", "--connect", ep, "--replay", rep, "--topic", "kv@", "--from-start", "--count", "40",
		"--log-format", "json")
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("kv-events: exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	lines := kvLines(t, p.stdout.String())
	if len(lines) != 41 {
		t.Fatalf("%d lines:\n%s", len(lines), p.stdout)
	}
	negative, stores := 0, 0
	var prev any
	for i, l := range lines[:40] {
		hs, _ := l["block_hashes"].([]any)
		if len(hs) != 1 {
			t.Fatalf("line %d: %d hashes, SGLang sends one per page: %v", i, len(hs), l)
		}
		if h, _ := hs[0].(float64); h < 0 {
			negative++
		}
		if l["type"] != "BlockStored" {
			continue
		}
		stores++
		if l["index"] != 0.0 && l["parent_block_hash"] != prev {
			t.Fatalf("line %d: parent %v, want the previous page's %v", i, l["parent_block_hash"], prev)
		}
		prev = hs[0]
		if ts, _ := l["token_ids"].([]any); len(ts) != 16 || l["block_size"] != 16.0 || l["lora_id"] != nil {
			t.Fatalf("line %d: %v", i, l)
		}
	}
	if negative == 0 || stores < 30 {
		t.Fatalf("%d negative hashes, %d stores in\n%s", negative, stores, p.stdout)
	}
	if !strings.Contains(p.stdout.String(), `[-`) {
		t.Fatalf("no hash printed signed:\n%s", p.stdout)
	}
	if code := pub.terminate(20 * time.Second); code != 0 {
		t.Fatalf("kv-publish exit %d\n%s", code, pub.stderr)
	}
}

// TestKVEventJSONSGLang: an event line shows SGLang's values as SGLang
// holds them: signed hashes as negative numbers, bigram token pairs as
// pairs, the medium name as sent.
func TestKVEventJSONSGLang(t *testing.T) {
	b := &kvevents.Batch{Events: []kvevents.Event{{Type: kvevents.BlockStored,
		BlockHashes:     []kvevents.Hash{kvevents.SignedHash(-7764800842587808876)},
		ParentBlockHash: kvevents.Some(kvevents.SignedHash(math.MinInt64)),
		TokenIDs:        []int64{6988, 111717, 111717, 64510}, TokenPairs: true, BlockSize: 2, Medium: kvevents.Some("CPU_PINNED")}},
		Index: []int{0}}
	line := string(appendEventJSON(nil, kvevents.Update{Kind: kvevents.UpdateBatch, Source: "sg", Batch: b}, 0))
	for _, want := range []string{`"block_hashes": [-7764800842587808876]`, `"parent_block_hash": -9223372036854775808`,
		`"token_ids": [[6988, 111717], [111717, 64510]]`, `"medium": "CPU_PINNED"`} {
		if !strings.Contains(line, want) {
			t.Errorf("%s lacks %s", line, want)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
}
