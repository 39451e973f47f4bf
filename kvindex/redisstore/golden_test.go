package redisstore

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/golden"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/socket"
)

// TestGoldenRedisMatchesMemory sends every KV-event batch of vLLM's own
// vectors through a real socket (XPUB -> kvevents.Subscriber) into two
// indexes at once, one in memory and one on Redis, and requires the same
// Score for every stored block sequence of the vectors (the in-memory
// index is checked against vLLM's meaning by kvindex's own end-to-end
// test): the Redis backend gives the same answers on vLLM's bytes.
func TestGoldenRedisMatchesMemory(t *testing.T) {
	vecs := golden.Load(t, "kv-events")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mem, err := kvindex.New(kvindex.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red, err := kvindex.New(kvindex.Config{Backend: newStore(t, Config{}), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()

	var payloads [][]byte
	var stored [][]kvevents.Event // per batch
	total := 0
	for _, v := range vecs {
		if v.Message() != "kv_event_batch" {
			continue
		}
		f, err := v.Frames()
		if err != nil || len(f) != 3 {
			t.Fatalf("%s: %d frames, %v", v.ID, len(f), err)
		}
		payloads = append(payloads, f[2])
		var b kvevents.Batch
		var mine []kvevents.Event
		if kvevents.DecodeBatch(f[2], &b) == nil {
			for _, e := range b.Events {
				if e.Type == kvevents.BlockStored && len(e.TokenIDs) > 0 {
					e.TokenIDs = append([]int64(nil), e.TokenIDs...)
					mine = append(mine, e)
				}
			}
		}
		stored = append(stored, mine)
		total += len(mine)
	}
	if len(payloads) < 10 || total < 5 {
		t.Fatalf("%d batches, %d stores in the vectors", len(payloads), total)
	}

	pub, err := socket.New("XPUB", socket.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := uint64(0)
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quiet, Handler: func(_ context.Context, u kvevents.Update) error {
		if err := mem.Apply(u); err != nil {
			t.Error(err)
		}
		if err := red.Apply(u); err != nil {
			t.Error(err)
		}
		mu.Lock()
		if u.Kind == kvevents.UpdateBatch {
			seen = u.Seq + 1
		}
		mu.Unlock()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Add(kvevents.Source{Name: "engine", Live: pub.Endpoint()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := pub.Recv(ctx); err != nil { // the subscription: the subscriber is there
		t.Fatal(err)
	}
	go func() { // the XPUB's subscription messages are read and dropped
		for {
			if _, err := pub.Recv(ctx); err != nil {
				return
			}
		}
	}()
	// One batch at a time (the vectors are independent messages, and some
	// clear the engine): after each, its stores score the same on both.
	var seq [8]byte
	hits := 0
	for i, p := range payloads {
		binary.BigEndian.PutUint64(seq[:], uint64(i))
		if err := pub.Send(ctx, []byte("kv@engine"), seq[:], p); err != nil {
			t.Fatal(err)
		}
		for {
			mu.Lock()
			n := seen
			mu.Unlock()
			if n == uint64(i+1) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("delivered %d of %d batches", n, len(payloads))
			}
			time.Sleep(2 * time.Millisecond)
		}
		for _, e := range stored[i] {
			req := kvindex.ScoreRequest{Tokens: e.TokenIDs, BlockSize: int(e.BlockSize)}
			if e.LoraName.Valid {
				req.LoraName = e.LoraName.V
			}
			if e.HasExtraKeys {
				req.ExtraKeys = e.ExtraKeys
			}
			rm, err1 := mem.Score(req)
			rr, err2 := red.Score(req)
			if err1 != nil || err2 != nil {
				t.Fatalf("batch %d: %v / %v", i, err1, err2)
			}
			if !reflect.DeepEqual(rm, rr) {
				t.Fatalf("batch %d (%d tokens): memory %+v, redis %+v", i, len(e.TokenIDs), rm, rr)
			}
			if len(rm.Engines) > 0 {
				hits++
			}
		}
	}
	ms, rs := mem.Stats(), red.Stats()
	if ms.Counts != rs.Counts || ms.Backend.Entries != rs.Backend.Entries {
		t.Fatalf("counts: memory %+v, redis %+v", ms, rs)
	}
	t.Logf("%d batches, %d stores scored the same on both, %d of them with a prefix held", len(payloads), total, hits)
	if hits < total/2 {
		t.Fatalf("only %d of %d stores found a prefix: the comparison is too weak", hits, total)
	}
}
