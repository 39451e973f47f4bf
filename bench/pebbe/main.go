// Command pebberecv is the cgo baseline receiver: libzmq (Debian's
// libzmq3-dev) through github.com/pebbe/zmq4, a PULL socket and its
// RecvBytes in a loop, counting messages. It is what a Go program picks
// when go-zeromq/zmq4 is too slow.
//
// It lives in its own module (bench/pebbe/go.mod) so that zmqguard's main
// module stays pure Go: `CGO_ENABLED=0 go build ./...` never sees it.
// bench/run.sh builds it when libzmq's headers are present and prints a
// loud SKIP line otherwise.
//
// Usage:
//
//	pebberecv --bind tcp://127.0.0.1:0 --count N [--multipart]
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// With --multipart each message is read whole with RecvMessageBytes.
//
// It exits after N messages and prints one JSON line (msgs/s and CPU ns
// per message from the first to the last message, allocations per
// message), in the format of the other bench receivers.
package main

import (
	"flag"
	"os"

	zmq "github.com/pebbe/zmq4"

	"github.com/zmqguard/zmqguard/bench/internal/load"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required)")
	count := flag.Uint64("count", 200_000, "messages to receive")
	multipart := flag.Bool("multipart", false, "read each message whole (RecvMessageBytes)")
	flag.Parse()
	if *bind == "" || *count < 2 {
		flag.Usage()
		os.Exit(2)
	}
	s, err := zmq.NewSocket(zmq.PULL)
	if err != nil {
		load.Fatal(err)
	}
	defer s.Close()
	// Socket options stay libzmq's defaults, as in bench/py's pyzmq loop.
	if err := s.Bind(*bind); err != nil {
		load.Fatal(err)
	}
	if ep, err := s.GetLastEndpoint(); err != nil {
		load.Fatal(err)
	} else {
		load.Bound(ep)
	}
	var m load.Meter
	for m.N() < *count {
		var err error
		if *multipart {
			_, err = s.RecvMessageBytes(0)
		} else {
			_, err = s.RecvBytes(0)
		}
		if err != nil {
			load.Fatal(err)
		}
		m.Count()
	}
	m.Stop()
	load.PrintJSON(m.Result("pebberecv"))
}
