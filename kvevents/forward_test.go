package kvevents

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// Forward compatibility of the KV-event decoder: shapes a later vLLM or
// SGLang may send. Every payload here is HAND-BUILT by the test (no
// engine wrote these bytes): the known part with the encoder proven on the
// golden vectors, the new part appended by hand.

// withTrailing returns the array at the start of arr (an event or a batch,
// header 0x90..0x9f) with the msgpack objects extra appended as new last
// elements, header raised to match.
func withTrailing(t *testing.T, arr []byte, extra ...[]byte) []byte {
	t.Helper()
	if arr[0] < 0x90 || arr[0]+byte(len(extra)) > 0x9f {
		t.Fatalf("withTrailing wants a fixarray with room, got %x", arr[0])
	}
	out := append([]byte{arr[0] + byte(len(extra))}, arr[1:]...)
	for _, e := range extra {
		out = append(out, e...)
	}
	return out
}

// trailingValues are elements a later release might add: an int, a str,
// nil, an array, a map.
var trailingValues = [][]byte{
	msgp.AppendInt64(nil, 7),
	msgp.AppendString(nil, "evicted"),
	msgp.AppendNil(nil),
	msgp.AppendUint64(msgp.AppendArrayHeader(nil, 1), 1),
	msgp.AppendUint64(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "k"), 1),
}

// decodeBoth decodes p with DecodeBatch's path and the checked path and
// requires them to agree (the differential rule), returning the result.
func decodeBoth(t *testing.T, p []byte, lim limits) (*Batch, []eventDrop) {
	t.Helper()
	checkDifferential(t, p, lim)
	var b Batch
	var drops []eventDrop
	if err := decodeBatch(p, lim, &b, func(d eventDrop) { drops = append(drops, d) }); err != nil {
		t.Fatalf("batch refused: %v (%x)", err, p)
	}
	return &b, drops
}

// TestForwardTrailingArrayElements (hand-built bytes): an element added
// after the last known field of an array-form event, or after the third
// element of the batch array, is read past and counted in UnknownFields;
// the event and the batch are delivered with every known field, never
// refused.
func TestForwardTrailingArrayElements(t *testing.T) {
	stored := Event{Type: BlockStored, BlockHashes: []Hash{IntHash(1 << 63), IntHash(2)}, ParentBlockHash: Some(IntHash(9)),
		TokenIDs: []int64{1, 2, 3, 4}, BlockSize: 2, LoraID: Some[int64](1), Medium: Some("CPU"), LoraName: Some("l"),
		GroupIdx: Some[int64](0), KVCacheSpecKind: Some("full_attention")}
	removed := Event{Type: BlockRemoved, BlockHashes: []Hash{IntHash(2)}, Medium: Some("CPU"), GroupIdx: Some[int64](0)}
	for _, x := range trailingValues {
		for _, ev := range []Event{stored, removed, {Type: AllBlocksCleared}} {
			// vLLM's array form (v0.9 to v0.25: every field, then the new one).
			arr := withTrailing(t, appendEventArray(nil, &ev), x)
			p := appendBatch(nil, 1.5, nil, Some[int64](0), formArray)
			p = append(p[:len(p)-2], 0x91) // events: one
			p = append(append(p, arr...), 0x00)
			b, drops := decodeBoth(t, p, limits{})
			if len(drops) != 0 || len(b.Events) != 1 || b.UnknownFields != 1 {
				t.Fatalf("%s + %x: drops %v, %d events, %d unknown", ev.Type, x, drops, len(b.Events), b.UnknownFields)
			}
			got := b.Events[0]
			got.unknown = 0 // counted in b.UnknownFields
			if d := sameEvent(&got, &ev); d != "" {
				t.Fatalf("%s + %x: %s", ev.Type, x, d)
			}
		}
		// The batch array: [ts, events, rank, new, new].
		p := withTrailing(t, appendBatch(nil, 2, []Event{stored}, Some[int64](3), formMap), x, x)
		b, drops := decodeBoth(t, p, limits{})
		if len(drops) != 0 || len(b.Events) != 1 || b.UnknownFields != 2 || b.DataParallelRank != Some[int64](3) || b.TS != 2 {
			t.Fatalf("batch + %x: drops %v, %+v", x, drops, b)
		}
	}
	// A map-form event with a key this release does not know, and a batch
	// map with one: read past, counted.
	ev := appendEventMap(nil, &removed)
	ev[0]++
	// remaining_copy_counts, vLLM PR #48933 (open): one count per hash.
	ev = msgp.AppendUint64(msgp.AppendArrayHeader(msgp.AppendString(ev, "remaining_copy_counts"), 1), 0)
	p := msgp.AppendArrayHeader(nil, 3)
	p = msgp.AppendFloat64(p, 1)
	p = append(msgp.AppendArrayHeader(p, 1), ev...)
	p = msgp.AppendNil(p)
	b, drops := decodeBoth(t, p, limits{})
	if len(drops) != 0 || len(b.Events) != 1 || b.UnknownFields != 1 {
		t.Fatalf("map key: drops %v, %+v", drops, b)
	}
}

// TestForwardSGLangTrailing (hand-built bytes): SGLang's open proposals add
// elements after its last fields (a removal reason after BlockRemoved's
// medium, SGLang issue #39604 / PR #39620; SWA metadata after BlockStored's
// medium, SGLang PR #26579). Read with vLLM's positions, a str where vLLM's
// group_idx stands costs the event; with Source.Engine "sglang" it is read
// past and counted.
func TestForwardSGLangTrailing(t *testing.T) {
	removed := Event{Type: BlockRemoved, BlockHashes: []Hash{SignedHash(-5)}, Medium: Some("GPU")}
	stored := Event{Type: BlockStored, BlockHashes: []Hash{SignedHash(-7)}, TokenIDs: []int64{5}, BlockSize: 1, Medium: Some("GPU")}
	cases := []struct {
		ev    Event
		extra [][]byte
	}{
		{removed, [][]byte{msgp.AppendString(nil, "evicted")}},
		{stored, [][]byte{msgp.AppendInt64(nil, 4096), msgp.AppendInt64(nil, 12)}},
	}
	for _, c := range cases {
		arr := withTrailing(t, appendEventFields(nil, &c.ev, sglangFields(c.ev.Type)), c.extra...)
		p := msgp.AppendArrayHeader(nil, 3)
		p = msgp.AppendFloat64(p, 1)
		p = append(msgp.AppendArrayHeader(p, 1), arr...)
		p = msgp.AppendInt64(p, 0)
		b, drops := decodeBoth(t, p, limits{SGLang: true})
		if len(drops) != 0 || len(b.Events) != 1 || b.UnknownFields != len(c.extra) {
			t.Fatalf("sglang %s: drops %v, %+v", c.ev.Type, drops, b)
		}
		got := b.Events[0]
		got.unknown = 0 // counted in b.UnknownFields
		if d := sameEvent(&got, &c.ev); d != "" {
			t.Fatalf("sglang %s: %s", c.ev.Type, d)
		}
		// Read as vLLM's array form: the new element stands at a vLLM
		// field of another type.
		b, drops = decodeBoth(t, p, limits{})
		if len(b.Events) != 0 || len(drops) != 1 || decodeguard.ReasonOf(drops[0].Err) != decodeguard.ReasonDecode {
			t.Fatalf("vllm positions %s: drops %v, %d events", c.ev.Type, drops, len(b.Events))
		}
	}
}

// inactiveEvent is a BlockInactive as vLLM PR #50732 proposes it (open, not
// merged; HAND-BUILT): a map-form KV event like BlockRemoved's, its
// hashes and medium GPU.
func inactiveEvent(hashes ...uint64) []byte {
	b := msgp.AppendMapHeader(nil, 3)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, "BlockInactive")
	b = msgp.AppendString(b, "block_hashes")
	b = msgp.AppendArrayHeader(b, uint32(len(hashes)))
	for _, h := range hashes {
		b = msgp.AppendUint64(b, h)
	}
	b = msgp.AppendString(b, "medium")
	return msgp.AppendString(b, "GPU")
}

// TestForwardBlockInactive (hand-built bytes): by default a BlockInactive
// costs only itself, dropped as unsupported under its name; with
// limits.Inactive (Config.DecodeBlockInactive) it is delivered with its
// hashes and medium, by both decoders; one without block_hashes is refused.
func TestForwardBlockInactive(t *testing.T) {
	p := msgp.AppendArrayHeader(nil, 3)
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendArrayHeader(p, 2)
	p = append(p, inactiveEvent(1<<63+5, 6)...)
	p = appendEventMap(p, &Event{Type: AllBlocksCleared})
	p = msgp.AppendInt64(p, 0)

	b, drops := decodeBoth(t, p, limits{})
	if len(b.Events) != 1 || len(drops) != 1 || drops[0].Type != "BlockInactive" ||
		decodeguard.ReasonOf(drops[0].Err) != decodeguard.ReasonUnsupported {
		t.Fatalf("default: %d events, drops %v", len(b.Events), drops)
	}
	b, drops = decodeBoth(t, p, limits{Inactive: true})
	want := Event{Type: blockInactive, BlockHashes: []Hash{IntHash(1<<63 + 5), IntHash(6)}, Medium: Some("GPU")}
	if len(drops) != 0 || len(b.Events) != 2 || b.Index[0] != 0 {
		t.Fatalf("opt-in: %d events, drops %v", len(b.Events), drops)
	}
	if d := sameEvent(&b.Events[0], &want); d != "" {
		t.Fatalf("opt-in: %s", d)
	}
	// Encoded back in the map form, it is the same bytes.
	if enc := appendEventMap(nil, &want); string(enc) != string(inactiveEvent(1<<63+5, 6)) {
		t.Fatalf("re-encoded %x", enc)
	}
	bad := msgp.AppendArrayHeader(nil, 3)
	bad = msgp.AppendFloat64(bad, 1)
	bad = msgp.AppendArrayHeader(bad, 1)
	bad = msgp.AppendString(msgp.AppendString(msgp.AppendMapHeader(bad, 1), "type"), "BlockInactive")
	bad = msgp.AppendInt64(bad, 0)
	if _, drops = decodeBoth(t, bad, limits{Inactive: true}); len(drops) != 1 || !strings.Contains(drops[0].Err.Error(), "BlockInactive without block_hashes") {
		t.Fatalf("without hashes: %v", drops)
	}
}

// TestSubscriberForwardCompat (hand-built bytes, through a Subscriber): a
// source's batches with a blockInactive and a trailing batch element are
// delivered; Config.DecodeBlockInactive delivers the blockInactive, and
// Source.Engine is checked by Add.
func TestSubscriberForwardCompat(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), true)
	p := msgp.AppendArrayHeader(nil, 4)
	p = msgp.AppendFloat64(p, 1)
	p = msgp.AppendArrayHeader(p, 2)
	p = append(p, inactiveEvent(11)...)
	p = appendEventMap(p, ptr(storedEvent(12)))
	p = msgp.AppendInt64(p, 0)
	p = msgp.AppendString(p, "a later batch field")
	if err := pub.PublishRaw(p); err != nil {
		t.Fatal(err)
	}
	poll.WaitFor(t, waitTimeout, "publisher to send", func() bool { return pub.Stats().Published == 1 })
	var inactive, unknown, stored int
	done := make(chan struct{}, 1)
	sub, err := NewSubscriber(Config{Logger: quiet, FromStart: true, Topic: "kv@", DecodeBlockInactive: true,
		Handler: func(_ context.Context, u Update) error {
			if u.Kind != UpdateBatch || u.Seq != 0 {
				return nil
			}
			for _, e := range u.Batch.Events {
				switch e.Type {
				case "BlockInactive":
					inactive++
				case BlockStored:
					stored++
				}
			}
			unknown = u.Batch.UnknownFields
			done <- struct{}{}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "x", Live: "tcp://127.0.0.1:1", Engine: "tgi"}); err == nil || !strings.Contains(err.Error(), `"tgi"`) {
		t.Fatalf("Engine tgi: %v", err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint()), Replay: pub.ReplayEndpoint(), Engine: "vllm"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	// Live traffic reveals the gap; the replay brings batch 0.
	poll.WaitFor(t, waitTimeout, "batch 0", func() bool {
		pub.Publish(storedEvent(1000))
		select {
		case <-done:
			return true
		case <-time.After(5 * time.Millisecond):
			return false
		}
	})
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if inactive != 1 || stored != 1 || unknown != 1 {
		t.Fatalf("inactive %d stored %d unknown %d", inactive, stored, unknown)
	}
	if st := sub.Stats(); st.DroppedEvents.Total() != 0 || st.Dropped.Total() != 0 {
		t.Fatalf("dropped %v / %v", st.Dropped, st.DroppedEvents)
	}
}
