package kvevents

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// TestStatsUnknownFieldsAndInactive (hand-built bytes, through a
// Subscriber): SourceStats.UnknownFields sums the delivered batches'
// Batch.UnknownFields (here two trailing batch elements each), and
// Events.BlockInactive counts the BlockInactive events delivered under
// Config.DecodeBlockInactive, per source and in the total, under their
// snake_case JSON keys; without DecodeBlockInactive they are not counted
// as delivered (dropped as unsupported).
func TestStatsUnknownFieldsAndInactive(t *testing.T) {
	const batches = 5
	pub := newTestPublisher(t, vllm.Latest(), true)
	for i := range batches {
		// [ts, [inactive, stored], 0, "a later batch field", 7]
		p := msgp.AppendArrayHeader(nil, 5)
		p = msgp.AppendFloat64(p, 1)
		p = msgp.AppendArrayHeader(p, 2)
		p = append(p, inactiveEvent(uint64(100+i))...)
		p = appendEventMap(p, ptr(storedEvent(uint64(i))))
		p = msgp.AppendInt64(p, 0)
		p = msgp.AppendString(p, "a later batch field")
		p = msgp.AppendInt64(p, 7)
		if err := pub.PublishRaw(p); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "publisher to send", func() bool { return pub.Stats().Published == batches })
	for _, decode := range []bool{true, false} {
		rec := newRecorder()
		sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, FromStart: true, Topic: "kv@", DecodeBlockInactive: decode})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint()), Replay: pub.ReplayEndpoint()}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done := make(chan error, 1)
		go func() { done <- sub.Run(ctx) }()
		// Live traffic reveals the gap; the replay brings the hand-built
		// batches (the live ones carry no unknown field).
		poll.WaitFor(t, waitTimeout, "delivery", func() bool {
			pub.Publish(storedEvent(1000))
			time.Sleep(5 * time.Millisecond)
			return sub.Stats().Events.BlockStored >= batches+1
		})
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := sub.Stats()
		wantInactive := uint64(0)
		if decode {
			wantInactive = batches
		}
		for _, s := range []SourceStats{st, st.Sources[0]} {
			if s.UnknownFields != 2*batches || s.Events.BlockInactive != wantInactive {
				t.Fatalf("decode %v: unknown fields %d (want %d), inactive %d (want %d)", decode, s.UnknownFields, 2*batches,
					s.Events.BlockInactive, wantInactive)
			}
		}
		if got := st.UnsupportedTypes["BlockInactive"]; got != batches-wantInactive {
			t.Fatalf("decode %v: unsupported BlockInactive %d", decode, got)
		}
		j, err := json.Marshal(st.Sources[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{`"unknown_fields":10`, `"block_inactive":`} {
			if !strings.Contains(string(j), key) {
				t.Fatalf("JSON lacks %s: %s", key, j)
			}
		}
	}
}
