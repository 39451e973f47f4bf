package outputs

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/socket"
)

// realStep is one engine step of n outputs, each with 128-wide logprobs
// (two 512-byte arrays) and routed experts (a 512-byte int16 array): three
// aux frames per output, as a large engine sends with logprobs and routed
// experts on.
func realStep(n int) [][]byte {
	m := &enginecore.Message{Header: enginecore.Header{EngineIndex: 0, Timestamp: 2.5}}
	ids, lps, routed := make([]byte, 512), make([]byte, 512), make([]byte, 512)
	for i := range n {
		m.Outputs = append(m.Outputs, enginecore.Output{
			RequestID:   []byte("cmpl-" + strconv.Itoa(100000+i)),
			NewTokenIDs: []int64{int64(i)},
			NewLogprobs: enginecore.Logprobs{Present: true, Fields: 4,
				TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1, 128}, Data: ids},
				Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{1, 128}, Data: lps},
				SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1}, Data: make([]byte, 4)}},
			RoutedExperts: enginecore.Array{DType: enginecore.DTypeOf("int16"), Shape: []int{32, 8}, Data: routed},
		})
	}
	var e enginecore.Encoder
	return append([][]byte(nil), e.Encode(m)...)
}

// TestRealSizeStep: with the default limits a step of 1365 outputs in
// 4096 frames and about 2 MiB (over the old 1024-frame, 1 MiB limits) is
// delivered whole; one output more (4099 frames) is still refused by the
// socket, and the receiver goes on.
func TestRealSizeStep(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, done := context.WithCancel(ctx)
	defer done()
	var mu sync.Mutex
	var sizes []int
	r, wait := start(t, rctx, Config{Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
		mu.Lock()
		sizes = append(sizes, len(m.Outputs))
		if len(m.Outputs) == 1 {
			done()
		}
		mu.Unlock()
		return nil
	}})
	p := pusher(t, r.Endpoint())
	defer p.Close()

	fit := realStep(1365)
	total := 0
	for _, f := range fit {
		total += len(f)
	}
	if len(fit) != defaultMaxFrames || total <= 2<<20-64<<10 {
		t.Fatalf("step of %d frames, %d bytes", len(fit), total)
	}
	send(t, ctx, p, fit...)
	over := realStep(1366)
	send(t, ctx, p, over...)
	// The refused message closes its connection: wait for the violation,
	// then a small message goes through on the redialed one.
	for {
		v := r.Stats().Refused
		if v.Total() > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("no violation for the over-limit step within 60 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A message sent before the PUSH notices the closed connection is lost
	// with it: resend until one arrives.
	for delivered := false; !delivered; {
		send(t, ctx, p, encode(simple(0, "after", 1))...)
		select {
		case <-rctx.Done():
			delivered = true
		case <-ctx.Done():
			t.Fatal("nothing delivered after the refused step within 60 s")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) < 2 || sizes[0] != 1365 || sizes[len(sizes)-1] != 1 {
		t.Fatalf("delivered %v, want [1365 1...]", sizes)
	}
	for _, n := range sizes[1:] {
		if n != 1 {
			t.Fatalf("delivered %v: the over-limit step got through", sizes)
		}
	}
}

// TestDefaultLimits: the receiver's socket takes the real-size defaults,
// and only its own: socket.DefaultOptions stays as it was.
func TestDefaultLimits(t *testing.T) {
	r, err := New(Config{Logger: quiet, Handler: func(context.Context, *enginecore.Message, *socket.Peer) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g := r.sock.Options().Guard
	if g.MaxFrames != defaultMaxFrames || g.MaxMessageSize != defaultMaxMessageSize {
		t.Fatalf("socket limits %d frames, %d bytes", g.MaxFrames, g.MaxMessageSize)
	}
	if r.lim.MaxFrames != defaultMaxFrames || r.lim.Scan.MaxBytes != defaultMaxMessageSize || r.lim.Scan.MaxElements != defaultMaxElements {
		t.Fatalf("decode limits %+v", r.lim)
	}
	if mb := r.sock.Options().MemoryBudget; mb <= 0 || mb < defaultMaxMessageSize {
		t.Fatalf("MemoryBudget %d: not bounded or below one message", mb)
	}
	if d := socket.DefaultOptions().Guard; d.MaxFrames == defaultMaxFrames || d.MaxMessageSize == defaultMaxMessageSize {
		t.Fatalf("socket.DefaultOptions changed: %+v", d)
	}
}

// TestNotifications: utility outputs under call ids -1 and -2 reach
// OnNotification typed (and the handler), an unknown negative id reaches it
// untyped, and a -1 whose result is not vLLM's shape is dropped (validate).
func TestNotifications(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rctx, done := context.WithCancel(ctx)
	defer done()
	var mu sync.Mutex
	var notes []Notification
	handled := 0
	r, wait := start(t, rctx, Config{
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			mu.Lock()
			defer mu.Unlock()
			handled++
			if string(m.Outputs[0].RequestID) == "last" {
				done()
			}
			return nil
		},
		OnNotification: func(n Notification) {
			mu.Lock()
			notes = append(notes, n)
			mu.Unlock()
		},
	})
	p := pusher(t, r.Endpoint())
	defer p.Close()
	util := func(special int64, result string) [][]byte {
		m := simple(1, "x", 1)
		m.HasUtilityOutput = true
		m.Utility = enginecore.UtilityOutput{Special: special, HasResult: true, ResultType: []byte{0xc0}, Result: []byte(result)}
		return encode(m)
	}
	send(t, ctx, p, util(-1, "\x92\xb4RECONFIGURE_FINISHED\x03")...)
	send(t, ctx, p, util(-2, "\x82\xa2id\x01\xa6status\xa4dead")...)
	send(t, ctx, p, util(-7, "\xc0")...)
	send(t, ctx, p, util(-1, "\x91\x01")...) // wrong shape: dropped
	send(t, ctx, p, encode(simple(1, "last", 2))...)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 3 || handled != 4 {
		t.Fatalf("%d notifications, %d handled", len(notes), handled)
	}
	if n := notes[0]; n.CallID != -1 || n.Engine != 1 || n.EEP == nil || *n.EEP != (enginecore.EEPNotification{Type: "RECONFIGURE_FINISHED", DPRank: 3}) {
		t.Errorf("notification 0: %+v", n)
	}
	if n := notes[1]; n.CallID != -2 || n.FT == nil || *n.FT != (enginecore.FTStatus{Engine: 1, Status: "dead"}) {
		t.Errorf("notification 1: %+v", n)
	}
	if n := notes[2]; n.CallID != -7 || n.EEP != nil || n.FT != nil {
		t.Errorf("notification 2: %+v", n)
	}
	if st := r.Stats(); st.Dropped[decodeguard.ReasonValidate] != 1 {
		t.Errorf("dropped %v, want one validate", st.Dropped)
	}
}
