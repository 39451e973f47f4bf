package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/envelope"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

var (
	statsFrame  = []byte(vllmwire.StatsVector)
	deepNesting = append(bytes.Repeat([]byte{0x91}, 20000), 0xc0)
)

// seed is one hostile frame and the reason it must be dropped with.
type seed struct {
	name   string
	frame  []byte
	reason decodeguard.Reason
}

// typedSeeds are the seeds against the typed EngineCoreOutputs loop.
var typedSeeds = []seed{
	{"malformed (0xc1)", []byte{0xc1}, decodeguard.ReasonDecode},
	{"truncated", statsFrame[:40], decodeguard.ReasonDecode},
	{"int where an array is expected", []byte{0x45}, decodeguard.ReasonDecode},
	{"invalid UTF-8", []byte{0xa2, 0xff, 0xfe}, decodeguard.ReasonDecode},
	{"map keyed by a map", []byte{0x81, 0x80, 0x01}, decodeguard.ReasonDecode},
	{"20000-deep nesting", deepNesting, decodeguard.ReasonOversize},
	{"array32 length bomb", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}, decodeguard.ReasonDecode},
	{"terminal escape in a str", []byte("\xa5\x1b[31m"), decodeguard.ReasonDecode},
	{"empty frame", []byte{}, decodeguard.ReasonDecode},
	{"valid msgpack, wrong type inside", []byte{0x94, 0x01, 0x90, 0xa1, 'x', 0x01}, decodeguard.ReasonDecode},
}

func newStatsLoop(t testing.TB, r Receiver, h func(context.Context, Delivery[vllmwire.Message]) error,
	mod func(*Config[vllmwire.Message])) *Loop[vllmwire.Message] {
	cfg := Config[vllmwire.Message]{
		Name:    "stats",
		Logger:  discard(),
		Decode:  MsgpDecoder[vllmwire.Message](decodeguard.Limits{}),
		Handler: h,
	}
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func checkStats(t *testing.T, m *vllmwire.Message) {
	t.Helper()
	s := m.SchedulerStats
	if m.EngineIndex != 1 || s == nil || s.NumRunningReqs != 3 || s.NumWaitingReqs != 5 ||
		s.StepCounter != 42 || s.CurrentWave != 7 || s.KVCacheUsage != 0.25 || m.Timestamp != 12345.678 {
		t.Fatalf("decoded %+v stats %+v", m.EngineCoreOutputs, s)
	}
}

// TestSeedScenarios sends each seed followed by a valid message: the seed
// is dropped with its reason and the valid message is delivered.
func TestSeedScenarios(t *testing.T) {
	for _, sd := range typedSeeds {
		t.Run(sd.name, func(t *testing.T) {
			r := &sliceRecv{msgs: [][][]byte{{sd.frame}, {statsFrame}}}
			var got int
			var drops []Drop
			l := newStatsLoop(t, r, func(_ context.Context, d Delivery[vllmwire.Message]) error {
				got++
				checkStats(t, d.Value)
				return nil
			}, func(c *Config[vllmwire.Message]) {
				c.OnDrop = func(d Drop) { drops = append(drops, d) }
			})
			err := l.Run(testCtx(t))
			if !errors.Is(err, errReceiverClosed) {
				t.Fatalf("Run = %v, want the receiver's end", err)
			}
			st := l.Stats()
			if got != 1 || st.Delivered != 1 || st.Received != 2 || st.Dropped.Total() != 1 ||
				st.Dropped[sd.reason] != 1 || len(drops) != 1 || drops[0].Reason != sd.reason {
				t.Fatalf("delivered %d, stats %+v, drops %+v", got, st, drops)
			}
			if drops[0].Frames != 1 || drops[0].Length != len(sd.frame) || st.LastDrop.IsZero() {
				t.Fatalf("drop %+v", drops[0])
			}
		})
	}
}

// TestSeedScenariosUntyped runs the front-socket seeds (vLLM's untyped
// decode) through an UntypedDecoder loop.
func TestSeedScenariosUntyped(t *testing.T) {
	valid := []byte{0x92, 0xc0, 0x07} // (nil, 7)
	for _, sd := range typedSeeds {
		switch sd.name {
		case "int where an array is expected", "valid msgpack, wrong type inside", "terminal escape in a str":
			continue // well-formed msgpack: fine untyped
		}
		t.Run(sd.name, func(t *testing.T) {
			r := &sliceRecv{msgs: [][][]byte{{sd.frame}, {valid}}}
			var got []any
			l, err := New(r, Config[any]{
				Logger: discard(),
				Decode: UntypedDecoder(decodeguard.Limits{}),
				Handler: func(_ context.Context, d Delivery[any]) error {
					got = append(got, *d.Value)
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
				t.Fatal(err)
			}
			st := l.Stats()
			if len(got) != 1 || fmt.Sprint(got[0]) != "[<nil> 7]" || st.Dropped[sd.reason] != 1 || st.Dropped.Total() != 1 {
				t.Fatalf("got %v, stats %+v", got, st)
			}
		})
	}
}

// TestRouterBareDealer: a ROUTER loop with the strict envelope drops a bare
// DEALER's [identity, body] and delivers the next REQ-shaped message with
// its identity.
func TestRouterBareDealer(t *testing.T) {
	req := []byte("\x93\xc4\x0cget_meta_msg\x00\x01") // V3 (GET_META_MSG, 0, 1)
	r := &sliceRecv{msgs: [][][]byte{
		{[]byte("dealer"), req},
		{},
		{[]byte("req-peer"), {}, req},
	}}
	var ids []string
	l, err := New(r, Config[any]{
		Logger:   discard(),
		Envelope: &envelope.Options{},
		Decode:   UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d Delivery[any]) error {
			ids = append(ids, string(d.Envelope.Identity))
			reply := d.Envelope.Reply(nil, []byte("payload"))
			if len(reply) != 3 || string(reply[0]) != "req-peer" || len(deliveryBody(d)) != 1 {
				t.Errorf("reply %q body %q", reply, deliveryBody(d))
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	if len(ids) != 1 || ids[0] != "req-peer" || st.Dropped[decodeguard.ReasonEnvelope] != 2 || st.Received != 3 {
		t.Fatalf("ids %q stats %+v", ids, st)
	}

	// Lenient: the bare DEALER is accepted, and its reply has no delimiter.
	r = &sliceRecv{msgs: [][][]byte{{[]byte("dealer"), req}}}
	l, err = New(r, Config[any]{
		Logger:   discard(),
		Envelope: &envelope.Options{Lenient: true},
		Decode:   UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d Delivery[any]) error {
			if d.Envelope.Delimited || len(d.Envelope.Reply(nil, nil)) != 2 {
				t.Errorf("envelope %+v", d.Envelope)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) || l.Stats().Delivered != 1 {
		t.Fatal(err, l.Stats())
	}
}

func TestNewRejects(t *testing.T) {
	r := newChanRecv(0)
	dec := UntypedDecoder(decodeguard.Limits{})
	for name, f := range map[string]func() error{
		"nil receiver": func() error { _, err := New(nil, Config[any]{Decode: dec}); return err },
		"nil decoder":  func() error { _, err := New(r, Config[any]{}); return err },
		"bad envelope": func() error {
			_, err := New(r, Config[any]{Decode: dec, Envelope: &envelope.Options{MaxFrames: 1}})
			if !errors.Is(err, envelope.ErrInvalidOptions) {
				return nil
			}
			return err
		},
	} {
		if f() == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	l, err := New(r, Config[any]{Decode: dec})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(testCtx(t)); err == nil {
		t.Fatal("Run without Handler succeeded")
	}
	if err := l.Deliver(testCtx(t), nil); err == nil {
		t.Fatal("Deliver without channel succeeded")
	}
	if l.name() != "loop" {
		t.Fatalf("default name %q", l.name())
	}
}

func TestHandlerErrorSurfaces(t *testing.T) {
	boom := errors.New("handler bug")
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {statsFrame}}}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return boom }, nil)
	err := l.Run(testCtx(t))
	var le *Error
	if !errors.Is(err, boom) || !errors.As(err, &le) || le.Stage != stageHandler || le.Loop != "stats" {
		t.Fatalf("Run = %v", err)
	}
	if st := l.Stats(); st.HandlerErrors != 1 || st.Delivered != 1 || r.i != 1 {
		t.Fatalf("stats %+v, received %d", st, r.i)
	}
	if !strings.Contains(err.Error(), "loop stats: handler: handler bug") {
		t.Fatalf("text %q", err)
	}
}

func TestHandlerClassifiedErrorIsADrop(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {statsFrame}}}
	n := 0
	l := newStatsLoop(t, r, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		n++
		if n == 1 {
			return decodeguard.NewError(decodeguard.ReasonUnknownRank, "engine 1 is not ours")
		}
		return nil
	}, nil)
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Dropped[decodeguard.ReasonUnknownRank] != 1 || st.Delivered != 2 || st.HandlerErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOnErrorDecides(t *testing.T) {
	boom := errors.New("transient")
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {statsFrame}, {statsFrame}}}
	var seen []error
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return boom },
		func(c *Config[vllmwire.Message]) {
			c.OnError = func(err error) error {
				seen = append(seen, err)
				if len(seen) == 3 {
					return fmt.Errorf("giving up: %w", err)
				}
				return nil
			}
		})
	err := l.Run(testCtx(t))
	if !errors.Is(err, boom) || len(seen) != 3 || l.Stats().HandlerErrors != 3 {
		t.Fatalf("Run = %v after %d OnError calls", err, len(seen))
	}
}

func TestHandlerPanicPropagates(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}}}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { panic("handler bug") }, nil)
	func() {
		defer func() {
			if v := recover(); v != "handler bug" {
				t.Fatalf("recovered %v", v)
			}
		}()
		_ = l.Run(testCtx(t))
		t.Fatal("Run returned")
	}()
	if st := l.Stats(); st.HandlerErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The loop is usable again: the panic released it.
	r.msgs = append(r.msgs, [][]byte{statsFrame})
	l.cfg.Handler = func(context.Context, Delivery[vllmwire.Message]) error { return nil }
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
}

func TestRecoverHandlerPanics(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}}}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { panic("handler bug") },
		func(c *Config[vllmwire.Message]) { c.RecoverHandlerPanics = true })
	err := l.Run(testCtx(t))
	var pe *handlerPanicError
	if !errors.As(err, &pe) || pe.Value != "handler bug" || len(pe.Stack) == 0 {
		t.Fatalf("Run = %v", err)
	}
}

// panicky is a hand-written decoder that panics on a frame starting 0xff.
func panicky(frames [][]byte, dst *int) error {
	if f := frames[0]; f[0] == 0xff && len(f) <= 0xff {
		_ = f[f[0]] // index out of range: a runtime panic
	}
	*dst = int(frames[0][0])
	return nil
}

func TestDecoderPanicIsDropped(t *testing.T) {
	h := &countHandler{}
	r := &sliceRecv{msgs: [][][]byte{{{0xff, 0x1b, 'x'}}, {{0xff}}, {{0x07}}}}
	var got []int
	l, err := New(r, Config[int]{
		Logger: slog.New(h),
		Decode: panicky,
		Handler: func(_ context.Context, d Delivery[int]) error {
			got = append(got, *d.Value)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	if len(got) != 1 || got[0] != 7 || st.Dropped[decodeguard.ReasonDecoderPanic] != 2 {
		t.Fatalf("got %v stats %+v", got, st)
	}
	recs := h.records()
	stacks := 0
	for _, rec := range recs {
		if rec.level == slog.LevelError {
			stacks++
			if !strings.Contains(rec.attrs["stack"], "panicky") {
				t.Errorf("stack %q", rec.attrs["stack"])
			}
		}
	}
	if stacks != 1 {
		t.Fatalf("%d stack lines in %+v", stacks, recs)
	}
	checkSafe(t, recs)
}

func TestPropagateDecoderPanics(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{{0xff}}}}
	l, err := New(r, Config[int]{
		Logger:                 discard(),
		Decode:                 panicky,
		PropagateDecoderPanics: true,
		Handler:                func(context.Context, Delivery[int]) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	_ = l.Run(testCtx(t))
}

func TestUnclassifiedDecoderErrorEndsRun(t *testing.T) {
	bug := errors.New("decoder bug")
	r := &sliceRecv{msgs: [][][]byte{{{1}}, {{2}}}}
	l, err := New(r, Config[int]{
		Logger:  discard(),
		Decode:  func([][]byte, *int) error { return bug },
		Handler: func(context.Context, Delivery[int]) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	err = l.Run(testCtx(t))
	var le *Error
	if !errors.Is(err, bug) || !errors.As(err, &le) || le.Stage != stageDecode {
		t.Fatalf("Run = %v", err)
	}
}

func TestValidate(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {statsFrame}, {statsFrame}}}
	n := 0
	var drops []Drop
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil },
		func(c *Config[vllmwire.Message]) {
			c.Validate = func(m *vllmwire.Message) error {
				n++
				switch n {
				case 1:
					return fmt.Errorf("engine index %d out of range", m.EngineIndex)
				case 2:
					return decodeguard.NewError(decodeguard.ReasonUnknownRank, "not ours")
				}
				return nil
			}
			c.OnDrop = func(d Drop) { drops = append(drops, d) }
		})
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Dropped[decodeguard.ReasonValidate] != 1 || st.Dropped[decodeguard.ReasonUnknownRank] != 1 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
	if drops[0].Stage != stageValidate || !strings.Contains(drops[0].Err.Error(), "out of range") {
		t.Fatalf("drop %+v", drops[0])
	}
}

func TestReceiveErrors(t *testing.T) {
	r := newChanRecv(4)
	r.ch <- item{err: decodeguard.NewError(decodeguard.ReasonOversize, "frame over MaxMessageSize")}
	r.send(statsFrame)
	r.ch <- item{err: errors.New("socket bug")}
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error { return nil }, nil)
	err := l.Run(testCtx(t))
	var le *Error
	if !errors.As(err, &le) || le.Stage != stageReceive || le.Err.Error() != "socket bug" {
		t.Fatalf("Run = %v", err)
	}
	if st := l.Stats(); st.Dropped[decodeguard.ReasonOversize] != 1 || st.Received != 1 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestValueReset: a map field missing from the next message does not keep
// the previous message's value, and a short tuple has no stats.
func TestValueReset(t *testing.T) {
	short := []byte{0x91, 0x00} // [engine_index 0]: every other field defaults
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {short}}}
	var seen []string
	l := newStatsLoop(t, r, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		seen = append(seen, fmt.Sprintf("%d %v %v", d.Value.EngineIndex, d.Value.SchedulerStats != nil, d.Value.Timestamp))
		return nil
	}, nil)
	if err := l.Run(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	if want := []string{"1 true 12345.678", "0 false 0"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("seen %q, want %q", seen, want)
	}

}

func TestMsgpFrameDecoder(t *testing.T) {
	dec := MsgpFrameDecoder[vllmwire.Message](decodeguard.Limits{}, -1)
	var m vllmwire.Message
	if err := dec([][]byte{{0x02}, statsFrame}, &m); err != nil {
		t.Fatal(err)
	}
	checkStats(t, &m)
	if err := dec(nil, &m); decodeguard.ReasonOf(err) != decodeguard.ReasonEnvelope {
		t.Fatal(err)
	}
	dec = MsgpFrameDecoder[vllmwire.Message](decodeguard.Limits{}, 1)
	if err := dec([][]byte{{0x02}, statsFrame}, &m); err != nil {
		t.Fatal(err)
	}
	if err := dec([][]byte{statsFrame}, &m); decodeguard.ReasonOf(err) != decodeguard.ReasonEnvelope {
		t.Fatal(err)
	}
	one := MsgpDecoder[vllmwire.Message](decodeguard.Limits{})
	if err := one([][]byte{statsFrame, statsFrame}, &m); decodeguard.ReasonOf(err) != decodeguard.ReasonEnvelope {
		t.Fatal(err)
	}
	// Limits are applied: a depth limit of 1 refuses the nested stats map.
	strict := MsgpDecoder[vllmwire.Message](decodeguard.Limits{MaxDepth: 1})
	if err := strict([][]byte{statsFrame}, &m); decodeguard.ReasonOf(err) != decodeguard.ReasonOversize {
		t.Fatal(err)
	}
	var raw [][]byte
	if err := RawDecoder([][]byte{{1}, {2}}, &raw); err != nil || len(raw) != 2 {
		t.Fatal(raw, err)
	}
	var v any
	if err := UntypedDecoder(decodeguard.Limits{})([][]byte{{1}, {2}}, &v); decodeguard.ReasonOf(err) != decodeguard.ReasonEnvelope {
		t.Fatal(err)
	}
}

// TestZeroValueDecoder: MsgpDecoder zeroes a destination whose type has no
// Reset, so map keys missing from the next message read as zero.
func TestZeroValueDecoder(t *testing.T) {
	dec := MsgpDecoder[vllmwire.SchedulerStats](decodeguard.Limits{})
	var s vllmwire.SchedulerStats
	full := []byte("\x82\xb0num_running_reqs\x03\xb0num_waiting_reqs\x05")
	part := []byte("\x81\xb0num_running_reqs\x04")
	if err := dec([][]byte{full}, &s); err != nil || s.NumWaitingReqs != 5 {
		t.Fatal(s, err)
	}
	if err := dec([][]byte{part}, &s); err != nil || s.NumRunningReqs != 4 || s.NumWaitingReqs != 0 {
		t.Fatal(s, err)
	}
}

// TestShutdownMidStream cancels the context while a producer keeps
// sending: Run returns nil after the in-flight handler, and the goroutine
// check in TestMain proves nothing outlives it.
func TestShutdownMidStream(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	r := newChanRecv(16)
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for {
			select {
			case r.ch <- item{frames: [][]byte{statsFrame}}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var inHandler atomic.Bool
	var handled atomic.Int64
	l := newStatsLoop(t, r, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		inHandler.Store(true)
		defer inHandler.Store(false)
		if handled.Add(1) == 500 {
			cancel()
		}
		return nil
	}, nil)
	if err := l.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if inHandler.Load() || handled.Load() < 500 {
		t.Fatalf("handled %d, in handler %v", handled.Load(), inHandler.Load())
	}
	<-producerDone
}

func TestClose(t *testing.T) {
	r := newChanRecv(1)
	started := make(chan struct{})
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error {
		close(started)
		return nil
	}, nil)
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background()) }()
	r.send(statsFrame)
	<-started
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrLoopClosed) {
			t.Fatalf("Run = %v", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("Run did not return after Close")
	}
	if err := l.Run(testCtx(t)); !errors.Is(err, ErrLoopClosed) {
		t.Fatalf("Run after Close = %v", err)
	}
	if _, err := l.Next(testCtx(t)); !errors.Is(err, ErrLoopClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
}

func TestBusy(t *testing.T) {
	r := newChanRecv(1)
	r.send(statsFrame)
	inside, release := make(chan struct{}), make(chan struct{})
	l := newStatsLoop(t, r, func(context.Context, Delivery[vllmwire.Message]) error {
		close(inside)
		<-release
		return nil
	}, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	<-inside
	if _, err := l.Next(ctx); !errors.Is(err, errBusy) {
		t.Fatal(err)
	}
	if err := l.Deliver(ctx, make(chan Delivery[vllmwire.Message])); !errors.Is(err, errBusy) {
		t.Fatal(err)
	}
	if err := l.Run(ctx); !errors.Is(err, errBusy) {
		t.Fatal(err)
	}
	close(release)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNext(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{{0xc1}}, {statsFrame}, {{0x45}}}}
	l := newStatsLoop(t, r, nil, nil)
	d, err := l.Next(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	checkStats(t, d.Value)
	d.Done() // a no-op outside Deliver
	if _, err := l.Next(testCtx(t)); !errors.Is(err, errReceiverClosed) {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Dropped[decodeguard.ReasonDecode] != 2 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

func TestErrorText(t *testing.T) {
	e := &Error{Loop: "x", Stage: stageDecode, Peer: "1.2.3.4:5", Err: errors.New("bad \x1b[31m byte")}
	if got := e.Error(); got != `loop x: decode (peer 1.2.3.4:5): bad \x1b[31m byte` {
		t.Fatalf("%q", got)
	}
	for _, st := range []string{stageReceive, stageEnvelope, stageDecode, stageValidate, stageHandler} {
		if e := (&Error{Loop: "x", Stage: st, Err: io.EOF}); !strings.HasPrefix(e.Error(), "loop x: "+st+": ") {
			t.Fatalf("stage %q: %q", st, e.Error())
		}
	}
	long := strings.Repeat("\xff", 1000)
	if got := errText(errors.New(long)); len(got) > maxErrText+len("…") || !strings.HasSuffix(got, "…") {
		t.Fatalf("%d %q", len(got), got[:20])
	}
	d := Drop{Prefix: []byte{0x1b, 0x5b}, lastLen: 100}
	if d.hex() != "1b5b…" {
		t.Fatal(d.hex())
	}
	hp := &handlerPanicError{Value: errors.New("x")}
	if hp.Unwrap() == nil || hp.Error() != "handler panicked: x" {
		t.Fatal(hp)
	}
	if (&handlerPanicError{Value: 3}).Error() != "handler panicked: 3" {
		t.Fatal("panic text")
	}
	_ = time.Second
}

// TestErrorNoStutter: a loop's errors say "loop" once.
func TestErrorNoStutter(t *testing.T) {
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{&Error{Loop: "loop", Stage: stageReceive, Err: errReceiverClosed}, "loop: receive: receiver closed: use of closed network connection"},
		{&Error{Stage: stageHandler, Err: errors.New("boom")}, "loop: handler: boom"},
		{&Error{Loop: "jobs", Stage: stageReceive, Err: errReceiverClosed}, "loop jobs: receive: receiver closed: use of closed network connection"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
