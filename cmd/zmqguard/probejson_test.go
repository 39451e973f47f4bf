package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/vllm"
)

func TestJSONText(t *testing.T) {
	for in, want := range map[string]string{
		"c4941e55088415f46c555e8a6298011a51f7d5190be262529c6ea0414c811c9c": "c4941e55088415f46c555e8a6298011a51f7d5190be262529c6ea0414c811c9c",
		`prefill-"0"`:            `prefill-"0"`,
		"\x1b[31mred":            nixlwire.SafeText("\x1b[31mred"),
		strings.Repeat("a", 129): nixlwire.SafeText(strings.Repeat("a", 129)),
	} {
		if got := jsonText(in); got != want {
			t.Errorf("jsonText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestProbeJSONNoQuotes: probe --json against a listener writes the
// compatibility hash and engine id as the JSON strings themselves, not with
// literal quotes inside them ("\"c494…\"").
func TestProbeJSONNoQuotes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const hash = "c4941e55088415f46c555e8a6298011a51f7d5190be262529c6ea0414c811c9c"
	m := handshake.NixlAgentMetadata{EngineID: "prefill-0a1b", AgentMetadata: []byte("agent"), KVCachesBaseAddr: []uint64{1 << 40},
		NumBlocks: 10, BlockLens: []int64{4096}, KVCacheLayout: "HND", BlockSize: 16, AttnBackendName: "FLASH_ATTN",
		PhysicalBlocksPerLogicalKVBlock: 1, DCPSize: 1, PCPSize: 1}
	b, err := handshake.EncodePayload(hash, &m, vllm.Latest())
	if err != nil {
		t.Fatal(err)
	}
	l, err := handshake.NewListener(handshake.ListenerConfig{Endpoint: "tcp://127.0.0.1:0",
		Payloads: map[handshake.Rank][]byte{{}: b}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() { done <- l.Serve(sctx) }()
	defer func() {
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("listener did not stop within 10 s")
		}
	}()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"probe", l.Endpoint(), "--json"}, &out, &errb, false)
	var rep struct {
		OK       bool   `json:"ok"`
		Hash     string `json:"compatibility_hash"`
		EngineID string `json:"engine_id"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("probe --json: exit %d, %v\n%s\n%s", code, err, out.String(), errb.String())
	}
	if code != 0 || !rep.OK || rep.Hash != hash || rep.EngineID != "prefill-0a1b" {
		t.Fatalf("exit %d, report %+v\n%s", code, rep, out.String())
	}
}
