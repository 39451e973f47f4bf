package kvindex_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// SGLang engines in the index, on SGLang's own bytes (the SGLang golden
// vectors): the batches are decoded from the vectors' bytes as a
// Subscriber would, and the prompts are taken from the vectors' values.

// sgVector is one SGLang batch vector: its payload and its events' values.
type sgVector struct {
	payload []byte
	events  []map[string]json.RawMessage
}

func sgVectors(t *testing.T) map[string]sgVector {
	t.Helper()
	out := map[string]sgVector{}
	for _, v := range golden.LoadSGLang(t, "kv-events") {
		if v.Message() != "kv_event_batch" {
			continue
		}
		frames, err := v.Frames()
		if err != nil {
			t.Fatal(err)
		}
		var val struct {
			Decoded struct {
				Events []map[string]json.RawMessage `json:"events"`
			} `json:"decoded"`
		}
		if err := json.Unmarshal(v.Values, &val); err != nil {
			t.Fatal(err)
		}
		out[v.ID] = sgVector{payload: frames[2], events: val.Decoded.Events}
	}
	return out
}

// events decodes the vector's bytes (what a Subscriber hands the index).
func (v sgVector) decode(t *testing.T) []kvevents.Event {
	t.Helper()
	var b kvevents.Batch
	if err := kvevents.DecodeBatch(v.payload, &b); err != nil || b.DroppedEvents != 0 {
		t.Fatalf("decode: %v, %d dropped", err, b.DroppedEvents)
	}
	return append([]kvevents.Event(nil), b.Events...)
}

// tokens returns the token ids of the vector's stores, in order, from its
// values: a prompt made of those pages.
func (v sgVector) tokens(t *testing.T) []int64 {
	t.Helper()
	var out []int64
	for _, e := range v.events {
		raw, ok := e["token_ids"]
		if !ok {
			continue
		}
		var ts []int64
		if err := json.Unmarshal(raw, &ts); err != nil {
			t.Fatal(err)
		}
		out = append(out, ts...)
	}
	return out
}

// negatives counts the negative hashes (block and parent) in the values.
func (v sgVector) negatives() int {
	n := 0
	for _, e := range v.events {
		var hs []json.RawMessage
		_ = json.Unmarshal(e["block_hashes"], &hs)
		if p, ok := e["parent_block_hash"]; ok {
			hs = append(hs, p)
		}
		for _, h := range hs {
			if strings.HasPrefix(strings.Trim(string(h), `"`), "-") {
				n++
			}
		}
	}
	return n
}

func cat(xs ...[]int64) []int64 {
	var out []int64
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

// wantPrefix checks Score's answer for engine: blocks certain in total and
// on GPU.
func wantPrefix(t *testing.T, x *kvindex.Index, model, engine string, tokens []int64, blocks, gpu int) {
	t.Helper()
	r, err := x.Score(kvindex.ScoreRequest{Model: model, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	got, gotGPU := 0, 0
	for _, e := range r.Engines {
		if e.Engine != engine {
			continue
		}
		if e.Blocks > got {
			got = e.Blocks
			gotGPU = 0
			for _, tr := range e.Tiers {
				if tr.Medium == "GPU" {
					gotGPU = tr.Blocks
				}
			}
		}
	}
	if got != blocks || gotGPU != gpu {
		t.Fatalf("%s holds %d blocks (%d on GPU), want %d (%d): %+v", engine, got, gotGPU, blocks, gpu, r)
	}
}

// TestSGLangGoldenScore: SGLang's stores and removals give the Score its
// rules predict (see the package documentation, SGLang engines): one block
// per page, chained by parent_block_hash across radix nodes (the child
// node's first page hangs off the parent node's last page), signed hashes
// matched by their 64-bit pattern (a removal carrying a negative hash
// removes the page stored with it), SGLang's media as tiers, bigram pages
// not indexed, a clear empties the engine.
func TestSGLangGoldenScore(t *testing.T) {
	vs := sgVectors(t)
	x, err := kvindex.New(kvindex.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	apply := func(id string) {
		t.Helper()
		if err := x.ApplyEvents("sg", vs[id].decode(t)); err != nil {
			t.Fatal(err)
		}
	}
	root, child, cpu := vs["sg-chain-root-node"], vs["sg-chain-child-node"], vs["sg-medium-cpu-pinned"]
	if n := root.negatives() + child.negatives() + cpu.negatives() + vs["sg-removed-gpu"].negatives(); n == 0 {
		t.Fatal("no negative hash in the vectors this test uses")
	}
	apply("sg-chain-root-node")
	wantPrefix(t, x, "", "sg", root.tokens(t), 4, 4)
	apply("sg-chain-child-node")
	wantPrefix(t, x, "", "sg", cat(root.tokens(t), child.tokens(t)), 7, 7)
	// The host-memory copy of two pages under the root's last page.
	apply("sg-medium-cpu-pinned")
	wantPrefix(t, x, "", "sg", cat(root.tokens(t), cpu.tokens(t)), 6, 4)
	// One BlockRemoved for the child node's three pages (one hash negative).
	apply("sg-removed-gpu")
	wantPrefix(t, x, "", "sg", cat(root.tokens(t), child.tokens(t)), 4, 4)
	// Bigram pages (token pairs) are not indexed: a prompt's tokens cannot
	// show the token after a page that a bigram key also needs.
	// Both pages are counted as bigram stores, never as hybrid stores or
	// unknown parents (an operator tells them apart).
	st0 := x.Stats()
	apply("sg-bigram-token-pairs")
	if st := x.Stats(); st.Bigrams != st0.Bigrams+2 || st.Hybrid != st0.Hybrid || st.UnknownParents != st0.UnknownParents {
		t.Fatalf("bigram stores: bigrams %d, hybrid %d, unknown parents %d, want %d, %d, %d", st.Bigrams, st.Hybrid,
			st.UnknownParents, st0.Bigrams+2, st0.Hybrid, st0.UnknownParents)
	}
	var firsts []int64
	for _, e := range vs["sg-bigram-token-pairs"].decode(t) {
		if !e.TokenPairs {
			t.Fatalf("bigram store without TokenPairs")
		}
		for i := 0; i < len(e.TokenIDs); i += 2 {
			firsts = append(firsts, e.TokenIDs[i])
		}
	}
	wantPrefix(t, x, "", "sg", firsts, 0, 0)
	apply("sg-all-blocks-cleared")
	wantPrefix(t, x, "", "sg", root.tokens(t), 0, 0)
}

// modelOfTopic is llm-d's convention: a publisher's topic is
// kv@{host}@{model}, and the source is named by it.
func modelOfTopic(name string) string {
	if i := strings.LastIndexByte(name, '@'); i >= 0 && strings.HasPrefix(name, "kv@") {
		return name[i+1:]
	}
	return ""
}

// TestTopicConventionBothEngines: llm-d's topic convention works for an
// SGLang and a vLLM engine alike: each publishes under kv@{host}@{model},
// one Subscriber follows both with the prefix "kv@" (both batches come
// through replay: SGLang's replies carry no topic frame, vLLM's do), the
// sources are named by their topics and Config.ModelOf takes the model
// from the name. The same prompt, cached by both, scores on both for its
// model and on neither for another.
func TestTopicConventionBothEngines(t *testing.T) {
	vs := sgVectors(t)
	root := vs["sg-chain-root-node"]
	var tokens []int64
	sgEvents := root.decode(t)
	for _, e := range sgEvents {
		tokens = append(tokens, e.TokenIDs...)
	}
	vlEvent := kvevents.Event{Type: kvevents.BlockStored, TokenIDs: tokens, BlockSize: 16, Medium: kvevents.Some("GPU")}
	for i := range 4 {
		vlEvent.BlockHashes = append(vlEvent.BlockHashes, kvevents.IntHash(1<<63+uint64(i)))
	}
	x, err := kvindex.New(kvindex.Config{Logger: quiet, ModelOf: modelOfTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var batches atomic.Int64
	var pubs []*kvevents.Publisher
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quiet, Topic: "kv@", FromStart: true,
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch && len(u.Batch.Events) > 0 {
				batches.Add(1)
			}
			return x.Apply(u)
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		engine, topic string
		events        []kvevents.Event
	}{{"sglang", "kv@sg-pod@qwen", sgEvents}, {"vllm", "kv@vl-pod@qwen", []kvevents.Event{vlEvent}}} {
		p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Engine: c.engine, Endpoint: "tcp://127.0.0.1:0", Bind: true,
			ReplayEndpoint: "tcp://127.0.0.1:0", Topic: c.topic, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Publish(c.events...); err != nil {
			t.Fatal(err)
		}
		poll.WaitFor(t, 20*time.Second, "published", func() bool { return p.Stats().Published == 1 })
		pubs = append(pubs, p)
		if err := sub.Add(kvevents.Source{Name: c.topic, Live: p.Endpoint(), Replay: p.ReplayEndpoint(), Engine: c.engine}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	// Live traffic (empty batches) reveals what was missed; the replay
	// brings each publisher's first batch.
	poll.WaitFor(t, 20*time.Second, "both batches", func() bool {
		for _, p := range pubs {
			p.Publish()
		}
		time.Sleep(5 * time.Millisecond)
		return batches.Load() == 2
	})
	wantPrefix(t, x, "qwen", "kv@sg-pod@qwen", tokens, 4, 4)
	wantPrefix(t, x, "qwen", "kv@vl-pod@qwen", tokens, 4, 4)
	wantPrefix(t, x, "llama", "kv@sg-pod@qwen", tokens, 0, 0)
	wantPrefix(t, x, "llama", "kv@vl-pod@qwen", tokens, 0, 0)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := sub.Stats(); st.Replayed < 2 || st.Dropped.Total() != 0 || st.DroppedEvents.Total() != 0 {
		t.Fatalf("subscriber stats %+v", st)
	}
}

// TestInteropSGLangPublisher: a live SGLang-format publisher (pyzmq,
// testdata/sglang_publisher.py: SGLang's framing around SGLang's own
// payloads) → Subscriber (the batch it skips live comes through its replay
// ROUTER, without a topic frame) → Index → Score finds the stored prefix,
// and the child node's pages gone after SGLang's BlockRemoved.
func TestInteropSGLangPublisher(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	vs := sgVectors(t)
	const topic = "kv@sg-pod@qwen"
	ids := []string{"sg-chain-root-node", "sg-chain-child-node", "sg-medium-cpu-pinned", "sg-removed-gpu"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"testdata/sglang_publisher.py", filepath.Join(golden.SGLangDir(), "kv-events.jsonl"), topic, "1"}, ids...)
	cmd := exec.CommandContext(ctx, py, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("publisher: %v %s", err, stderr.String())
	}
	eps := strings.Fields(line)
	if len(eps) != 2 {
		t.Fatalf("publisher said %q", line)
	}
	x, err := kvindex.New(kvindex.Config{Logger: quiet, ModelOf: modelOfTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	var last atomic.Int64
	last.Store(-1)
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quiet, Topic: "kv@", ReplayTimeout: 20 * time.Second,
		Handler: func(_ context.Context, u kvevents.Update) error {
			if err := x.Apply(u); err != nil {
				return err
			}
			if u.Kind == kvevents.UpdateBatch {
				last.Store(int64(u.Seq))
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(kvevents.Source{Name: topic, Live: eps[0], Replay: eps[1], Engine: "sglang"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	poll.WaitFor(t, 20*time.Second, "the last batch ("+strconv.Itoa(len(ids)-1)+")", func() bool { return last.Load() == int64(len(ids)-1) })
	root, child, cpu := vs[ids[0]], vs[ids[1]], vs[ids[2]]
	wantPrefix(t, x, "qwen", topic, cat(root.tokens(t), child.tokens(t)), 4, 4)
	wantPrefix(t, x, "qwen", topic, cat(root.tokens(t), cpu.tokens(t)), 6, 4)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := sub.Stats()
	if st.Batches != uint64(len(ids)) || st.Replayed < 1 || st.Gaps != 1 || st.Lost != 0 || st.Dropped.Total() != 0 || st.DroppedEvents.Total() != 0 {
		t.Fatalf("subscriber stats %+v\npublisher stderr: %s", st, stderr.String())
	}
}
