package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/kvload"
)

// httpAttack attacks kv-index's --http endpoint while an honest router
// (127.0.0.2, one keep-alive client) asks /score back to back:
//
//	fairshare37 http -addr 127.0.0.1:PORT -mode idle [-idle 1024] [-for 35s]
//	fairshare37 http -addr 127.0.0.1:PORT -mode big -pid PID [-for 20s]
//
// idle: one host (127.0.0.5) opens -idle connections, makes one GET /stats
// on each and leaves them open. big: the honest router alone, against a
// big-body flood run by another process (httpFlood, started first by
// run.sh: an attacker is another host, and the honest router's latency
// must not include the attacker's own scheduling); the server's RSS is
// sampled from /proc/PID every 250 ms and its CPU time read at the start
// and the end. It reports the honest answers and their latency.
func httpAttack(args []string) error {
	fs := flag.NewFlagSet("http", flag.ExitOnError)
	addr := fs.String("addr", "", "kv-index --http host:port")
	mode := fs.String("mode", "idle", "idle or big")
	idle := fs.Int("idle", 1024, "idle keep-alive connections (idle mode)")
	pid := fs.Int("pid", 0, "server pid, for its RSS (big mode)")
	dur := fs.Duration("for", 35*time.Second, "how long the honest router asks")
	fs.Parse(args)
	if *dur > 5*time.Minute {
		return errors.New("-for is bounded to 5 minutes")
	}
	url := "http://" + *addr + "/score"
	res := map[string]any{"attack": "http-" + *mode}

	var held []net.Conn
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var peak atomic.Int64
	switch *mode {
	case "idle":
		opened := 0
		for range *idle {
			nc, err := idleGet(*addr)
			if err != nil {
				continue
			}
			opened++
			held = append(held, nc)
		}
		res["idle_conns"], res["idle_opened"] = *idle, opened
	case "big":
		if *pid > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(250 * time.Millisecond)
				defer t.Stop()
				for {
					if r := rssKiB(*pid); r > peak.Load() {
						peak.Store(r)
					}
					select {
					case <-stop:
						return
					case <-t.C:
					}
				}
			}()
		}
		time.Sleep(2 * time.Second) // the attack under way
	default:
		return fmt.Errorf("-mode %q: want idle or big", *mode)
	}

	cpu0 := cpuTicks(*pid)
	honest := client("127.0.0.2", 2*time.Second)
	small := []byte(`{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32]}`)
	var lat []time.Duration
	asked, answered := 0, 0
	var errs []string
	end := time.Now().Add(*dur)
	for time.Now().Before(end) {
		asked++
		t0 := time.Now()
		resp, err := honest.Post(url, "application/json", bytes.NewReader(small))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err != nil {
			if len(errs) < 3 {
				errs = append(errs, err.Error())
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		answered++
		lat = append(lat, time.Since(t0))
		time.Sleep(250 * time.Millisecond) // a router's pace: 4 /score a second
	}
	honest.CloseIdleConnections()
	close(stop)
	wg.Wait()
	for _, nc := range held {
		nc.Close()
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return -1
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	res["honest_asked"], res["honest_answered"], res["honest_errors"] = asked, answered, errs
	res["honest_p50_ms"], res["honest_p99_ms"], res["honest_max_ms"] = q(0.5), q(0.99), q(1)
	if *mode == "big" {
		res["server_peak_rss_mib"] = peak.Load() / 1024
		res["server_rss_after_mib"] = rssKiB(*pid) / 1024
		res["server_cpu_s"] = float64(cpuTicks(*pid)-cpu0) / 100
	}
	var over int
	for _, d := range lat {
		if d >= 50*time.Millisecond {
			over++
		}
	}
	res["honest_over_50ms"] = over
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res["loadavg"] = strings.TrimSpace(string(b))
	}
	emit(res)
	return nil
}

func client(src string, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// httpFlood is the big-body attack on its own:
//
//	fairshare37 flood -addr 127.0.0.1:PORT [-big 200] [-for 60s]
//
// -big clients (127.0.x.y) post /score bodies of 8 MiB (valid token lists)
// back to back until -for ends or it is interrupted (SIGINT, SIGTERM);
// then it prints the requests answered, refused (503) and failed, and its
// own CPU time.
func httpFlood(args []string) error {
	fs := flag.NewFlagSet("flood", flag.ExitOnError)
	addr := fs.String("addr", "", "kv-index --http host:port")
	big := fs.Int("big", 200, "concurrent 8 MiB /score clients")
	dur := fs.Duration("for", time.Minute, "how long at most")
	fs.Parse(args)
	if *dur > 5*time.Minute {
		return errors.New("-for is bounded to 5 minutes")
	}
	ctx, stopSig := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSig()
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	url := "http://" + *addr + "/score"
	stop := ctx.Done()
	var wg sync.WaitGroup
	var bigDone, bigRefused, bigErr atomic.Int64
	body := kvload.ScoreBody(8 << 20)
	for i := range *big {
		src := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
		c := client(src, 60*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						bigErr.Add(1)
					}
					pause(ctx, 100*time.Millisecond) // back off after a refused connection
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					bigDone.Add(1)
				} else {
					bigRefused.Add(1)
					pause(ctx, 100*time.Millisecond) // Retry-After is 1 s; come back sooner
				}
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	emit(map[string]any{"attack": "http-big flood", "big_clients": *big, "big_answered": bigDone.Load(),
		"big_refused_503": bigRefused.Load(), "big_errors": bigErr.Load(),
		"flood_cpu_s": float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9})
	return nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// cpuTicks reads utime+stime of pid in clock ticks (100 a second; 0 when
// unknown).
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// idleGet opens a connection from 127.0.0.5, makes one GET /stats and
// leaves it open.
func idleGet(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(nc, "GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		nc.Close()
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// rssKiB reads VmRSS of pid (0 when unknown).
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
