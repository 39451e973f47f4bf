package kvindex_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/socket"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// goldenBatch is one kv_event_batch vector, read from its JSON values (not
// from its bytes: the reference side of the test must not share the
// decoder under test).
type goldenBatch struct {
	id     string
	seq    uint64
	frames [][]byte
	events []kvevents.Event // from values.decoded.events
}

// jsonHash reads a hash rendered as a number, a decimal string or {"hex"}.
func jsonHash(t *testing.T, raw json.RawMessage) kvevents.Hash {
	t.Helper()
	var obj struct{ Hex string }
	if json.Unmarshal(raw, &obj) == nil && obj.Hex != "" {
		b, err := hex.DecodeString(obj.Hex)
		if err != nil {
			t.Fatal(err)
		}
		h, ok := kvevents.BytesHash(b)
		if !ok {
			t.Fatalf("bad bin hash %s", obj.Hex)
		}
		return h
	}
	s := strings.Trim(string(raw), `"`)
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || n.Sign() < 0 || n.BitLen() > 64 {
		t.Fatalf("bad int hash %s", raw)
	}
	return kvevents.IntHash(n.Uint64())
}

// msgpackOf encodes a JSON-rendered extra-keys value the way msgspec does
// (str, int, nested arrays, {"hex"} bytes, nil).
func msgpackOf(t *testing.T, v any) []byte {
	t.Helper()
	var b []byte
	var enc func(v any)
	enc = func(v any) {
		switch x := v.(type) {
		case nil:
			b = append(b, 0xc0)
		case string:
			switch n := len(x); {
			case n < 32:
				b = append(b, 0xa0|byte(n))
			case n < 256:
				b = append(b, 0xd9, byte(n))
			default:
				b = append(b, 0xda, byte(n>>8), byte(n))
			}
			b = append(b, x...)
		case json.Number:
			i, err := x.Int64()
			if err != nil {
				t.Fatalf("extra key number %s", x)
			}
			switch {
			case i >= 0 && i < 128:
				b = append(b, byte(i))
			case i < 0 && i >= -32:
				b = append(b, byte(int8(i)))
			case i >= 0 && i < 256:
				b = append(b, 0xcc, byte(i))
			case i >= -128 && i < 0:
				b = append(b, 0xd0, byte(int8(i)))
			default:
				t.Fatalf("extra key number %d: encoding not needed by the vectors", i)
			}
		case []any:
			if len(x) >= 16 {
				t.Fatalf("extra keys array of %d", len(x))
			}
			b = append(b, 0x90|byte(len(x)))
			for _, e := range x {
				enc(e)
			}
		case map[string]any:
			h, _ := x["hex"].(string)
			raw, err := hex.DecodeString(h)
			if err != nil || len(raw) > 255 {
				t.Fatalf("extra key bytes %v", x)
			}
			b = append(b, 0xc4, byte(len(raw)))
			b = append(b, raw...)
		default:
			t.Fatalf("extra key of type %T", v)
		}
	}
	enc(v)
	return b
}

func loadGoldenBatches(t *testing.T) []goldenBatch {
	var out []goldenBatch
	for _, v := range golden.Load(t, "kv-events") {
		if v.Message() != "kv_event_batch" {
			continue
		}
		var vals struct {
			Seq     uint64
			Decoded struct {
				Events []map[string]json.RawMessage
			}
		}
		if err := json.Unmarshal(v.Values, &vals); err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		fr, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		gb := goldenBatch{id: v.ID, seq: vals.Seq, frames: fr}
		for _, m := range vals.Decoded.Events {
			gb.events = append(gb.events, jsonEvent(t, m))
		}
		out = append(out, gb)
	}
	if len(out) < 30 {
		t.Fatalf("only %d kv_event_batch vectors", len(out))
	}
	return out
}

func jsonEvent(t *testing.T, m map[string]json.RawMessage) kvevents.Event {
	t.Helper()
	var ev kvevents.Event
	var typ string
	_ = json.Unmarshal(m["type"], &typ)
	switch typ {
	case "BlockStored":
		ev.Type = kvevents.BlockStored
	case "BlockRemoved":
		ev.Type = kvevents.BlockRemoved
	case "AllBlocksCleared":
		ev.Type = kvevents.AllBlocksCleared
	default:
		t.Fatalf("event type %q", typ)
	}
	isNull := func(k string) bool { r, ok := m[k]; return !ok || string(r) == "null" }
	if !isNull("block_hashes") {
		var hs []json.RawMessage
		if err := json.Unmarshal(m["block_hashes"], &hs); err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			ev.BlockHashes = append(ev.BlockHashes, jsonHash(t, h))
		}
	}
	if !isNull("parent_block_hash") {
		ev.ParentBlockHash = kvevents.Opt[kvevents.Hash]{V: jsonHash(t, m["parent_block_hash"]), Valid: true}
	}
	if !isNull("token_ids") {
		if err := json.Unmarshal(m["token_ids"], &ev.TokenIDs); err != nil {
			t.Fatal(err)
		}
	}
	if !isNull("block_size") {
		if err := json.Unmarshal(m["block_size"], &ev.BlockSize); err != nil {
			t.Fatal(err)
		}
	}
	str := func(k string) kvevents.Opt[string] {
		var s string
		if isNull(k) || json.Unmarshal(m[k], &s) != nil {
			return kvevents.Opt[string]{}
		}
		return kvevents.Some(s)
	}
	ev.Medium, ev.LoraName = str("medium"), str("lora_name")
	if !isNull("group_idx") {
		var g int64
		if err := json.Unmarshal(m["group_idx"], &g); err != nil {
			t.Fatal(err)
		}
		ev.GroupIdx = kvevents.Some[int64](g)
	}
	if !isNull("extra_keys") {
		dec := json.NewDecoder(bytes.NewReader(m["extra_keys"]))
		dec.UseNumber()
		var ek []any
		if err := dec.Decode(&ek); err != nil {
			t.Fatal(err)
		}
		ev.HasExtraKeys = true
		for _, e := range ek {
			ev.ExtraKeys = append(ev.ExtraKeys, msgpackOf(t, e))
		}
	}
	return ev
}

// prompt is a token sequence the vectors imply: a store's tokens after
// the tokens of the chain its parent hash names.
type prompt struct {
	name string
	req  kvindex.ScoreRequest
}

type chainLink struct {
	tokens []int64
	extra  [][]byte
}

// TestGoldenEndToEnd replays every KV-event batch vLLM's publisher wrote
// (../shared/vllm-golden/kv-events.jsonl), byte for byte, on a PUB socket
// to a kvevents.Subscriber feeding an Index; after each update it scores
// every prompt the vectors' tokens imply and compares each Score with the
// reference Model fed from the vectors' JSON values, plus stated
// expectations at the vectors where a rule acts (unknown parent, LoRA,
// hybrid groups, a batch ending in AllBlocksCleared, CPU offload chains,
// the seq jump to 1,000,000 as a lost range, restarts as resets).
func TestGoldenEndToEnd(t *testing.T) {
	batches := loadGoldenBatches(t)
	const engine = "vllm-0"

	x, err := kvindex.New(kvindex.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	model := kvmodel.NewModel(0, nil)

	// Prompts, and the chains behind each hash.
	links := map[uint64]chainLink{}
	var prompts []prompt
	addPrompts := func(gb goldenBatch) {
		for _, ev := range gb.events {
			if ev.Type != kvevents.BlockStored || len(ev.TokenIDs) == 0 || ev.BlockSize <= 0 ||
				int64(len(ev.TokenIDs)) != int64(len(ev.BlockHashes))*ev.BlockSize {
				continue
			}
			var base chainLink
			if ev.ParentBlockHash.Valid {
				base = links[ev.ParentBlockHash.V.Uint64()] // empty when unknown: the store's tokens alone
			}
			bs := int(ev.BlockSize)
			for j, h := range ev.BlockHashes {
				l := chainLink{tokens: append(append([]int64(nil), base.tokens...), ev.TokenIDs[:(j+1)*bs]...),
					extra: append([][]byte(nil), base.extra...)}
				for k := 0; k <= j; k++ {
					var e []byte
					if ev.HasExtraKeys && k < len(ev.ExtraKeys) {
						e = ev.ExtraKeys[k]
					}
					l.extra = append(l.extra, e)
				}
				if _, ok := links[h.Uint64()]; !ok {
					links[h.Uint64()] = l
				}
				if j == len(ev.BlockHashes)-1 {
					req := kvindex.ScoreRequest{Tokens: l.tokens, ExtraKeys: l.extra, BlockSize: bs}
					if ev.LoraName.Valid {
						req.LoraName = ev.LoraName.V
					}
					prompts = append(prompts, prompt{name: gb.id, req: req})
				}
			}
		}
	}
	// promptOf returns the prompt of the last store of vector id.
	promptOf := func(id string) kvindex.ScoreRequest {
		for i := len(prompts) - 1; i >= 0; i-- {
			if prompts[i].name == id {
				return prompts[i].req
			}
		}
		t.Errorf("no prompt from %s", id)
		return kvindex.ScoreRequest{}
	}
	at := func(r kvindex.ScoreResult, med string) kvindex.Prefix {
		for _, e := range r.Engines {
			if e.Engine != engine {
				continue
			}
			if med == "" {
				return e.Prefix
			}
			for _, tr := range e.Tiers {
				if tr.Medium == med {
					return tr.Prefix
				}
			}
		}
		return kvindex.Prefix{}
	}
	scoreOf := func(req kvindex.ScoreRequest) kvindex.ScoreResult {
		r, err := x.Score(req)
		if err != nil {
			t.Error(err)
		}
		return r
	}
	want := func(id, what string, p kvindex.Prefix, blocks, maybe int) {
		if p.Blocks != blocks || p.MaybeBlocks != maybe {
			t.Errorf("after %s: %s: %d certain, %d maybe blocks; want %d, %d", id, what, p.Blocks, p.MaybeBlocks, blocks, maybe)
		}
	}
	// What the rules say at the vectors where they act.
	stated := map[string]func(id string){
		"kv-stored-optional-absent": func(id string) {
			want(id, "its 16 tokens on GPU", at(scoreOf(promptOf(id)), "GPU"), 1, 1)
		},
		"kv-gpu-chain-parent": func(id string) {
			// The parent was published before this subscriber joined.
			want(id, "a store under an unknown parent", at(scoreOf(promptOf(id)), ""), 0, 0)
			if x.Stats().UnknownParents == 0 {
				t.Errorf("after %s: UnknownParents 0", id)
			}
		},
		"kv-gpu-lora": func(id string) {
			req := promptOf(id)
			want(id, "the LoRA prompt", at(scoreOf(req), "GPU"), 2, 2)
			req.LoraName, req.ExtraKeys = "", nil
			want(id, "the same tokens without the adapter", at(scoreOf(req), "GPU"), 0, 0)
		},
		"kv-gpu-hybrid-swa": func(id string) {
			want(id, "two groups of the same blocks", at(scoreOf(promptOf(id)), "GPU"), 2, 2)
		},
		"kv-mixed-batch": func(id string) {
			if st := x.Stats(); st.Backend.Entries != 0 {
				t.Errorf("after %s (ends in AllBlocksCleared): %d entries", id, st.Backend.Entries)
			}
		},
		"kv-offload-self-describing-store": func(id string) {
			r := scoreOf(promptOf(id))
			want(id, "an 8-block chain on CPU", at(r, "CPU"), 8, 8)
			want(id, "an 8-block chain on GPU", at(r, "GPU"), 0, 0)
		},
		"kv-offload-self-describing-remove": func(id string) {
			want(id, "the removed CPU chain", at(scoreOf(promptOf("kv-offload-self-describing-store")), ""), 0, 0)
		},
		"kv-seq-1000000": func(id string) {
			// Seqs 25..999999 were lost: what was stored before is
			// uncertain, the new store certain.
			want(id, "a block stored before the lost range", at(scoreOf(promptOf("kv-batch-64-stores")), "GPU"), 0, 1)
			want(id, "the block stored after it", at(scoreOf(promptOf(id)), "GPU"), 1, 1)
		},
		"kv-topic-empty": func(id string) {
			// seq 0 again: the publisher restarted.
			want(id, "a block of the previous run", at(scoreOf(promptOf("kv-seq-1000000")), ""), 0, 0)
			want(id, "its own block", at(scoreOf(promptOf(id)), "GPU"), 1, 1)
		},
		"kv-later-stored-both": func(id string) {
			r := scoreOf(promptOf(id))
			want(id, "GPU block 0 + STORAGE block 1, any medium", at(r, ""), 2, 2)
			want(id, "on GPU", at(r, "GPU"), 1, 1)
			want(id, "on STORAGE alone", at(r, "STORAGE"), 0, 0)
		},
	}

	var mu sync.Mutex
	next := 0 // index of the next batch expected
	done := make(chan struct{})
	check := func(label string) {
		for _, p := range prompts {
			got := scoreOf(p.req)
			exp := model.Score(p.req, kvindex.DefaultBlockSize)
			if !reflect.DeepEqual(got.Engines, exp.Engines) {
				t.Errorf("after %s, prompt of %s (%d tokens):\nindex %+v\nmodel %+v", label, p.name, len(p.req.Tokens), got.Engines, exp.Engines)
			}
		}
	}
	handler := func(_ context.Context, u kvevents.Update) error {
		mu.Lock()
		defer mu.Unlock()
		if err := x.Apply(u); err != nil {
			return err
		}
		switch u.Kind {
		case kvevents.UpdateBatch:
			if next >= len(batches) {
				t.Errorf("unexpected batch seq %d", u.Seq)
				return nil
			}
			gb := batches[next]
			next++
			if u.Seq != gb.seq {
				t.Errorf("batch %s: seq %d, want %d", gb.id, u.Seq, gb.seq)
			}
			// The model takes the events the decoder kept (an event this
			// kvevents release refuses is refused for both).
			var evs []kvevents.Event
			for _, i := range u.Batch.Index {
				evs = append(evs, gb.events[i])
			}
			model.ApplyEvents(u.Source, evs)
			addPrompts(gb)
			check(gb.id)
			if f := stated[gb.id]; f != nil {
				f(gb.id)
			}
			if next == len(batches) {
				close(done)
			}
		default:
			model.Apply(u)
			check(u.Kind)
		}
		return nil
	}

	pub, err := socket.New("XPUB", socket.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	sub, err := kvevents.NewSubscriber(kvevents.Config{Handler: handler, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(kvevents.Source{Name: engine, Live: pub.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- sub.Run(ctx) }()
	// The subscription reaches the XPUB before anything is sent.
	m, err := pub.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 1 || len(m.Frames[0]) == 0 || m.Frames[0][0] != 1 {
		t.Fatalf("first message on the XPUB is not a subscription: %q", m.Frames)
	}
	for _, gb := range batches {
		if err := pub.Send(ctx, gb.frames...); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		t.Fatalf("only %d of %d batches delivered", next, len(batches))
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	st := x.Stats()
	t.Logf("after %d vectors: %+v", len(batches), st)
	if st.PartialGroups != 3 {
		t.Errorf("partial groups %d; want 3 (the sliding-window and Mamba groups of kv-gpu-hybrid-swa, kv-gpu-mla-mamba, kv-stored-every-field)", st.PartialGroups)
	}
	if st.Resets != 3 || st.Losses != 2 {
		t.Errorf("resets %d, losses %d; want 3 (seq back to 0 three times) and 2 (25..999999, 1..4)", st.Resets, st.Losses)
	}
	if len(prompts) < 60 {
		t.Errorf("only %d prompts checked", len(prompts))
	}
}
