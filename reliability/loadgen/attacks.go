package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func runIdle(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	target := fs.String("target", "", "endpoint to connect to")
	conns := fs.Int("conns", 1000, "connections to open")
	mode := fs.String("mode", "tcp", "tcp: connect and say nothing; zmtp: complete a ZMTP handshake as a DEALER, then say nothing")
	hold := fs.Duration("hold", 20*time.Second, "how long to hold them")
	source := fs.String("source", "", "tcp mode: local IP to connect from, e.g. 127.0.0.2 (another host, as a remote attacker would be)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	network, addr, err := hostile.SplitEndpoint(*target)
	if err != nil {
		return nil, err
	}
	dialer := net.Dialer{Timeout: 10 * time.Second}
	if *source != "" {
		ip := net.ParseIP(*source)
		if ip == nil {
			return nil, fmt.Errorf("--source %q is not an IP address", *source)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	var opened, failed, closedByPeer atomic.Int64
	var mu sync.Mutex
	var open []io.Closer
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := 0; i < *conns && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var c io.Closer
			var nc net.Conn
			switch *mode {
			case "zmtp":
				hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				zc, err := zmtpguard.Dial(hctx, network, addr, "DEALER", nil, nil)
				cancel()
				if err != nil {
					failed.Add(1)
					return
				}
				c, nc = zc, zc.NetConn()
			default:
				tc, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					failed.Add(1)
					return
				}
				c, nc = tc, tc
			}
			opened.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			go func() { // notice when the server closes it
				buf := make([]byte, 512)
				for {
					if _, err := nc.Read(buf); err != nil {
						if !errors.Is(err, net.ErrClosed) {
							closedByPeer.Add(1)
						}
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "%s idle: %d open, %d failed to open, in %v\n", time.Now().Format("15:04:05.000"),
		opened.Load(), failed.Load(), time.Since(start).Round(time.Millisecond))
	hctx, cancel := context.WithTimeout(ctx, *hold)
	defer cancel()
	go progress(hctx, func(time.Duration) string {
		return fmt.Sprintf("idle: open %d, closed by the server %d", opened.Load()-closedByPeer.Load(), closedByPeer.Load())
	})
	<-hctx.Done()
	summary := map[string]any{"mode": *mode, "opened": opened.Load(), "failed": failed.Load(), "closed_by_server": closedByPeer.Load()}
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	return summary, nil
}

// ---- stall ----------------------------------------------------------------------

func runStall(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("stall", flag.ContinueOnError)
	listener := fs.String("listener", "", "handshake listener endpoint")
	requests := fs.Int("requests", 200000, "requests to send without reading any reply")
	hold := fs.Duration("hold", 20*time.Second, "how long to keep the connection open afterwards, still not reading")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	network, addr, err := hostile.SplitEndpoint(*listener)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := zmtpguard.Dial(hctx, network, addr, "DEALER", nil, nil)
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req := nixlwire.AppendRequest(nil, 3, 0, 0)
	start := time.Now()
	sent := 0
	c.NetConn().SetWriteDeadline(time.Now().Add(60 * time.Second))
	var werr error
	for ; sent < *requests && ctx.Err() == nil; sent++ {
		if werr = c.WriteMessage([]byte{}, req); werr != nil {
			break
		}
		if sent%256 == 255 {
			if werr = c.Flush(); werr != nil {
				break
			}
		}
	}
	if werr == nil {
		werr = c.Flush()
	}
	fmt.Fprintf(os.Stderr, "%s stall: %d requests written in %v (err %v); now holding, reading nothing\n",
		time.Now().Format("15:04:05.000"), sent, time.Since(start).Round(time.Millisecond), werr)
	t := time.NewTimer(*hold)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	errText := ""
	if werr != nil {
		errText = werr.Error()
	}
	return map[string]any{"requests_written": sent, "write_error": errText}, nil
}
