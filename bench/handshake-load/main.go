// Command handshake-load drives a NIXL handshake listener with concurrent
// REQ clients, as many decode workers fetching KV metadata at once would,
// and reports the requests served per second.
//
// Usage:
//
//	handshake-load --connect tcp://127.0.0.1:PORT [--clients 16] [--duration 3s] [--warmup 500ms]
//
// Each client is one guarded ZMTP connection announcing REQ (zmtpguard.Dial,
// framed by hand: no socket layer, no extra goroutine, so the generator costs
// little CPU per request) that sends a V3 request (GET_META_MSG, pp, tp),
// waits for the reply, checks its shape (delimiter, payload and timestamp
// frames; every --check-every replies the payload is decoded as a
// NixlHandshakePayload), and repeats. Requests completed during the
// --duration window after --warmup are counted; the JSON line gives req/s and
// the round-trip latency percentiles over that window.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type report struct {
	Program   string  `json:"program"`
	Clients   int     `json:"clients"`
	Requests  uint64  `json:"requests"`
	Seconds   float64 `json:"seconds"`
	ReqPerSec float64 `json:"req_per_sec"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	Errors    uint64  `json:"errors"`
}

func main() {
	connect := flag.String("connect", "", "endpoint of the handshake listener, tcp://host:port (required)")
	clients := flag.Int("clients", 16, "concurrent REQ clients")
	duration := flag.Duration("duration", 3*time.Second, "measurement window")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "time before the window opens")
	wait := flag.Duration("wait", 20*time.Second, "how long to wait for the listener to answer the first request")
	pp := flag.Int("pp", 0, "pipeline-parallel rank requested")
	tp := flag.Int("tp", 0, "tensor-parallel rank requested")
	checkEvery := flag.Int("check-every", 64, "decode and check every Nth reply payload")
	flag.Parse()
	if *connect == "" || *clients < 1 || *duration <= 0 || *checkEvery < 1 {
		flag.Usage()
		os.Exit(2)
	}
	req := nixlwire.AppendRequest(nil, 3, *pp, *tp)

	var measuring atomic.Bool
	var errs atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lat := make([][]time.Duration, *clients)
	counts := make([]atomic.Uint64, *clients)
	firstErr := make(chan error, *clients)
	ready := make(chan struct{}, *clients)
	var wg sync.WaitGroup
	for i := range *clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := client(ctx, *connect, req, *wait, *checkEvery, &measuring, &counts[i], &lat[i], &errs, ready); err != nil && ctx.Err() == nil {
				firstErr <- err
				cancel()
			}
		}()
	}
	for range *clients {
		select {
		case <-ready:
		case err := <-firstErr:
			load.Fatal(err)
		}
	}
	time.Sleep(*warmup)
	before := sum(counts)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	n := sum(counts) - before
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	select {
	case err := <-firstErr:
		load.Fatal(err)
	default:
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	rep := report{Program: "handshake-load", Clients: *clients, Requests: n, Seconds: elapsed.Seconds(),
		ReqPerSec: float64(n) / elapsed.Seconds(), Errors: errs.Load()}
	if len(all) > 0 {
		rep.P50us = float64(all[len(all)/2].Nanoseconds()) / 1e3
		rep.P99us = float64(all[len(all)*99/100].Nanoseconds()) / 1e3
	}
	load.PrintJSON(rep)
}

func sum(c []atomic.Uint64) uint64 {
	var n uint64
	for i := range c {
		n += c[i].Load()
	}
	return n
}

// client runs one REQ client until ctx ends: a guarded ZMTP connection
// announcing REQ, driven by hand (the empty delimiter frame, then the
// request; the reply is [delimiter, payload, timestamp]), with no socket
// layer and no extra goroutine, so that the load generator spends as little
// CPU per request as a REQ can. It signals ready after its first reply.
func client(ctx context.Context, endpoint string, req []byte, wait time.Duration, checkEvery int,
	measuring *atomic.Bool, count *atomic.Uint64, lat *[]time.Duration, errs *atomic.Uint64, ready chan<- struct{}) error {
	c, err := load.DialRetry(endpoint, "REQ", wait)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	var m zmtpguard.Message
	for i := 0; ; i++ {
		c.NetConn().SetReadDeadline(time.Now().Add(5 * time.Second))
		t0 := time.Now()
		err := c.WriteMessage(nil, req)
		if err == nil {
			err = c.Flush()
		}
		if err == nil {
			err = c.ReadMessage(&m)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("request %d: %w", i, err)
		}
		if measuring.Load() {
			*lat = append(*lat, time.Since(t0))
			count.Add(1)
		} else if i > 0 {
			count.Add(1)
		}
		if len(m.Frames) != 3 || len(m.Frames[0]) != 0 {
			errs.Add(1)
		} else if i%checkEvery == 0 {
			if _, err := nixlwire.DecodePayload(m.Frames[1]); err != nil {
				errs.Add(1)
			}
		}
		if i == 0 {
			ready <- struct{}{}
		}
	}
}
