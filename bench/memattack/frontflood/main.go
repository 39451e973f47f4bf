// Command frontflood measures how late a DP coordinator's stats reach a
// live front-end while many peers flood its back output socket with
// complete maximum-size messages (issue 18: "stats to a live front-end
// delayed up to 1.2 s").
//
// Usage:
//
//	frontflood [-conns 1000] [-size 1048576] [-baseline 5s] [-flood 10s] [-after 5s]
//
// Three processes, all the same binary: the coordinator (this process,
// default options, one engine, stats every 100 ms), a probe (-role probe)
// that runs one engine and one front-end, and the attackers (-role
// attack). The probe's engine pushes scheduler stats every 20 ms, each with
// a new waiting count (a sequence number); its front-end records, for every
// stats publication, when it arrived and how long after the engine sent
// the counts it carries (staleness). The attackers connect -conns PUSH
// connections to the back output socket and send complete -size messages
// (garbage to the decoder: each is dropped) as fast as the coordinator
// reads them, for -flood. The coordinator reports, per phase (baseline,
// flood, after), the publications received, their inter-arrival and
// staleness (p50, p99, max), and its own peak RSS.
//
// It uses only APIs that predate issue 18, so the same file builds in an
// older checkout for a before/after comparison.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func main() {
	role := flag.String("role", "coordinator", "internal: coordinator, probe or attack")
	conns := flag.Int("conns", 1000, "attacking connections")
	size := flag.Int("size", 1<<20, "body size of each attacker message (at most MaxMessageSize)")
	baseline := flag.Duration("baseline", 5*time.Second, "measured time before the flood")
	flood := flag.Duration("flood", 10*time.Second, "how long the attackers flood")
	after := flag.Duration("after", 5*time.Second, "measured time after the attackers left")
	connect := flag.String("connect", "", "internal: back output endpoint (attack, probe)")
	backPub := flag.String("back-pub", "", "internal: back publish endpoint (probe)")
	front := flag.String("front", "", "internal: front endpoint (probe)")
	flag.Parse()
	var err error
	switch *role {
	case "coordinator":
		err = run(*conns, *size, *baseline, *flood, *after)
	case "probe":
		err = probe(*connect, *backPub, *front)
	case "attack":
		attack(*connect, *conns, *size, *flood)
	default:
		err = fmt.Errorf("unknown -role")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "frontflood:", err)
		os.Exit(1)
	}
}

func quietOptions() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

func run(conns, size int, baseline, flood, after time.Duration) error {
	cfg := coordinator.Config{
		Front:       "tcp://127.0.0.1:0",
		BackOutput:  "tcp://127.0.0.1:0",
		BackPublish: "tcp://127.0.0.1:0",
		Engines:     1,
		Socket:      quietOptions(),
		Logger:      slog.New(slog.DiscardHandler),
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)

	pr := exec.Command(os.Args[0], "-role", "probe", "-connect", c.BackOutputEndpoint(), "-back-pub", c.BackPublishEndpoint(), "-front", c.FrontEndpoint())
	pr.Stderr = os.Stderr
	stdin, err := pr.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := pr.StdoutPipe()
	if err != nil {
		return err
	}
	if err := pr.Start(); err != nil {
		return err
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		return fmt.Errorf("probe did not start: %q", lines.Text())
	}

	var mu sync.Mutex
	phase := "baseline"
	peak := map[string]int64{}
	var bounds []int64 // unix ns at which each phase starts, and the end
	setPhase := func(p string) {
		mu.Lock()
		phase = p
		bounds = append(bounds, time.Now().UnixNano())
		mu.Unlock()
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			r := rssBytes()
			mu.Lock()
			peak[phase] = max(peak[phase], r)
			mu.Unlock()
		}
	}()
	setPhase("baseline")
	time.Sleep(baseline)
	setPhase("flood")
	at := exec.Command(os.Args[0], "-role", "attack", "-connect", c.BackOutputEndpoint(), "-conns", strconv.Itoa(conns), "-size", strconv.Itoa(size), "-flood", flood.String())
	at.Stderr = os.Stderr
	if err := at.Run(); err != nil {
		return fmt.Errorf("attackers: %w", err)
	}
	setPhase("after")
	time.Sleep(after)
	setPhase("end")
	close(stop)
	<-sampled
	stdin.Close() // the probe stops and prints what it saw

	type pub struct{ at, age int64 }
	var pubs []pub
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 3 || f[0] != "pub" {
			continue
		}
		at, _ := strconv.ParseInt(f[1], 10, 64)
		age, _ := strconv.ParseInt(f[2], 10, 64)
		pubs = append(pubs, pub{at, age})
	}
	if err := pr.Wait(); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	st := c.Stats()
	fmt.Printf("coordinator: %d attackers × %d-byte messages for %v; stats published %d, messages received %d, dropped %d\n",
		conns, size, flood, st.StatsPublished, st.Received, st.Dropped)
	fmt.Println("phase,seconds,publications,gap_p50_ms,gap_p99_ms,gap_max_ms,stale_p50_ms,stale_p99_ms,stale_max_ms,peak_rss_mib")
	names := []string{"baseline", "flood", "after"}
	for i, name := range names {
		lo, hi := bounds[i], bounds[i+1]
		var gaps, ages []float64
		prev := int64(0)
		for _, p := range pubs {
			if p.at < lo || p.at >= hi {
				if p.at < lo {
					prev = p.at
				}
				continue
			}
			if prev != 0 {
				gaps = append(gaps, float64(p.at-prev)/1e6)
			}
			prev = p.at
			ages = append(ages, float64(p.age)/1e6)
		}
		fmt.Printf("%s,%.1f,%d,%s,%s,%.0f\n", name, float64(hi-lo)/1e9, len(ages), pct(gaps), pct(ages), float64(peak[name])/(1<<20))
	}
	return nil
}

// pct renders p50, p99 and max of v in milliseconds.
func pct(v []float64) string {
	if len(v) == 0 {
		return "-,-,-"
	}
	slices.Sort(v)
	at := func(q float64) float64 { return v[min(len(v)-1, int(q*float64(len(v))))] }
	return fmt.Sprintf("%.0f,%.0f,%.0f", at(0.5), at(0.99), v[len(v)-1])
}

// probe runs one engine and one front-end until its standard input
// closes, then prints one line per stats publication: "pub <arrival unix
// ns> <staleness ns>".
func probe(backOut, backPub, front string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: backPub, BackOutput: backOut, Socket: quietOptions()})
	if err != nil {
		return err
	}
	defer e.Close()
	f, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: front, Socket: quietOptions()})
	if err != nil {
		return err
	}
	defer f.Close()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := e.WaitReady(wctx); err != nil {
		return fmt.Errorf("engine READY: %w", err)
	}
	var mu sync.Mutex
	sent := map[int]int64{} // waiting count -> unix ns it was sent
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for seq := 1; ctx.Err() == nil; seq++ {
			mu.Lock()
			sent[seq] = time.Now().UnixNano()
			mu.Unlock()
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			e.SendStats(sctx, 0, seq, 1, 0, seq)
			scancel()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	type rec struct{ at, age int64 }
	var recs []rec
	var rmu sync.Mutex
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		once := sync.OnceFunc(func() { close(first) })
		for {
			counts, _, _, err := f.NextStats(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil || len(counts) != 1 || counts[0][0] == 0 {
				continue
			}
			now := time.Now().UnixNano()
			mu.Lock()
			s, ok := sent[counts[0][0]]
			mu.Unlock()
			if !ok {
				continue
			}
			rmu.Lock()
			recs = append(recs, rec{now, now - s})
			rmu.Unlock()
			once()
		}
	}()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no stats publication within 30 s")
	}
	fmt.Println("ready")
	var b [1]byte
	os.Stdin.Read(b[:]) // returns when the coordinator closes it
	cancel()
	<-done
	rmu.Lock()
	defer rmu.Unlock()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, r := range recs {
		fmt.Fprintf(w, "pub %d %d\n", r.at, r.age)
	}
	return nil
}

// attack opens conns PUSH connections to addr and sends complete
// size-byte messages on each, as fast as they are taken, for d.
func attack(addr string, conns, size int, d time.Duration) {
	addr = strings.TrimPrefix(addr, "tcp://")
	body := make([]byte, size)
	hdr := make([]byte, 9)
	hdr[0] = zmtpwire.FlagLong
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	msg := append(hdr, body...)
	end := time.Now().Add(d)
	var sentMsgs atomic.Int64
	swarm := load.NewSwarm(addr, conns, func(c *zmtpguard.Conn) {
		nc := c.NetConn()
		nc.SetWriteDeadline(end)
		n := int64(0)
		for time.Now().Before(end) {
			if _, err := nc.Write(msg); err != nil {
				break
			}
			n++
		}
		sentMsgs.Add(n)
	})
	swarm.Wait()
	fmt.Fprintf(os.Stderr, "frontflood: %d of %d attackers connected, %d messages written\n", swarm.Connected(), conns, sentMsgs.Load())
	runtime.KeepAlive(swarm)
}

// rssBytes reads this process's resident set size from /proc.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return -1
}
