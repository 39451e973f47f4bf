package vllmhash

import (
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/internal/ref/kvkey"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// storedOf is a BlockStored of the given digests (int form) and tokens.
func storedOf(ds []Digest, tokens []int64, bs int, med string) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: tokens, BlockSize: int64(bs), Medium: kvevents.Some(med)}
	for _, d := range ds {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(d.Uint64()))
	}
	return ev
}

func engineOf(t *testing.T, r kvindex.ScoreResult, name string) kvindex.EngineScore {
	t.Helper()
	for _, e := range r.Engines {
		if e.Engine == name {
			return e
		}
	}
	return kvindex.EngineScore{Engine: name}
}

// RunIndexRules checks vLLM-key mode's rules on an Index over backend be:
// routing by vLLM's hashes, LoRA separation, tiers and placeholders,
// removal, a lost range (maybe, never certain) and a reset.
func runIndexRules(t *testing.T, be kvindex.Backend) {
	h, err := New(algoSHA256CBOR, "0")
	if err != nil {
		t.Fatal(err)
	}
	const bs = 16
	x, err := kvindex.New(kvindex.Config{Keys: h.Keys, BlockSize: bs, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	tokens := make([]int64, 8*bs)
	for i := range tokens {
		tokens[i] = int64(1000 + i*7)
	}
	ds, err := h.Request(&Request{TokenIDs: tokens}, bs)
	if err != nil {
		t.Fatal(err)
	}
	lds, _ := h.Request(&Request{TokenIDs: tokens, LoRAName: "l"}, bs)
	apply := func(engine string, evs ...kvevents.Event) {
		t.Helper()
		if err := x.ApplyEvents(engine, evs); err != nil {
			t.Fatal(err)
		}
	}
	score := func(r *Request) kvindex.ScoreResult {
		t.Helper()
		res, err := x.Score(kvindex.ScoreRequest{Tokens: r.TokenIDs, Request: r})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	want := func(r kvindex.ScoreResult, engine string, blocks, maybe int) {
		t.Helper()
		e := engineOf(t, r, engine)
		if e.Blocks != blocks || e.MaybeBlocks != maybe || e.Tokens != blocks*bs {
			t.Fatalf("%s: %+v, want %d certain, %d maybe", engine, e, blocks, maybe)
		}
	}
	// a holds all 8 blocks on GPU (two events, no parent needed); b the
	// first 3; c the LoRA variant.
	apply("a", storedOf(ds[:5], tokens[:5*bs], bs, "GPU"), storedOf(ds[5:], tokens[5*bs:], bs, "GPU"))
	apply("b", storedOf(ds[:3], tokens[:3*bs], bs, "GPU"))
	apply("c", storedOf(lds, tokens, bs, "GPU"))
	r := score(&Request{TokenIDs: tokens})
	if best, ok := r.Best(); !ok || best.Engine != "a" || r.PromptBlocks != 8 || len(r.Engines) != 2 {
		t.Fatalf("score: %+v", r)
	}
	want(r, "a", 8, 8)
	want(r, "b", 3, 3)
	if best, _ := score(&Request{TokenIDs: tokens, LoRAName: "l"}).Best(); best.Engine != "c" || best.Blocks != 8 {
		t.Fatalf("LoRA request: best %+v", best)
	}
	// b offloads its blocks to CPU (placeholders): its any-medium prefix
	// stays 3, with a CPU tier of 3.
	ph := kvevents.Event{Type: kvevents.BlockStored, Medium: kvevents.Some("CPU")}
	for _, d := range ds[:3] {
		ph.BlockHashes = append(ph.BlockHashes, kvevents.IntHash(d.Uint64()))
	}
	ph.BlockHashes = append(ph.BlockHashes, kvevents.IntHash(12345)) // unknown: not indexed
	apply("b", ph)
	e := engineOf(t, score(&Request{TokenIDs: tokens}), "b")
	if e.Blocks != 3 || len(e.Tiers) != 2 || e.Tiers[0].Medium != "CPU" || e.Tiers[0].Blocks != 3 || e.Tiers[1].Blocks != 3 {
		t.Fatalf("b with a CPU tier: %+v", e)
	}
	// a evicts block 4 from GPU: its prefix is 4.
	apply("a", kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"), BlockHashes: []kvevents.Hash{kvevents.IntHash(ds[4].Uint64())}})
	want(score(&Request{TokenIDs: tokens}), "a", 4, 4)
	// a lost range: a's blocks are only maybe; stored again, certain.
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateLost, Source: "a", From: 3, To: 5}); err != nil {
		t.Fatal(err)
	}
	r = score(&Request{TokenIDs: tokens})
	want(r, "a", 0, 4)
	if best, _ := r.Best(); best.Engine != "b" {
		t.Fatalf("after a's lost range best is %+v, want b", best)
	}
	apply("a", storedOf(ds[:2], tokens[:2*bs], bs, "GPU"))
	want(score(&Request{TokenIDs: tokens}), "a", 2, 4)
	// b's publisher restarts: b holds nothing.
	if err := x.Apply(kvevents.Update{Kind: kvevents.UpdateReset, Source: "b"}); err != nil {
		t.Fatal(err)
	}
	want(score(&Request{TokenIDs: tokens}), "b", 0, 0)
	// AllBlocksCleared clears c.
	apply("c", kvevents.Event{Type: kvevents.AllBlocksCleared})
	if r := score(&Request{TokenIDs: tokens, LoRAName: "l"}); len(r.Engines) != 0 {
		t.Fatalf("after c's clear: %+v", r)
	}
	st := x.Stats()
	// Not indexed: the placeholder's unknown hash, nothing else.
	notIndexed := st.UnknownPlaceholders + st.PartialGroups + st.Refused
	if st.Resets != 1 || st.Losses != 1 || notIndexed != 1 || st.Scores == 0 || st.Removed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestIndexRulesMemory(t *testing.T) { runIndexRules(t, nil) }

// TestIndexGoldenKVEvents: vLLM's own KV-event bytes (sha256 pickle hashes,
// PYTHONHASHSEED=0) decoded by kvevents and applied to a vLLM-key Index;
// a request with the same tokens (and LoRA) finds every block.
func TestIndexGoldenKVEvents(t *testing.T) {
	h, err := New(algoSHA256, "0")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, v := range golden.Load(t, "kv-events") {
		if v.Message() != "kv_event_batch" || !strings.HasPrefix(v.ID, "kv-gpu-") ||
			!strings.Contains(v.Notes, "hash_block_tokens with the sha256 (pickle) hash") {
			continue
		}
		frames, err := v.Frames()
		if err != nil || len(frames) != 3 {
			t.Fatalf("%s: %d frames %v", v.ID, len(frames), err)
		}
		var b kvevents.Batch
		if err := kvevents.DecodeBatch(frames[2], &b); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		for _, ev := range b.Events {
			if ev.Type != kvevents.BlockStored || ev.ParentBlockHash.Valid || len(ev.TokenIDs) == 0 ||
				int64(len(ev.TokenIDs)) != int64(len(ev.BlockHashes))*ev.BlockSize || (ev.KVCacheSpecKind.Valid && kvkey.PartialKind(ev.KVCacheSpecKind.V)) {
				continue
			}
			if ev.HasExtraKeys {
				// Only plain and LoRA-only requests: a multimodal or salted
				// request's features are not in the event.
				var lora []byte
				if ev.LoraName.Valid {
					lora = kvindex.LoraExtraKeys(ev.LoraName.V, 1)[0]
				}
				plain := true
				for _, k := range ev.ExtraKeys {
					plain = plain && (len(k) == 1 && k[0] == 0xc0 || lora != nil && string(k) == string(lora))
				}
				if !plain {
					continue
				}
			}
			x, err := kvindex.New(kvindex.Config{Keys: h.Keys, BlockSize: int(ev.BlockSize)})
			if err != nil {
				t.Fatal(err)
			}
			if err := x.ApplyEvents("engine", []kvevents.Event{ev}); err != nil {
				t.Fatal(err)
			}
			req := &Request{TokenIDs: ev.TokenIDs}
			if ev.LoraName.Valid {
				req.LoRAName = ev.LoraName.V
			}
			r, err := x.Score(kvindex.ScoreRequest{Tokens: req.TokenIDs, Request: req})
			if err != nil {
				t.Fatal(err)
			}
			if best, ok := r.Best(); !ok || best.Blocks != len(ev.BlockHashes) {
				t.Fatalf("%s: vLLM-key Score %+v, want %d blocks", v.ID, r, len(ev.BlockHashes))
			}
			x.Close()
			checked++
		}
	}
	t.Logf("%d BlockStored events of vLLM's scored in vLLM-key mode", checked)
	if checked < 3 {
		t.Fatalf("only %d events checked", checked)
	}
}
