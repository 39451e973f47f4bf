// Command memattack measures a guarded PULL socket's memory while many
// peers attack it, and after they leave (issue 18). It runs the target in
// this process and the attackers in a child process (the same binary with
// -child), so that the RSS it samples is the target's alone.
//
// Usage:
//
//	memattack [-mode guarded|unbounded] [-conns 1000] [-size 1048576] [-hold 8s] [-after 10s] [-out run.csv]
//
// Each attacker completes a PUSH handshake, sends a frame header for a body
// of -size bytes and all of it but the last byte, holds the connection for
// -hold, and then the child exits (closing every connection at once). With
// -attack flood each attacker completes its message and sends more, as
// fast as the target reads them, while the target's application takes one
// message per millisecond. With -attack burst each attacker sends -size
// bytes of complete 8 KiB messages (enough to grow the connection's read
// buffer to its 256 KiB maximum) and then stays connected and silent,
// answering the socket's PINGs, for -hold: memory a live idle peer pins.
// The target samples every 250 ms: seconds since start, RSS, heap in use, heap
// allocated, peers, bytes charged to the socket's MemoryBudget, budget
// stalls and evictions, and policy violations. Mode "unbounded" turns off
// the issue-18 defences (MemoryBudget, ReclaimBytes and BodyTimeout set
// negative), which is how the socket behaved before them.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func main() {
	mode := flag.String("mode", "guarded", "guarded (defaults) or unbounded (issue-18 defences off)")
	conns := flag.Int("conns", 1000, "attacking connections")
	size := flag.Int("size", 1<<20, "claimed body size of each attacker's message (at most MaxMessageSize, 1 MiB)")
	hold := flag.Duration("hold", 8*time.Second, "how long the attackers hold their connections")
	after := flag.Duration("after", 10*time.Second, "how long to keep sampling after the attackers left")
	out := flag.String("out", "", "CSV file to write (default standard output)")
	kind := flag.String("attack", "partial", "partial (a 1 MiB message minus its last byte per peer), flood (complete messages, as fast as the target takes them, to an application that takes 1 per ms) or burst (-size bytes of 8 KiB messages, then idle, answering PINGs)")
	child := flag.Bool("child", false, "internal: run as the attacker process")
	connect := flag.String("connect", "", "internal: the target's address (child)")
	flag.Parse()
	if *kind != "partial" && *kind != "flood" && *kind != "burst" {
		fmt.Fprintln(os.Stderr, "memattack: -attack must be partial, flood or burst, got", ratelog.Escape(*kind, 40))
		os.Exit(2)
	}
	flood = *kind == "flood"
	burst = *kind == "burst"
	if *child {
		attack(*connect, *conns, *size, *hold)
		return
	}
	if *mode != "guarded" && *mode != "unbounded" {
		fmt.Fprintln(os.Stderr, "memattack: -mode must be guarded or unbounded, got", ratelog.Escape(*mode, 40))
		os.Exit(2)
	}
	if err := run(*mode, *conns, *size, *hold, *after, *out); err != nil {
		fmt.Fprintln(os.Stderr, "memattack:", err)
		os.Exit(1)
	}
}

// flood and burst select the flood and burst attacks (-attack).
var flood, burst bool

func run(mode string, conns, size int, hold, after time.Duration, out string) error {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	var evMu sync.Mutex
	events := map[string]int{}
	o.OnEvent = func(e socket.Event) {
		if e.Kind == socket.EventConnected {
			return
		}
		k := e.Kind.String()
		if e.Err != nil {
			k += ": " + e.Err.Error()
			if i := strings.Index(k, " (peer"); i > 0 {
				k = k[:i]
			}
		}
		evMu.Lock()
		events[k]++
		evMu.Unlock()
	}
	defer func() {
		evMu.Lock()
		for k, n := range events {
			fmt.Fprintf(os.Stderr, "memattack: %d × %s\n", n, ratelog.Escape(k, 200))
		}
		evMu.Unlock()
	}()
	if mode == "unbounded" {
		o.MemoryBudget = -1
		o.ReclaimBytes = -1
		o.Guard.BodyTimeout = -1
	}
	s, err := socket.New("PULL", o)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		return err
	}
	w := io.Writer(os.Stdout)
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	if flood {
		mode += "-flood"
	}
	if burst {
		mode += "-burst"
	}
	fmt.Fprintln(bw, "mode,seconds,phase,rss_mib,heap_inuse_mib,heap_alloc_mib,peers,budget_mib,budget_stalls,budget_evictions,policy_violations")

	// The application keeps receiving (nothing arrives: no attacker ever
	// completes a message).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			if _, err := s.Recv(ctx); err != nil {
				return
			}
			if flood {
				time.Sleep(time.Millisecond) // a slow application
			}
		}
	}()
	start := time.Now()
	phase := "baseline"
	var mu sync.Mutex
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		st := s.Stats()
		mu.Lock()
		ph := phase
		mu.Unlock()
		fmt.Fprintf(bw, "%s,%.2f,%s,%.1f,%.1f,%.1f,%d,%.1f,%d,%d,%d\n", mode, time.Since(start).Seconds(), ph,
			float64(rssBytes())/(1<<20), float64(ms.HeapInuse)/(1<<20), float64(ms.HeapAlloc)/(1<<20),
			st.Peers, float64(st.BudgetBytes)/(1<<20), st.BudgetStalls, st.BudgetEvictions, st.Refused[decodeguard.ReasonPolicy])
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	wait := func(d time.Duration) {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			<-tick.C
			sample()
		}
	}
	wait(2 * time.Second)
	mu.Lock()
	phase = "attack"
	mu.Unlock()
	attackName := "partial"
	if flood {
		attackName = "flood"
	}
	if burst {
		attackName = "burst"
	}
	cmd := exec.Command(os.Args[0], "-child", "-attack", attackName, "-connect", strings.TrimPrefix(s.Endpoint(), "tcp://"), "-conns", fmt.Sprint(conns), "-size", fmt.Sprint(size), "-hold", hold.String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("attacker: %w", err)
			}
			waiting = false
		case <-tick.C:
			sample()
		}
	}
	mu.Lock()
	phase = "after"
	mu.Unlock()
	st := s.Stats()
	fmt.Fprintf(os.Stderr, "memattack: connects %d, disconnects %d, violations %v, heartbeat timeouts %d, budget stalls %d, evictions %d\n",
		st.Connects, st.Disconnects, st.Refused, st.HeartbeatTimeouts, st.BudgetStalls, st.BudgetEvictions)
	wait(after)
	fmt.Fprintf(os.Stderr, "memattack: at the end: reclaims %d, peers %d\n", s.Stats().Reclaims, s.Stats().Peers)
	return nil
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

// attack opens conns connections to addr, sends each a header and all but
// the last byte of a size-byte body, holds them for hold and returns
// (exiting closes them all at once).
func attack(addr string, conns, size int, hold time.Duration) {
	body := make([]byte, size-1)
	last := []byte{0}
	hdr := make([]byte, 9)
	hdr[0] = zmtpwire.FlagLong
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	swarm := load.NewSwarm(addr, conns, func(c *zmtpguard.Conn) {
		nc := c.NetConn()
		nc.SetWriteDeadline(time.Now().Add(hold))
		if burst {
			burstThenIdle(c, size, hold)
			return
		}
		nc.Write(hdr)
		nc.Write(body)
		for flood {
			// Complete the message and send more, until the target
			// stops taking them or the hold ends.
			if _, err := nc.Write(last); err != nil {
				return
			}
			nc.Write(hdr)
			if _, err := nc.Write(body); err != nil {
				return
			}
		}
	})
	time.Sleep(hold)
	fmt.Fprintf(os.Stderr, "memattack: %d of %d attackers connected\n", swarm.Connected(), conns)
	runtime.KeepAlive(swarm)
}

// burstThenIdle sends size bytes of complete 8 KiB messages on c, then
// reads it until hold has passed, answering PINGs as a live idle peer does.
func burstThenIdle(c *zmtpguard.Conn, size int, hold time.Duration) {
	msg := make([]byte, 8<<10)
	for sent := 0; sent < size; sent += len(msg) {
		if err := c.WriteMessage(msg); err != nil {
			return
		}
	}
	if err := c.Flush(); err != nil {
		return
	}
	c.NetConn().SetDeadline(time.Now().Add(hold))
	var m zmtpguard.Message
	for c.ReadMessage(&m) == nil {
		if m.Command == zmtpwire.CmdPing {
			c.WriteCommand(zmtpwire.CmdPong, zmtpwire.PongContext(m.Frames[0]))
			c.Flush()
		}
	}
}
