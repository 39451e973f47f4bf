package zmtpguard_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"slices"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// A guarded PULL listener: a zmq4 PUSH peer gets through, an HTTP client is
// refused after its first byte and counted.
func ExampleNewListener() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	refused := make(chan zmtpguard.Violation, 1)
	cfg := &zmtpguard.Config{
		MaxMessageSize: 64 << 10,
		// Called from the connection's goroutine: never block in it.
		OnViolation: func(v zmtpguard.Violation) {
			select {
			case refused <- v:
			default:
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	l, err := zmtpguard.NewListener(ln, "PULL", cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	// A hostile client: the guard answers with its greeting and closes.
	hc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer hc.Close()
	hc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	v := <-refused
	fmt.Println("refused:", v.Reason, "first byte", fmt.Sprintf("%#x", v.Prefix[0]))

	// A real ZeroMQ peer.
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial("tcp://" + ln.Addr().String()); err != nil {
		log.Fatal(err)
	}
	c, err := l.Accept(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := push.Send(zmq4.NewMsgFrom([]byte("hello"), []byte("guard"))); err != nil {
		log.Fatal(err)
	}
	var m zmtpguard.Message
	if err := c.ReadMessage(&m); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("from %s: %s %s\n", c.Peer().SocketType, m.Frames[0], m.Frames[1])
	fmt.Println("transport violations:", l.Stats().Refused[decodeguard.ReasonTransport])
	// Output:
	// refused: transport first byte 0x47
	// from PUSH: hello guard
	// transport violations: 1
}

// An unmodified zmq4 socket bound on a guarded scheme.
func ExampleRegisterTransport() {
	// zmq4's transport registry is global: register once per process.
	if !slices.Contains(zmq4.Transports(), "zmqguard-example") {
		if _, err := zmtpguard.RegisterTransport("zmqguard-example", &zmtpguard.Config{HandshakeTimeout: 2 * time.Second}); err != nil {
			log.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pull := zmq4.NewPull(ctx)
	defer pull.Close()
	if err := pull.Listen("zmqguard-example://127.0.0.1:0"); err != nil {
		log.Fatal(err)
	}

	// Peers connect with plain tcp://: the guard is on the listening side.
	push := zmq4.NewPush(ctx)
	defer push.Close()
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
		log.Fatal(err)
	}
	if err := push.Send(zmq4.NewMsgString("through the guard")); err != nil {
		log.Fatal(err)
	}
	m, err := pull.Recv()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", m.Frames[0])
	// Output:
	// through the guard
}

// One Budget shared by every connection of a listener bounds the bytes of
// messages they are receiving together; BodyTimeout bounds how long one
// message may take once its header arrived.
func ExampleBudget() {
	budget := &zmtpguard.Budget{Limit: 64 << 20, Wait: 2 * time.Second}
	cfg := zmtpguard.Config{Budget: budget, BodyTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gl, err := zmtpguard.NewListener(ln, "PULL", &cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer gl.Close()
	used, stalls, evictions := budget.Stats()
	fmt.Println(budget.Limit>>20, "MiB,", used, "used,", stalls, "stalls,", evictions, "evictions")
	// Output: 64 MiB, 0 used, 0 stalls, 0 evictions
}
