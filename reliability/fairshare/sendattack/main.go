// Command sendattack re-measures issue 29's rows 2, 3 and 12 (the
// publisher side) against a `zmqguard kv-publish` process it starts itself
// on loopback (ports chosen by the kernel, read from its start line),
// bounded in count and time, for RELIABILITY.md:
//
//	go run ./reliability/fairshare/sendattack -bin PATH silent-subs   [-n 80] [-for 30s]
//	go run ./reliability/fairshare/sendattack -bin PATH silent-replay [-n 20] [-for 30s]
//	go run ./reliability/fairshare/sendattack -bin PATH replay-flood  [-n 8] [-for 40s]
//
// The publisher runs at -rate (1,000) batches/s with its default buffer
// (10,000 batches). Every attacker is a raw ZMTP peer (zmtpguard) that never
// reads; it sends a PING command every second (so heartbeats alone never
// remove it) and, when the publisher drops it, connects again and repeats
// its attack until the end.
//
// silent-subs (row 2): -n SUB peers subscribe to everything and never read;
// an honest SUB (package socket) counts the batches it gets and the ones it
// missed (sequence gaps) over -for.
//
// silent-replay (row 3): -n replay clients ask for the whole buffer and
// never read; an honest replay client asks for the whole buffer every 2 s
// and counts each replay's batches and how it ended (end marker, error
// marker, no marker within 10 s). A replay whose batches are not contiguous
// from its first one but ends with the end marker is counted as silent
// loss.
//
// replay-flood (row 12): -n connections send -flood-rate replay requests a
// second each (8 × 1,000 by default: the flood was 320,000 in 40 s),
// reading and discarding every reply, for -for, reconnecting when dropped;
// the honest SUB's live rate during the flood is compared with its rate
// over the same time before it.
//
// The process's RSS (/proc/PID/status) is sampled every 500 ms; one JSON
// object is printed at the end.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type result struct {
	Mode        string  `json:"mode"`
	Attackers   int     `json:"attackers"`
	Seconds     float64 `json:"seconds"`
	Reconnects  int64   `json:"attacker_reconnects"`
	RSSStartMiB float64 `json:"rss_start_mib"`
	RSSPeakMiB  float64 `json:"rss_peak_mib"`
	RSSEndMiB   float64 `json:"rss_end_mib"`
	// silent-subs, replay-flood
	HonestBatches   int64   `json:"honest_batches,omitempty"`
	HonestPerSecond float64 `json:"honest_per_second,omitempty"`
	HonestMissed    int64   `json:"honest_missed"`
	BaselinePerSec  float64 `json:"baseline_per_second,omitempty"`
	FloodRequests   int64   `json:"flood_requests,omitempty"`
	// silent-replay
	Replays          int   `json:"honest_replays,omitempty"`
	ReplaysComplete  int   `json:"honest_replays_complete,omitempty"`
	ReplaysError     int   `json:"honest_replays_error_marker,omitempty"`
	ReplaysNoMarker  int   `json:"honest_replays_no_marker,omitempty"`
	ReplaySilentLoss int   `json:"honest_replays_silent_loss,omitempty"`
	ReplayBatches    []int `json:"honest_replay_batches,omitempty"`
}

func main() {
	bin := flag.String("bin", "", "zmqguard binary (required)")
	n := flag.Int("n", 0, "attackers (default: 80 silent-subs, 20 silent-replay, 8 replay-flood)")
	dur := flag.Duration("for", 30*time.Second, "attack duration")
	rate := flag.Int("rate", 1000, "publisher batches per second")
	flag.IntVar(&floodRate, "flood-rate", 1000, "replay requests per second per flooding connection (replay-flood; at least 100)")
	flag.Parse()
	if *bin == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: sendattack -bin PATH silent-subs|silent-replay|replay-flood")
		os.Exit(2)
	}
	mode := flag.Arg(0)
	if *n == 0 {
		*n = map[string]int{"silent-subs": 80, "silent-replay": 20, "replay-flood": 8}[mode]
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *bin, "kv-publish", "--bind", "tcp://127.0.0.1:0", "--replay-bind", "tcp://127.0.0.1:0",
		"--topic", "kv@attack", "--rate", strconv.Itoa(*rate))
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	live, replay := readEndpoints(stderr)
	res := result{Mode: mode, Attackers: *n, Seconds: dur.Seconds()}
	var peak atomic.Int64
	stopRSS := make(chan struct{})
	var rssWG sync.WaitGroup
	res.RSSStartMiB = rssMiB(cmd.Process.Pid)
	rssWG.Go(func() {
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			if r := int64(rssMiB(cmd.Process.Pid) * 1024); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stopRSS:
				return
			case <-tk.C:
			}
		}
	})
	var reconnects atomic.Int64
	actx, acancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	switch mode {
	case "silent-subs":
		sub := newSub(live)
		defer sub.s.Close()
		for range *n {
			wg.Go(func() { silent(actx, live, "SUB", []byte{1}, &reconnects) })
		}
		time.Sleep(time.Second) // let the attackers connect before counting
		b0, m0 := sub.counts()
		time.Sleep(*dur)
		b1, m1 := sub.counts()
		res.HonestBatches, res.HonestMissed = b1-b0, m1-m0
		res.HonestPerSecond = float64(res.HonestBatches) / dur.Seconds()
	case "silent-replay":
		// Fill the buffer first.
		time.Sleep(11 * time.Second)
		req := make([]byte, 8)
		for range *n {
			wg.Go(func() { silent(actx, replay, "DEALER", req, &reconnects) })
		}
		time.Sleep(time.Second)
		end := time.Now().Add(*dur)
		for time.Now().Before(end) {
			got, marker, contiguous := honestReplay(ctx, replay)
			res.Replays++
			res.ReplayBatches = append(res.ReplayBatches, got)
			switch marker {
			case "end":
				res.ReplaysComplete++
				if !contiguous {
					res.ReplaySilentLoss++
				}
			case "error":
				res.ReplaysError++
			default:
				res.ReplaysNoMarker++
			}
			time.Sleep(2 * time.Second)
		}
	case "replay-flood":
		sub := newSub(live)
		defer sub.s.Close()
		time.Sleep(2 * time.Second)
		b0, _ := sub.counts()
		time.Sleep(*dur)
		b1, _ := sub.counts()
		res.BaselinePerSec = float64(b1-b0) / dur.Seconds()
		var reqs atomic.Int64
		for range *n {
			wg.Go(func() { flood(actx, replay, &reqs, &reconnects) })
		}
		b0, m0 := sub.counts()
		time.Sleep(*dur)
		b1, m1 := sub.counts()
		res.HonestBatches, res.HonestMissed = b1-b0, m1-m0
		res.HonestPerSecond = float64(res.HonestBatches) / dur.Seconds()
		res.FloodRequests = reqs.Load()
	default:
		fail(fmt.Errorf("unknown mode %q", mode))
	}
	acancel()
	wg.Wait()
	close(stopRSS)
	rssWG.Wait()
	res.Reconnects = reconnects.Load()
	res.RSSPeakMiB = float64(peak.Load()) / 1024
	res.RSSEndMiB = rssMiB(cmd.Process.Pid)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "sendattack:", err)
	os.Exit(1)
}

var epRE = regexp.MustCompile(`endpoint=(tcp://\S+) replay=(tcp://\S+)`)

// readEndpoints reads the publisher's start line, then keeps draining its
// stderr.
func readEndpoints(r interface{ Read([]byte) (int, error) }) (string, string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := epRE.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1], m[2]
		}
	}
	fail(fmt.Errorf("no start line"))
	return "", ""
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func dial(ctx context.Context, ep string, typ zmtpguard.SocketType) (*zmtpguard.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return zmtpguard.Dial(dctx, "tcp", strings.TrimPrefix(ep, "tcp://"), typ, nil, nil)
}

// silent connects, sends first (a subscription or a replay request), never
// reads, PINGs every second, and reconnects when the publisher drops it.
func silent(ctx context.Context, ep string, typ zmtpguard.SocketType, first []byte, reconnects *atomic.Int64) {
	for ctx.Err() == nil {
		c, err := dial(ctx, ep, typ)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		if typ == "DEALER" {
			err = c.WriteMessage(nil, first)
		} else {
			err = c.WriteMessage(first)
		}
		if err == nil {
			err = c.Flush()
		}
		for err == nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			if err = c.WriteCommand(zmtpwire.CmdPing, []byte{0, 0}); err == nil {
				err = c.Flush()
			}
		}
		stop()
		c.Close()
		if ctx.Err() == nil {
			reconnects.Add(1)
		}
	}
}

// floodRate is each flooding connection's requests per second (-flood-rate).
var floodRate = 1000

// flood sends floodRate replay requests a second on one connection and
// reads and discards every reply.
func flood(ctx context.Context, ep string, reqs, reconnects *atomic.Int64) {
	for ctx.Err() == nil {
		c, err := dial(ctx, ep, "DEALER")
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			var m zmtpguard.Message
			for c.ReadMessage(&m) == nil {
			}
		}()
		// A write blocked by a publisher that no longer reads ends with
		// the attack.
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		req := make([]byte, 8)
		tk := time.NewTicker(10 * time.Millisecond)
	send:
		for ctx.Err() == nil {
			// floodRate requests a second, in bursts every 10 ms.
			for range floodRate / 100 {
				if c.WriteMessage(nil, req) != nil {
					break send
				}
				reqs.Add(1)
			}
			if c.Flush() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-tk.C:
			}
		}
		tk.Stop()
		c.Close()
		<-done
		if ctx.Err() == nil {
			reconnects.Add(1)
		}
	}
}

// honestReplay asks for the whole buffer and reads until a marker (10 s
// bound per reply).
func honestReplay(ctx context.Context, ep string) (got int, marker string, contiguous bool) {
	c, err := dial(ctx, ep, "DEALER")
	if err != nil {
		return 0, "dial: " + err.Error(), false
	}
	defer c.Close()
	if c.WriteMessage(nil, make([]byte, 8)) != nil || c.Flush() != nil {
		return 0, "send failed", false
	}
	contiguous = true
	var prev uint64
	var m zmtpguard.Message
	for {
		c.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.ReadMessage(&m); err != nil {
			return got, "none", contiguous
		}
		if m.Command != "" {
			if m.Command == zmtpwire.CmdPing {
				c.WriteCommand(zmtpwire.CmdPong, nil)
				c.Flush()
			}
			continue
		}
		if len(m.Frames) < 3 {
			continue
		}
		seq := binary.BigEndian.Uint64(m.Frames[len(m.Frames)-2])
		switch seq {
		case 0xffffffffffffffff:
			return got, "end", contiguous
		case 0xfffffffffffffffe:
			return got, "error", contiguous
		}
		if got > 0 && seq != prev+1 {
			contiguous = false
		}
		prev = seq
		got++
	}
}

type honestSub struct {
	s       *socket.Socket
	batches atomic.Int64
	missed  atomic.Int64
}

func newSub(ep string) *honestSub {
	s, err := socket.New("SUB", socket.Options{})
	if err != nil {
		fail(err)
	}
	h := &honestSub{s: s}
	s.Subscribe(nil)
	if err := s.Dial(ep); err != nil {
		fail(err)
	}
	go func() {
		var last uint64
		first := true
		for {
			m, err := s.Recv(context.Background())
			if err != nil {
				return
			}
			if len(m.Frames) != 3 || len(m.Frames[1]) != 8 {
				continue
			}
			seq := binary.BigEndian.Uint64(m.Frames[1])
			if !first && seq > last+1 {
				h.missed.Add(int64(seq - last - 1))
			}
			first, last = false, seq
			h.batches.Add(1)
		}
	}()
	return h
}

func (h *honestSub) counts() (int64, int64) { return h.batches.Load(), h.missed.Load() }
