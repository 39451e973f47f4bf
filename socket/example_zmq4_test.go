package socket_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// A zmq4 PULL kept as it is, listening on the guarded transport (a frame
// header claiming 2^40 bytes closes that connection before zmq4 allocates),
// read through FromZMQ4: what loop.New takes, or read here directly.
func ExampleFromZMQ4() {
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
	rcv := socket.FromZMQ4(pull)
	defer rcv.Close() // closes pull

	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil { // peers dial plain tcp://
		log.Fatal(err)
	}
	_ = push.Send(zmq4.NewMsgFrom([]byte("job"), []byte("42")))
	m, err := rcv.Recv(ctx)
	fmt.Printf("%q %v, peer known: %v\n", m.Frames, err, m.Peer != nil) // zmq4 does not say who sent it
	// Output:
	// ["job" "42"] <nil>, peer known: false
}
