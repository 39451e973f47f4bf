// Command zmq4recv is the baseline receiver: go-zeromq/zmq4's own PULL
// socket and its Socket.Recv, counting messages. It is what a Go program
// gets today without zmqguard.
//
// Usage:
//
//	zmq4recv --bind tcp://127.0.0.1:0 --count N
//
// Once bound, it writes "bound endpoint=tcp://127.0.0.1:PORT" on stderr with
// the port the kernel chose (bench/run.sh reads it; load.Bound).
//
// It exits after N messages and prints one JSON line (msgs/s from the first
// to the last message, allocations per message).
package main

import (
	"context"
	"flag"
	"os"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/bench/internal/load"
)

func main() {
	bind := flag.String("bind", "", "endpoint to bind, tcp://host:port (required)")
	count := flag.Uint64("count", 200_000, "messages to receive")
	flag.Parse()
	if *bind == "" || *count < 2 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := zmq4.NewPull(ctx)
	defer s.Close()
	if err := s.Listen(*bind); err != nil {
		load.Fatal(err)
	}
	load.Bound("tcp://" + s.Addr().String())
	var m load.Meter
	for m.N() < *count {
		if _, err := s.Recv(); err != nil {
			load.Fatal(err)
		}
		m.Count()
	}
	m.Stop()
	load.PrintJSON(m.Result("zmq4recv"))
}
