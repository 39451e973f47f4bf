package loop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// frames is a Receiver that returns the given messages, then reports closed.
type frames [][]byte

func (f *frames) Recv(ctx context.Context) (socket.Msg, error) {
	if len(*f) == 0 {
		return socket.Msg{}, net.ErrClosed
	}
	m := (*f)[0]
	*f = (*f)[1:]
	return socket.Msg{Frames: [][]byte{m}}, nil
}

// A PULL-style loop over vLLM front-end messages (engine_to_exclude, wave),
// decoded untyped: hostile frames are dropped and counted, valid ones
// handled. With a real socket, Run would go on until its context ends.
func Example() {
	in := frames{
		{0x92, 0xc0, 0x07},             // (None, 7)
		{0x45},                         // a scanner's single int: well-formed, wrong shape
		{0xa2, 0xff, 0xfe},             // invalid UTF-8
		{0xdd, 0xff, 0xff, 0xff, 0xff}, // array32 claiming 4 billion elements
		{0x92, 0x02, 0x07},             // (2, 7)
	}
	l, err := loop.New(&in, loop.Config[any]{
		Name:   "front",
		Logger: slog.New(slog.DiscardHandler),
		Decode: loop.UntypedDecoder(decodeguard.Limits{}),
		Validate: func(v *any) error {
			if a, ok := (*v).([]any); !ok || len(a) != 2 {
				return errors.New("want (engine_to_exclude, wave)")
			}
			return nil
		},
		Handler: func(_ context.Context, d loop.Delivery[any]) error {
			fmt.Println("handled", *d.Value)
			return nil
		},
		OnDrop: func(d loop.Drop) {
			fmt.Printf("dropped %s: len=%d hex=%x\n", d.Reason, d.Length, d.Prefix)
		},
	})
	if err != nil {
		panic(err)
	}
	err = l.Run(context.Background())
	fmt.Println("receiver closed:", errors.Is(err, net.ErrClosed))
	st := l.Stats()
	fmt.Println("received", st.Received, "delivered", st.Delivered,
		"decode", st.Dropped[decodeguard.ReasonDecode], "validate", st.Dropped[decodeguard.ReasonValidate])
	// Output:
	// handled [<nil> 7]
	// dropped validate: len=1 hex=45
	// dropped decode: len=3 hex=a2fffe
	// dropped decode: len=5 hex=ddffffffff
	// handled [2 7]
	// receiver closed: true
	// received 5 delivered 2 decode 2 validate 1
}

// Deliver fans several loops into one select, next to a timer: each loop
// drops bad input in its own goroutine, and the consumer calls Done when it
// is finished with a delivery (the loop reuses the frames and the value
// after that).
func ExampleLoop_Deliver() {
	newLoop := func(name string, in frames) *loop.Loop[any] {
		l, err := loop.New(&in, loop.Config[any]{
			Name:   name,
			Logger: slog.New(slog.DiscardHandler),
			Decode: loop.UntypedDecoder(decodeguard.Limits{}),
		})
		if err != nil {
			panic(err)
		}
		return l
	}
	front := newLoop("front", frames{{0x92, 0xc0, 0x07}, {0xc1}, {0x92, 0x02, 0x07}})
	back := newLoop("back", frames{{0x01}, {0xa2, 0xff, 0xfe}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	frontCh, backCh := make(chan loop.Delivery[any]), make(chan loop.Delivery[any])
	ended := make(chan error, 2)
	go func() { ended <- front.Deliver(ctx, frontCh) }()
	go func() { ended <- back.Deliver(ctx, backCh) }()

	var fromFront, fromBack []any
	timer := time.NewTimer(time.Hour) // the coordinator's publish timer
	defer timer.Stop()
	for running := 2; running > 0; {
		select {
		case d := <-frontCh:
			fromFront = append(fromFront, *d.Value) // copy what must outlive Done
			d.Done()
		case d := <-backCh:
			fromBack = append(fromBack, *d.Value)
			d.Done()
		case <-timer.C:
			// publish stats
		case err := <-ended:
			fmt.Println("loop ended:", errors.Is(err, net.ErrClosed))
			running--
		}
	}
	fmt.Println("front:", fromFront, "dropped", front.Stats().Dropped.Total())
	fmt.Println("back:", fromBack, "dropped", back.Stats().Dropped.Total())
	// Output:
	// loop ended: true
	// loop ended: true
	// front: [[<nil> 7] [2 7]] dropped 1
	// back: [1] dropped 1
}
