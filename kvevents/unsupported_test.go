package kvevents

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/vllm"
)

// unknownEvent is a well-formed event of a type this release does not know
// (as a newer vLLM's BlockInactive, vLLM PR #50732, would be).
func unknownEvent(tag string) []byte {
	b := msgp.AppendMapHeader(nil, 3)
	b = msgp.AppendString(b, "type")
	b = msgp.AppendString(b, tag)
	b = msgp.AppendString(b, "block_hashes")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendUint64(b, 42)
	b = msgp.AppendString(b, "medium")
	return msgp.AppendString(b, "GPU")
}

// TestUnsupportedEventTypes: events of unknown types cost only themselves,
// count as unsupported (not decode: they are not hostile), and their names
// are counted in a bounded, escaped map.
func TestUnsupportedEventTypes(t *testing.T) {
	pub := newTestPublisher(t, vllm.Latest(), true)
	const batches = 20
	for i := 0; i < batches; i++ {
		// [ts, [stored, unknown, cleared], 0]
		p := msgp.AppendArrayHeader(nil, 3)
		p = msgp.AppendFloat64(p, 1)
		p = msgp.AppendArrayHeader(p, 3)
		p = appendEventMap(p, ptr(storedEvent(uint64(i))))
		tag := fmt.Sprintf("BlockFuture%02d", i)
		switch i {
		case 0:
			tag = "BlockInactive"
		case 1:
			tag = "Evil\x1b[31mType"
		}
		p = append(p, unknownEvent(tag)...)
		p = appendEventMap(p, &Event{Type: AllBlocksCleared})
		p = msgp.AppendUint64(p, 0)
		if err := pub.PublishRaw(p); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "publisher to send", func() bool { return pub.Stats().Published == batches })
	rec := newRecorder()
	sub, err := NewSubscriber(Config{Handler: rec.handle, Logger: quiet, FromStart: true, Topic: "kv@"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Add(Source{Name: "e0", Live: loopback(pub.Endpoint()), Replay: pub.ReplayEndpoint()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	// Live traffic reveals the gap; the replay brings the 20 batches.
	poll.WaitFor(t, waitTimeout, "delivery", func() bool {
		pub.Publish(storedEvent(1000))
		time.Sleep(5 * time.Millisecond)
		return sub.Stats().DroppedEvents[decodeguard.ReasonUnsupported] == batches
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := sub.Stats()
	tot := st
	if tot.DroppedEvents[decodeguard.ReasonDecode] != 0 || tot.DroppedEvents[decodeguard.ReasonValidate] != 0 || tot.Dropped.Total() != 0 {
		t.Fatalf("dropped %v, events %v", tot.Dropped, tot.DroppedEvents)
	}
	if tot.Events.AllBlocksCleared != batches {
		t.Fatalf("the rest of each batch was not delivered: %+v", tot.Events)
	}
	u := st.Sources[0].UnsupportedTypes
	if len(u) != maxUnsupportedTypes+1 || u["BlockInactive"] != 1 || u["other"] != batches-maxUnsupportedTypes {
		t.Fatalf("unsupported types %v", u)
	}
	for name := range u {
		for _, c := range []byte(name) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("unescaped name %q", name)
			}
		}
	}
	if len(tot.UnsupportedTypes) != maxUnsupportedTypes+1 {
		t.Fatalf("total unsupported types %v", tot.UnsupportedTypes)
	}
}

func ptr[T any](v T) *T { return &v }
