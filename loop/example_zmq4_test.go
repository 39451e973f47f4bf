package loop_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"slices"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Migrating zmq4 code, first way: keep the zmq4.Socket, wrap it. The
// guarded transport checks every byte under zmq4 (a frame header claiming
// 2^40 bytes closes that connection instead of reaching zmq4's allocator),
// and socket.FromZMQ4 feeds the socket to a Loop, which drops and counts bad
// frames. A peer that leaves ends only its own connection.
func Example_zmq4Wrap() {
	// zmq4's transport registry is global: register once per process.
	if !slices.Contains(zmq4.Transports(), "zmqguard") {
		if _, err := zmtpguard.RegisterTransport("zmqguard", nil); err != nil {
			log.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	pull := zmq4.NewPull(ctx)
	if err := pull.Listen("zmqguard://127.0.0.1:0"); err != nil { // not tcp://
		log.Fatal(err)
	}
	rcv := socket.FromZMQ4(pull) // closes pull when the loop's context ends
	defer pull.Close()

	handled := make(chan any, 1)
	l, err := loop.New(rcv, loop.Config[any]{
		Name:    "jobs",
		Logger:  slog.New(slog.DiscardHandler), // nil logs through slog.Default()
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d loop.Delivery[any]) error { handled <- *d.Value; return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()

	// Peers dial with plain tcp://: the guard is on the listening side.
	addr := "tcp://" + pull.Addr().String()
	first := zmq4.NewPush(ctx)
	if err := first.Dial(addr); err != nil {
		log.Fatal(err)
	}
	_ = first.Send(zmq4.NewMsg([]byte{0xc1}))       // not msgpack: dropped
	_ = first.Send(zmq4.NewMsg([]byte{0x92, 1, 7})) // [1 7]
	fmt.Println("handled", <-handled)
	_ = first.Close() // this peer leaves; the loop goes on

	second := zmq4.NewPush(ctx)
	defer second.Close()
	if err := second.Dial(addr); err != nil {
		log.Fatal(err)
	}
	_ = second.Send(zmq4.NewMsg([]byte{0x92, 2, 7}))
	fmt.Println("handled", <-handled)

	stop()
	fmt.Println("Run:", <-done)
	fmt.Println("decode drops:", l.Stats().Dropped[decodeguard.ReasonDecode])
	// Output:
	// handled [1 7]
	// handled [2 7]
	// Run: <nil>
	// decode drops: 1
}

// Migrating zmq4 code, second way: switch to zmqguard's own socket. The
// loop code does not change; the socket is hardened above the transport
// too (per-peer send queues, no shared writer lock, peers identified), and
// its peers may still be zmq4 or libzmq sockets.
func Example_zmq4Switch() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	pull, err := socket.New("PULL", socket.DefaultOptions()) // was zmq4.NewPull(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil { // was pull.Listen
		log.Fatal(err)
	}

	handled := make(chan any, 1)
	l, err := loop.New(pull, loop.Config[any]{ // was loop.New(socket.FromZMQ4(pull), ...)
		Name:    "jobs",
		Logger:  slog.New(slog.DiscardHandler),
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d loop.Delivery[any]) error { handled <- *d.Value; return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()

	// The unchanged zmq4 producer.
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial(pull.Endpoint()); err != nil {
		log.Fatal(err)
	}
	_ = push.Send(zmq4.NewMsg([]byte{0x92, 3, 7}))
	fmt.Println("handled", <-handled)
	stop()
	fmt.Println("Run:", <-done)
	// Output:
	// handled [3 7]
	// Run: <nil>
}
