package socket_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

// A PULL socket binds a free port, a PUSH socket dials it, and one message
// travels between them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pull, err := socket.New("PULL", socket.Options{})
	if err != nil {
		panic(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		panic(err)
	}

	push, err := socket.New("PUSH", socket.Options{})
	if err != nil {
		panic(err)
	}
	defer push.Close()
	if err := push.Dial(pull.Endpoint()); err != nil { // returns at once
		panic(err)
	}
	// Send waits (within ctx) until the background connection is up.
	if err := push.Send(ctx, []byte("hello"), []byte("world")); err != nil {
		panic(err)
	}
	m, err := pull.Recv(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s\n", m.Frames[0], m.Frames[1])
	// Output: hello world
}

// A ROUTER answers each request on the connection it came from; a send to
// an identity that is not connected is an error naming it.
func ExampleNew_router() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	router, _ := socket.New("ROUTER", socket.Options{})
	defer router.Close()
	router.Bind("tcp://127.0.0.1:0")

	req, _ := socket.New("REQ", socket.Options{})
	defer req.Close()
	req.Dial(router.Endpoint())

	req.Send(ctx, []byte("ping"))
	m, _ := router.Recv(ctx) // [identity, "", "ping"]
	router.Send(ctx, m.Frames[0], nil, []byte("pong"))
	reply, _ := req.Recv(ctx)
	fmt.Printf("%s\n", reply.Frames[0])

	fmt.Println(router.Send(ctx, []byte("nobody"), []byte("x")))
	// Output:
	// pong
	// socket: ROUTER has no peer with identity 6e6f626f6479
}

// A ROUTER for engines spread over hosts: a silent engine (vanished host,
// frozen process) is dropped after 2 s + 6 s of silence, and a restarted
// engine presenting the same identity takes its place at once.
func ExampleOptions_liveness() {
	o := socket.DefaultOptions()
	o.HeartbeatInterval = 2 * time.Second
	o.HeartbeatTimeout = 6 * time.Second
	o.RouterHandover = true
	o.OnEvent = func(e socket.Event) {
		if e.Kind == socket.EventDisconnected && errors.Is(e.Err, socket.ErrHeartbeatTimeout) {
			fmt.Println("silent peer dropped:", e.Remote)
		}
	}
	r, err := socket.New("ROUTER", o)
	if err != nil {
		panic(err)
	}
	defer r.Close()
	fmt.Println(r.Stats().HeartbeatTimeouts, r.Stats().Handovers)
	// Output: 0 0
}
