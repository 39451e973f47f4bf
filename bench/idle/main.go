// Command idle opens many idle guarded ZMTP connections to one endpoint and
// holds them, so that the harness can measure what an idle peer costs the
// process that accepted it (its RSS before and after).
//
// Usage:
//
//	idle --connect tcp://127.0.0.1:PORT [--conns 1000] [--type PUSH|REQ|DEALER|SUB|XSUB|PULL]
//
// Every connection completes the ZMTP handshake as a socket of --type, then
// sends nothing. After the last handshake it prints one JSON line with the
// number connected, and holds them until its standard input closes or it
// gets SIGINT/SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type report struct {
	Program   string  `json:"program"`
	Connected int     `json:"connected"`
	Seconds   float64 `json:"seconds"`
}

func main() {
	connect := flag.String("connect", "", "endpoint to connect to, tcp://host:port (required)")
	conns := flag.Int("conns", 1000, "connections to open")
	typ := flag.String("type", "PUSH", "ZMTP socket type announced (compatible with the target's)")
	parallel := flag.Int("parallel", 32, "handshakes in flight at once")
	wait := flag.Duration("wait", 20*time.Second, "how long to retry the first connection while the target starts")
	flag.Parse()
	st := zmq4.SocketType(strings.ToUpper(*typ))
	if *connect == "" || *conns < 1 || *parallel < 1 || !zmtpwire.KnownSocketType(st) {
		flag.Usage()
		os.Exit(2)
	}
	addr, err := load.TCPAddr(*connect)
	if err != nil {
		load.Fatal(err)
	}
	start := time.Now()
	first, err := load.DialRetry(*connect, zmtpguard.SocketType(st), *wait)
	if err != nil {
		load.Fatal(err)
	}
	open := []*zmtpguard.Conn{first}
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	for i := 1; i < *conns; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := zmtpguard.Dial(ctx, "tcp", addr, zmtpguard.SocketType(st), nil, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			open = append(open, c)
		}()
	}
	wg.Wait()
	if firstErr != nil {
		load.Fatal(fmt.Errorf("%d of %d connected: %w", len(open), *conns, firstErr))
	}
	load.PrintJSON(report{Program: "idle", Connected: len(open), Seconds: time.Since(start).Seconds()})

	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case <-done:
	case <-sig:
	}
	for _, c := range open {
		c.Close()
	}
}
