package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// kvLines splits stdout into decoded JSON objects.
func kvLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestKVHelpAndUsage(t *testing.T) {
	for name, flags := range map[string][]string{
		"kv-events":  {"-connect", "-replay", "-bind", "-topic", "-from-start", "-count", "-replay-timeout", "-vllm-version"},
		"kv-publish": {"-bind", "-replay-bind", "-topic", "-rate", "-count", "-vllm-version", "-engine"},
	} {
		code, out, _ := runBin(t, 20*time.Second, name, "-h")
		if code != 0 || !strings.Contains(out, "usage: zmqguard "+name) {
			t.Errorf("%s -h: exit %d\n%s", name, code, out)
		}
		for _, f := range flags {
			if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
				t.Errorf("%s -h does not list %s", name, f)
			}
		}
	}
	for _, args := range [][]string{
		{"kv-events"},
		{"kv-events", "--replay", "tcp://127.0.0.1:1", "--connect", "tcp://127.0.0.1:2"},
		{"kv-events", "--connect", "tcp://127.0.0.1:2", "--replay", "tcp://127.0.0.1:1", "--replay", "tcp://127.0.0.1:3"},
		{"kv-events", "--connect", "tcp://127.0.0.1:2", "--vllm-version", "0.1"},
		{"kv-publish"},
		{"kv-publish", "--bind", "tcp://127.0.0.1:0", "--engine", "tgi"},
	} {
		if code, _, stderr := runBin(t, 20*time.Second, args...); code != 2 {
			t.Errorf("%v: exit %d (want 2)\n%s", args, code, stderr)
		}
	}
}

// TestKVEventsReplayAndCount: a late joiner with --from-start gets the
// published batches back through replay, one line per event in the
// contract's shape, and exits 0 after --count events with the counters
// line last.
func TestKVEventsReplayAndCount(t *testing.T) {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv@pod@m", Logger: quietLogger(), DataParallelRank: 0})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	digest := make([]byte, 32)
	digest[31] = 0xab
	bin, _ := kvevents.BytesHash(digest)
	evs := []kvevents.Event{
		{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(1 << 63), bin}, TokenIDs: []int64{1, 2, 3, 4},
			BlockSize: 2, Medium: kvevents.Some("GPU"), GroupIdx: kvevents.Some[int64](1), Ownership: kvevents.Some("obj"),
			SessionID: kvevents.Some("conv-1")},
		{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{kvevents.IntHash(7)}, Medium: kvevents.Some("CPU")},
		{Type: kvevents.AllBlocksCleared},
	}
	for range 10 {
		pub.PublishRaw(kvevents.AppendBatch(nil, 12.5, evs, kvevents.Some[int64](0), true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-events", "--connect", pub.Endpoint(), "--replay", pub.ReplayEndpoint(), "--topic", "kv@",
		"--from-start", "--count", "30", "--log-format", "json")
	for {
		select {
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
			pub.PublishRaw(kvevents.AppendBatch(nil, 12.5, evs, kvevents.Some[int64](0), true))
			continue
		}
		break
	}
	if code := p.wait(time.Second); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	lines := kvLines(t, p.stdout.String())
	if len(lines) != 31 {
		t.Fatalf("%d lines:\n%s", len(lines), p.stdout)
	}
	src := pub.Endpoint()
	for i, l := range lines[:30] {
		if l["source"] != src || l["seq"] != float64(i/3) || l["index"] != float64(i%3) || l["ts"] != 12.5 || l["dp_rank"] != 0.0 {
			t.Fatalf("line %d: %v (want seq %d index %d)", i, l, i/3, i%3)
		}
	}
	raw := strings.Split(p.stdout.String(), "\n")
	wantStored := fmt.Sprintf(`{"source": %q, "seq": 0, "ts": 12.5, "dp_rank": 0, "index": 0, "type": "BlockStored", "block_hashes": [9223372036854775808, "%x"], "parent_block_hash": null, "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": null, "medium": "GPU", "lora_name": null, "group_idx": 1, "ownership": "obj", "session_id": "conv-1"}`, src, digest)
	wantRemoved := fmt.Sprintf(`{"source": %q, "seq": 0, "ts": 12.5, "dp_rank": 0, "index": 1, "type": "BlockRemoved", "block_hashes": [7], "medium": "CPU"}`, src)
	wantCleared := fmt.Sprintf(`{"source": %q, "seq": 0, "ts": 12.5, "dp_rank": 0, "index": 2, "type": "AllBlocksCleared", "block_hashes": []}`, src)
	if raw[0] != wantStored || raw[1] != wantRemoved || raw[2] != wantCleared {
		t.Fatalf("lines:\n%s\n%s\n%s\nwant:\n%s\n%s\n%s", raw[0], raw[1], raw[2], wantStored, wantRemoved, wantCleared)
	}
	c := lines[30]
	if num(c, "counters.total.events") < 30 || num(c, "counters.total.replayed") < 10 || num(c, "counters.total.gaps") < 1 {
		t.Fatalf("counters: %s", raw[30])
	}
	if _, ok := c["counters"].(map[string]any)["sources"].(map[string]any)[src]; !ok {
		t.Fatalf("no per-source counters: %s", raw[30])
	}
}

// TestKVEventsLostAndReset: without a replay endpoint a gap prints its lost
// range, and a lower sequence number a reset; SIGTERM ends with counters.
func TestKVEventsLostAndReset(t *testing.T) {
	xp, err := socket.New("XPUB", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer xp.Close()
	if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	subscribed := make(chan struct{}, 1)
	go func() {
		for {
			m, err := xp.Recv(context.Background())
			if err != nil {
				return
			}
			if len(m.Frames[0]) > 0 && m.Frames[0][0] == 1 {
				select {
				case subscribed <- struct{}{}:
				default:
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-events", "--connect", xp.Endpoint(), "--log-format", "json")
	select {
	case <-subscribed:
	case <-time.After(20 * time.Second):
		t.Fatalf("no subscription\n%s", p.stderr)
	}
	payload := kvevents.AppendBatch(nil, 1, []kvevents.Event{{Type: kvevents.AllBlocksCleared}}, kvevents.Opt[int64]{}, true)
	for _, seq := range []uint64{0, 1, 3, 1} {
		xp.Send(ctx, []byte("t"), binary.BigEndian.AppendUint64(nil, seq), payload)
	}
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(p.stdout.String(), "\n") < 7 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
	ep := xp.Endpoint()
	var got []string
	for _, l := range kvLines(t, p.stdout.String()) {
		switch l["type"] {
		case "AllBlocksCleared":
			got = append(got, fmt.Sprintf("event %v dp=%v", l["seq"], l["dp_rank"]))
		case "lost":
			got = append(got, fmt.Sprintf("lost %v %v", l["from"], l["to"]))
		case "reset":
			got = append(got, fmt.Sprintf("reset %v", l["seq"]))
		case nil:
			got = append(got, fmt.Sprintf("counters resets=%v lost=%v", num(l, "counters.total.resets"), num(l, "counters.total.lost")))
		}
		if l["type"] != nil && l["source"] != ep {
			t.Fatalf("source %v", l["source"])
		}
	}
	want := "event 0 dp=<nil>|event 1 dp=<nil>|lost 2 3|event 3 dp=<nil>|reset 1|lost 0 1|event 1 dp=<nil>|counters resets=1 lost=2"
	if strings.Join(got, "|") != want {
		t.Fatalf("got  %s\nwant %s\n%s", strings.Join(got, "|"), want, p.stdout)
	}
}

// TestKVPublish: the kv-publish command's batches arrive at a Go
// subscriber in order; SIGTERM ends it with its counters line.
func TestKVPublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "kv-publish", "--bind", "tcp://127.0.0.1:0", "--replay-bind", "tcp://127.0.0.1:0",
		"--topic", "kv@x", "--rate", "200", "--log-format", "json")
	ep := p.logField("kv-publish", "endpoint", 20*time.Second)
	rep := p.logField("kv-publish", "replay", 20*time.Second)
	got := make(chan kvevents.Update, 1024)
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quietLogger(), FromStart: true, Topic: "kv@",
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch {
				// To: 1 when every event chains as vLLM's do.
				got <- kvevents.Update{Kind: u.Kind, Seq: u.Seq, From: uint64(len(u.Batch.Events)), To: kvChained(u.Batch.Events)}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	sub.Add(kvevents.Source{Live: ep, Replay: rep})
	sctx, scancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sub.Run(sctx) }()
	for i := uint64(0); i < 20; i++ {
		select {
		case u := <-got:
			want := uint64(17) // 16 stores and, after the first batch, a removal
			if i == 0 {
				want = 16
			}
			if u.Seq != i || u.From != want || u.To != 1 {
				t.Fatalf("batch %d: seq %d with %d events (chained %d)", i, u.Seq, u.From, u.To)
			}
		case <-ctx.Done():
			t.Fatal("no batches")
		}
	}
	scancel()
	<-done
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
	if r := p.jsonLine(); num(r, "batches") < 20 || num(r, "stats.published") < 20 {
		t.Fatalf("report %s", p.stdout)
	}
}

// kvChained returns 1 when a batch's stores chain as one request's blocks
// do in vLLM (each store's parent_block_hash is the previous store's last
// block hash, the first has none) and every hash is distinct, else 0.
func kvChained(evs []kvevents.Event) uint64 {
	seen := map[uint64]bool{}
	var last kvevents.Opt[kvevents.Hash]
	for _, e := range evs {
		if e.Type != kvevents.BlockStored {
			continue
		}
		if e.ParentBlockHash != last {
			return 0
		}
		for _, h := range e.BlockHashes {
			if seen[h.Uint64()] {
				return 0
			}
			seen[h.Uint64()] = true
		}
		last = kvevents.Opt[kvevents.Hash]{V: e.BlockHashes[len(e.BlockHashes)-1], Valid: true}
	}
	return 1
}

// TestKVSyntheticHashes: kv-publish's blocks look like vLLM's: 64-bit
// hashes spread over the whole range, parents that name the previous block,
// removals of blocks that were stored, and events the decoder accepts.
func TestKVSyntheticHashes(t *testing.T) {
	stored := map[uint64]bool{}
	var high, evs int
	for n := uint64(0); n < 50; n++ {
		batch := kvSynthetic(n, 16, nil)
		if kvChained(batch) != 1 {
			t.Fatalf("batch %d does not chain", n)
		}
		for _, e := range batch {
			evs++
			switch e.Type {
			case kvevents.BlockStored:
				if len(e.TokenIDs) != len(e.BlockHashes)*int(e.BlockSize) {
					t.Fatalf("batch %d: %d tokens", n, len(e.TokenIDs))
				}
				for _, h := range e.BlockHashes {
					if stored[h.Uint64()] {
						t.Fatalf("batch %d: hash %d stored twice", n, h.Uint64())
					}
					stored[h.Uint64()] = true
					if h.Uint64() >= 1<<63 {
						high++
					}
				}
			case kvevents.BlockRemoved:
				if !stored[e.BlockHashes[0].Uint64()] {
					t.Fatalf("batch %d removes a block never stored", n)
				}
			}
		}
		var b kvevents.Batch
		if err := kvevents.DecodeBatch(kvevents.AppendBatch(nil, 1, batch, kvevents.Some[int64](0), true), &b); err != nil || b.DroppedEvents != 0 {
			t.Fatalf("batch %d: %v, %d dropped", n, err, b.DroppedEvents)
		}
	}
	// A counter would never reach the top half; random-looking hashes do
	// about half the time.
	if high < len(stored)/4 {
		t.Fatalf("%d of %d hashes at or above 2^63", high, len(stored))
	}
}

// TestDemoKVStage: the demo's KV-events stage delivers in order while its
// bound source is attacked, and says so.
func TestDemoKVStage(t *testing.T) {
	code, out, errOut := runBin(t, 60*time.Second, "demo", "--duration", "2s", "--log-format", "json")
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "kv-events:") {
			if !strings.HasSuffix(line, "still delivering at the end: yes") || !strings.Contains(line, " 0 out of order") ||
				strings.Contains(line, "took 0 hostile probes") {
				t.Fatalf("kv-events stage: %q", line)
			}
			return
		}
	}
	t.Fatalf("no kv-events line:\n%s", out)
}
