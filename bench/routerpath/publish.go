package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/kvstream"
	"github.com/zmqguard/zmqguard/socket"
)

// publisher is the child process playing the engines: one XPUB socket per
// engine, bound on 127.0.0.1 at a port the kernel picks. It prints the
// endpoints on one line, then obeys its standard input:
//
//	prefill       send every engine's prefill, then print "prefilled N"
//	run RATE      send the steady stream at RATE events/s (0: as fast as
//	              the window lets), until the next command
//	stop          stop sending, print "stopped N" (events sent in all)
//	ack N         the consumer has applied N events
//
// It never has more than window events sent and not acknowledged, so no
// queue overflows and no message is dropped (the send queues are
// unbounded here; the window bounds them).
func publish(engines, entries, holders, promptBlocks, window, workers int) error {
	p := kvstream.Prompt(promptBlocks)
	per := entries / engines
	opts := socket.DefaultOptions()
	opts.HWM = 1 << 24
	opts.SendQueueBytes = -1
	opts.SendTotalBytes = -1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type eng struct {
		kvstream.Engine
		st  *kvstream.Stream
		buf []byte
	}
	socks, eps, err := kvstream.Bind(ctx, engines, opts)
	if err != nil {
		return err
	}
	es := make([]*eng, engines)
	for i, s := range socks {
		defer s.Close()
		es[i] = &eng{Engine: kvstream.Engine{Sock: s, Topic: []byte(kvstream.Topic(i))}, st: kvstream.NewStream(i, per, holders, p)}
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, strings.Join(eps, " "))
	out.Flush()
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", a...)
		out.Flush()
		outMu.Unlock()
	}

	var sent, acked atomic.Int64
	send := func(e *eng, payload []byte, n int) error {
		sent.Add(int64(n))
		return e.Send(ctx, payload)
	}
	waitWindow := func(stop *atomic.Bool) bool {
		for sent.Load()-acked.Load() > int64(window) {
			if stop != nil && stop.Load() {
				return false
			}
			time.Sleep(100 * time.Microsecond)
		}
		return true
	}
	workers = max(1, min(workers, engines))
	share := func(w int) []*eng {
		var mine []*eng
		for i := w; i < engines; i += workers {
			mine = append(mine, es[i])
		}
		return mine
	}

	var run struct {
		stop *atomic.Bool
		wg   sync.WaitGroup
	}
	stopRun := func() {
		if run.stop != nil {
			run.stop.Store(true)
			run.wg.Wait()
			run.stop = nil
		}
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "ack":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			acked.Store(n)
		case "prefill":
			stopRun()
			// Every engine's subscriber must be there first: XPUB drops
			// what nobody subscribed to.
			deadline := time.Now().Add(120 * time.Second)
			for _, e := range es {
				for e.Sock.Stats().Peers == 0 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			time.Sleep(200 * time.Millisecond) // subscriptions applied
			go func() {
				var wg sync.WaitGroup
				var total atomic.Int64
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for _, e := range share(w) {
							for {
								var n int
								e.buf, n = e.st.PrefillBatch(e.buf[:0])
								if n == 0 {
									break
								}
								waitWindow(nil)
								if send(e, e.buf, n) != nil {
									return
								}
								total.Add(int64(n))
							}
						}
					}()
				}
				wg.Wait()
				say("prefilled %d", total.Load())
			}()
		case "run":
			stopRun()
			rate, _ := strconv.ParseFloat(f[1], 64)
			stop := &atomic.Bool{}
			run.stop = stop
			for w := 0; w < workers; w++ {
				run.wg.Add(1)
				go func() {
					defer run.wg.Done()
					mine := share(w)
					t0 := time.Now()
					var n float64
					for i := 0; !stop.Load(); i++ {
						e := mine[i%len(mine)]
						if rate > 0 {
							// Pace this worker at rate ÷ workers.
							ahead := time.Duration(n/(rate/float64(workers))*1e9) - time.Since(t0)
							if ahead > 200*time.Microsecond {
								time.Sleep(ahead)
							}
						}
						if !waitWindow(stop) {
							return
						}
						var k int
						e.buf, k = e.st.SteadyBatch(e.buf[:0])
						if send(e, e.buf, k) != nil {
							return
						}
						n += float64(k)
					}
				}()
			}
		case "stop":
			stopRun()
			say("stopped %d", sent.Load())
		}
	}
	stopRun()
	return nil
}
