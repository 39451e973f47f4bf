// Command pushsend measures a Go PUSH socket sending small messages: it
// connects to a PULL (in the harness, pyzmq's, bench/py/pull_sink.py) and
// sends --count messages of --size bytes as fast as Send returns.
//
// Usage:
//
//	pushsend --connect tcp://127.0.0.1:PORT --count N [--size 100] [--impl zmqguard|zmq4]
//
// --impl zmqguard uses zmqguard's socket.New("PUSH", ...) (Send queues, a writer
// goroutine batches writes); --impl zmq4 uses go-zeromq/zmq4's PUSH (two
// write syscalls per message). The rate that counts is the one the receiver
// measures; this prints the sender's own view as one JSON line, after the
// receiver has taken every message and closed (zmqguard) or after the last
// Send returned (zmq4, whose Send writes synchronously).
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/socket"
)

type report struct {
	Program    string  `json:"program"`
	Impl       string  `json:"impl"`
	Messages   uint64  `json:"messages"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
}

func main() {
	connect := flag.String("connect", "", "endpoint of the receiving PULL, tcp://host:port (required)")
	count := flag.Uint64("count", 1_000_000, "messages to send")
	size := flag.Int("size", 100, "message size in bytes")
	impl := flag.String("impl", "zmqguard", "zmqguard or zmq4")
	wait := flag.Duration("wait", 20*time.Second, "how long to wait for the receiver")
	flag.Parse()
	if *connect == "" || *count == 0 || *size <= 0 || (*impl != "zmqguard" && *impl != "zmq4") {
		flag.Usage()
		os.Exit(2)
	}
	if _, err := load.TCPAddr(*connect); err != nil {
		load.Fatal(err)
	}
	body := load.Body(*size)
	var rep report
	var err error
	if *impl == "zmqguard" {
		rep, err = sendGuard(*connect, body, *count, *wait)
	} else {
		rep, err = sendZMQ4(*connect, body, *count, *wait)
	}
	if err != nil {
		load.Fatal(err)
	}
	load.PrintJSON(rep)
}

func sendGuard(endpoint string, body []byte, count uint64, wait time.Duration) (report, error) {
	gone := make(chan struct{}, 1)
	opts := socket.DefaultOptions()
	opts.ReconnectMin = 10 * time.Millisecond
	opts.ReconnectMax = 50 * time.Millisecond
	opts.OnEvent = func(e socket.Event) {
		if e.Kind == socket.EventDisconnected {
			select {
			case gone <- struct{}{}:
			default:
			}
		}
	}
	s, err := socket.New("PUSH", opts)
	if err != nil {
		return report{}, err
	}
	defer s.Close()
	if err := s.Dial(endpoint); err != nil {
		return report{}, err
	}
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, wait)
	err = s.Send(wctx, body) // waits for the connection
	cancel()
	if err != nil {
		return report{}, err
	}
	start := time.Now()
	for i := uint64(1); i < count; i++ {
		if err := s.Send(ctx, body); err != nil {
			return report{}, err
		}
	}
	elapsed := time.Since(start)
	// Close discards what is still queued: wait for the receiver to take
	// everything and leave.
	select {
	case <-gone:
	case <-time.After(2 * time.Minute):
	}
	return report{Program: "pushsend", Impl: "zmqguard", Messages: count, Seconds: elapsed.Seconds(),
		MsgsPerSec: float64(count-1) / elapsed.Seconds()}, nil
}

func sendZMQ4(endpoint string, body []byte, count uint64, wait time.Duration) (report, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := zmq4.NewPush(ctx, zmq4.WithDialerRetry(10*time.Millisecond), zmq4.WithDialerMaxRetries(int(wait/(10*time.Millisecond))))
	defer s.Close()
	if err := s.Dial(endpoint); err != nil {
		return report{}, err
	}
	msg := zmq4.NewMsg(body)
	if err := s.Send(msg); err != nil {
		return report{}, err
	}
	start := time.Now()
	for i := uint64(1); i < count; i++ {
		if err := s.Send(msg); err != nil {
			return report{}, err
		}
	}
	elapsed := time.Since(start)
	return report{Program: "pushsend", Impl: "zmq4", Messages: count, Seconds: elapsed.Seconds(),
		MsgsPerSec: float64(count-1) / elapsed.Seconds()}, nil
}
