package loop

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
	"github.com/zmqguard/zmqguard/socket"
)

// reuseRecv writes message i (msgpack uint32 i) into one buffer it reuses
// for every Recv, as a real socket may; every third message is junk.
type reuseRecv struct {
	buf   [5]byte
	frame [][]byte
	calls atomic.Int64
	limit int64
}

func (r *reuseRecv) Recv(ctx context.Context) (socket.Msg, error) {
	if err := ctx.Err(); err != nil {
		return socket.Msg{}, err
	}
	i := r.calls.Add(1)
	if i > r.limit {
		<-ctx.Done()
		return socket.Msg{}, ctx.Err()
	}
	r.buf[0] = 0xce
	if i%3 == 0 {
		r.buf[0] = 0xc1
	}
	binary.BigEndian.PutUint32(r.buf[1:], uint32(i))
	r.frame = [][]byte{r.buf[:]}
	return socket.Msg{Frames: r.frame}, nil
}

// TestDeliverFanIn runs two loops in channel mode and consumes both, plus a
// tick channel, in one select. The receivers reuse their buffers, so if a
// loop received again before Done the race detector (and the checks) would
// see the delivery change under the consumer.
func TestDeliverFanIn(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	const per = 301 // ends on a valid message, so the counts are final when the consumer has it
	ra, rb := &reuseRecv{limit: per}, &reuseRecv{limit: per}
	mk := func(name string, r Receiver) *Loop[any] {
		l, err := New(r, Config[any]{Name: name, Logger: discard(), Decode: UntypedDecoder(decodeguard.Limits{})})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la, lb := mk("a", ra), mk("b", rb)
	cha, chb := make(chan Delivery[any]), make(chan Delivery[any])
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs <- la.Deliver(ctx, cha) }()
	go func() { defer wg.Done(); errs <- lb.Deliver(ctx, chb) }()

	tick := make(chan struct{}, 1)
	tick <- struct{}{}
	ticks := 0
	var lastA, lastB uint64
	check := func(d Delivery[any], r *reuseRecv, last *uint64) {
		v := (*d.Value).(uint64)
		if v <= *last || int64(v) != r.calls.Load() || v%3 == 0 {
			t.Fatalf("value %d after %d, receiver at %d", v, *last, r.calls.Load())
		}
		if got := binary.BigEndian.Uint32(deliveryBody(d)[0][1:]); uint64(got) != v {
			t.Fatalf("frame changed under the consumer: %d != %d", got, v)
		}
		*last = v
		d.Done()
		d.Done() // twice is harmless
	}
	for n := 0; n < 2*(per-per/3); {
		select {
		case d := <-cha:
			check(d, ra, &lastA)
			n++
		case d := <-chb:
			check(d, rb, &lastB)
			n++
		case <-tick:
			ticks++
		}
	}
	cancel()
	wg.Wait()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("Deliver = %v", err)
		}
	}
	for _, l := range []*Loop[any]{la, lb} {
		st := l.Stats()
		if st.Delivered != per-per/3 || st.Dropped[decodeguard.ReasonDecode] != per/3 {
			t.Fatalf("%s: %+v", l.name(), st)
		}
	}
	if ticks != 1 {
		t.Fatal("tick lost")
	}
}

// TestDeliverCancelWhileHeld: cancelling while the consumer holds a
// delivery ends Deliver without waiting for Done, and a late Done does not
// confuse a later Deliver.
func TestDeliverCancelWhileHeld(t *testing.T) {
	r := &sliceRecv{msgs: [][][]byte{{statsFrame}, {statsFrame}, {statsFrame}}}
	l := newStatsLoop(t, r, nil, nil)
	ch := make(chan Delivery[vllmwire.Message])
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- l.Deliver(ctx, ch) }()
	held := <-ch
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Deliver = %v", err)
	}
	checkStats(t, held.Value) // intact: nothing was received after it

	ctx2, cancel2 := context.WithCancel(testCtx(t))
	defer cancel2()
	go func() { done <- l.Deliver(ctx2, ch) }()
	held.Done() // late Done of the old delivery
	d := <-ch
	if r.i != 2 {
		t.Fatalf("receiver at %d", r.i)
	}
	d.Done()
	d = <-ch
	d.Done()
	if err := <-done; !errors.Is(err, errReceiverClosed) {
		t.Fatalf("Deliver = %v", err)
	}
	if l.Stats().Delivered != 3 {
		t.Fatal(l.Stats())
	}
}

// TestDeliverClose: Close ends Deliver with ErrLoopClosed.
func TestDeliverClose(t *testing.T) {
	l := newStatsLoop(t, newChanRecv(0), nil, nil)
	done := make(chan error, 1)
	go func() { done <- l.Deliver(context.Background(), make(chan Delivery[vllmwire.Message])) }()
	_ = l.Close()
	if err := <-done; !errors.Is(err, ErrLoopClosed) {
		t.Fatal(err)
	}
}
