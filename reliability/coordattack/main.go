// Command coordattack re-runs two of issue 23's attacks against a running
// `zmqguard coordinator` process that it starts itself (loopback only,
// bounded in time), for RELIABILITY.md:
//
//	go run ./reliability/coordattack -bin PATH slowbody [-conns 3000] [-drip 3s] [-hold 40s]
//	go run ./reliability/coordattack -bin PATH scale [-subs 200] [-n 4096] [-watch 60s]
//
// (-coord-flags "..." passes more flags to the coordinator; -after 5s is how
// long it keeps sampling once the attack is over.)
//
// Both start PATH coordinator --engines 1 on loopback port 0 (the kernel
// chooses; the ports are read from its start line) with
// --debug-addr, play the engine over raw ZMTP (zmtpguard.Dial; a back
// publish subscription, then EngineCoreOutputs with changing stats every
// 10 ms so that stats are published every --stats-interval), sample the
// process's goroutines (/debug/zmqguard) and RSS (/proc) every second, stop
// it with SIGTERM and print one JSON object: the samples, what the attack
// saw, and the process's exit line.
//
// slowbody: -conns PUSH peers on back output complete the ZMTP handshake
// (by hand, on a bare TCP connection),
// send a long-frame header announcing 4096 bytes, then one byte of body
// every -drip; it records for each when the process closed it, counted from
// its header.
//
// scale: -subs XSUB subscribers on front subscribe to everything and never
// read; then one front peer sends ("SCALE_ELASTIC_EP", -n); a live front-end
// records the size of every publication for -watch.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// proc is the coordinator process under attack.
type proc struct {
	cmd                        *exec.Cmd
	stdout                     strings.Builder
	front, backOut, backPub    string
	debug                      string
	start                      time.Time
	mu                         sync.Mutex
	samples                    []Sample
	stopSampling, doneSampling chan struct{}
	exited                     chan error // Wait's result, once
}

// Sample is one reading of the process.
type Sample struct {
	T          float64 `json:"t_s"`
	Goroutines int     `json:"goroutines"`
	RSSMiB     float64 `json:"rss_mib"`
}

// startLine is the coordinator's "coordinator running" log line: the
// endpoints it bound (every one on port 0, chosen by the kernel).
type startLine struct {
	Msg         string `json:"msg"`
	Front       string `json:"front"`
	BackOutput  string `json:"back_output"`
	BackPublish string `json:"back_publish"`
	DebugAddr   string `json:"debug_addr"`
}

// stderrLines receives the coordinator's JSON log lines: it hands the
// start line over once and passes errors (and any line that is not JSON)
// on to os.Stderr.
type stderrLines struct {
	mu      sync.Mutex
	partial []byte
	started chan startLine
}

func (w *stderrLines) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := slices.Index(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := w.partial[:i+1]
		var l struct {
			startLine
			Level string `json:"level"`
		}
		err := json.Unmarshal(line, &l)
		switch {
		case err == nil && l.Msg == "coordinator running":
			select {
			case w.started <- l.startLine:
			default:
			}
		case err != nil || l.Level == "ERROR":
			// Errors, and anything that is not a log line (a panic),
			// as --log-level error showed them before.
			os.Stderr.Write(line)
		}
		w.partial = w.partial[i+1:]
	}
}

// startProc starts the coordinator on ports the kernel chooses (port 0
// everywhere) and reads them from its start line: no port is picked here,
// so that other programs and tests on the machine cannot take one first.
func startProc(bin string, extra ...string) (*proc, error) {
	p := &proc{stopSampling: make(chan struct{}), doneSampling: make(chan struct{})}
	args := append([]string{"coordinator", "--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0",
		"--back-publish", "tcp://127.0.0.1:0", "--engines", "1", "--debug-addr", "127.0.0.1:0",
		"--log-format", "json", "--log-level", "info"}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = &p.stdout
	lines := &stderrLines{started: make(chan startLine, 1)}
	p.cmd.Stderr = lines
	exited := make(chan error, 1)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.start = time.Now()
	go func() { exited <- p.cmd.Wait() }()
	select {
	case l := <-lines.started:
		p.front = strings.TrimPrefix(l.Front, "tcp://")
		p.backOut = strings.TrimPrefix(l.BackOutput, "tcp://")
		p.backPub = strings.TrimPrefix(l.BackPublish, "tcp://")
		p.debug = l.DebugAddr
		p.exited = exited
	case err := <-exited:
		return nil, fmt.Errorf("coordinator exited before it was running: %v", err)
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("coordinator did not log its start line within 30 s")
	}
	if p.front == "" || p.backOut == "" || p.backPub == "" || p.debug == "" {
		p.cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("coordinator start line without every endpoint: front %q back output %q back publish %q debug %q",
			p.front, p.backOut, p.backPub, p.debug)
	}
	go p.sample()
	return p, nil
}

func (p *proc) read() Sample {
	s := Sample{T: time.Since(p.start).Seconds(), Goroutines: -1, RSSMiB: -1}
	cl := http.Client{Timeout: 5 * time.Second}
	if r, err := cl.Get("http://" + p.debug + "/debug/zmqguard"); err == nil {
		var d struct {
			Goroutines int `json:"goroutines"`
		}
		if json.NewDecoder(r.Body).Decode(&d) == nil {
			s.Goroutines = d.Goroutines
		}
		r.Body.Close()
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				s.RSSMiB = kb / 1024
			}
		}
	}
	return s
}

func (p *proc) sample() {
	defer close(p.doneSampling)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s := p.read()
		p.mu.Lock()
		p.samples = append(p.samples, s)
		p.mu.Unlock()
		select {
		case <-p.stopSampling:
			return
		case <-t.C:
		}
	}
}

// kill ends sampling and the process.
func (p *proc) kill() {
	close(p.stopSampling)
	<-p.doneSampling
	p.cmd.Process.Kill()
	<-p.exited
}

// stop ends sampling, sends SIGTERM and returns the exit line.
func (p *proc) stop() (json.RawMessage, error) {
	close(p.stopSampling)
	<-p.doneSampling
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			return nil, err
		}
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		return nil, fmt.Errorf("coordinator did not exit within 30 s of SIGTERM")
	}
	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	return json.RawMessage(lines[len(lines)-1]), nil
}

// The socket types the peers dial as, in one place.
type socketType = zmtpguard.SocketType

const (
	typeXSub = "XSUB"
	typePush = "PUSH"
)

// cmdPing is the ZMTP 3.1 PING command's name (zmtpguard.Message.Command).
const cmdPing = "PING"

// rawPush connects to addr over TCP and completes a ZMTP 3.1 NULL handshake
// as a PUSH by hand (greeting, READY with Socket-Type PUSH; the peer's
// greeting and READY read and not checked), leaving the bare connection
// for bytes no well-behaved peer would send.
func rawPush(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 20 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
	copy(g[12:], "NULL")
	ready := []byte{0x04, 26, 5, 'R', 'E', 'A', 'D', 'Y', 11}
	ready = append(ready, "Socket-Type"...)
	ready = append(ready, 0, 0, 0, 4)
	ready = append(ready, "PUSH"...)
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(append(g, ready...)); err != nil {
		nc.Close()
		return nil, err
	}
	buf := make([]byte, 64)
	if _, err := io.ReadFull(nc, buf); err != nil { // the peer's greeting
		nc.Close()
		return nil, err
	}
	hdr := buf[:2]
	if _, err := io.ReadFull(nc, hdr); err != nil { // its READY command
		nc.Close()
		return nil, err
	}
	size := int(hdr[1])
	if hdr[0]&0x02 != 0 {
		long := make([]byte, 7)
		if _, err := io.ReadFull(nc, long); err != nil {
			nc.Close()
			return nil, err
		}
		size = int(binary.BigEndian.Uint64(append([]byte{hdr[1]}, long...)))
	}
	if hdr[0]&0x04 == 0 || size > 4096 {
		nc.Close()
		return nil, fmt.Errorf("unexpected handshake frame (flags %#x, %d bytes)", hdr[0], size)
	}
	if _, err := io.ReadFull(nc, make([]byte, size)); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

func dial(ctx context.Context, addr string, t socketType) (*zmtpguard.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return zmtpguard.Dial(dctx, "tcp", addr, t, nil, nil)
}

func send(c *zmtpguard.Conn, frames ...[]byte) error {
	if err := c.WriteMessage(frames...); err != nil {
		return err
	}
	return c.Flush()
}

// engine subscribes on back publish and pushes stats every 10 ms until ctx
// ends; it answers the process's PINGs on both connections.
func engine(ctx context.Context, p *proc) error {
	sub, err := dial(ctx, p.backPub, typeXSub)
	if err != nil {
		return err
	}
	if err := send(sub, []byte{0x01}); err != nil {
		return err
	}
	out, err := dial(ctx, p.backOut, typePush)
	if err != nil {
		return err
	}
	var mu sync.Mutex // out's writes
	pong := func(c *zmtpguard.Conn, lock *sync.Mutex) {
		var m zmtpguard.Message
		for {
			m.Reset()
			if c.ReadMessage(&m) != nil {
				return
			}
			if m.Command == cmdPing {
				if lock != nil {
					lock.Lock()
				}
				c.WriteCommand(zmtpwire.CmdPong, zmtpwire.PongContext(m.Frames[0]))
				c.Flush()
				if lock != nil {
					lock.Unlock()
				}
			}
		}
	}
	go pong(sub, nil)
	go pong(out, &mu)
	go func() {
		defer sub.Close()
		defer out.Close()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var buf []byte
		for step := int64(1); ; step++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// The one call into the project's encoder.
			buf = dpwire.AppendHeader(buf[:0], &enginecore.Header{HasStats: true,
				Stats: enginecore.SchedulerStats{NumRunningReqs: 1, NumWaitingReqs: step % 100, StepCounter: step}})
			mu.Lock()
			err := send(out, buf)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// Dist summarises seconds.
type Dist struct {
	N   int     `json:"n"`
	Min float64 `json:"min_s"`
	P50 float64 `json:"p50_s"`
	Max float64 `json:"max_s"`
}

func dist(v []float64) Dist {
	if len(v) == 0 {
		return Dist{}
	}
	slices.Sort(v)
	return Dist{N: len(v), Min: v[0], P50: v[len(v)/2], Max: v[len(v)-1]}
}

func slowbody(ctx context.Context, p *proc, conns int, drip, hold time.Duration) (any, error) {
	type peer struct {
		header time.Time
		closed chan time.Time
	}
	peers := make([]*peer, conns)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var dialErrs int
	var mu sync.Mutex
	t0 := time.Now()
	for i := range peers {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			nc, err := rawPush(ctx, p.backOut)
			if err != nil {
				mu.Lock()
				dialErrs++
				mu.Unlock()
				return
			}
			c := nc
			// A long frame header (flags 0x02, 8-byte size 4096), no body.
			hdr := make([]byte, 9)
			hdr[0] = 0x02
			binary.BigEndian.PutUint64(hdr[1:], 4096)
			if _, err := nc.Write(hdr); err != nil {
				c.Close()
				return
			}
			pr := &peer{header: time.Now(), closed: make(chan time.Time, 1)}
			peers[i] = pr
			go func() { // closed when a read fails (what the process sends is ignored)
				io.Copy(io.Discard, nc)
				pr.closed <- time.Now()
			}()
			go func() { // one byte every drip, until closed or hold
				defer c.Close()
				t := time.NewTicker(drip)
				defer t.Stop()
				end := time.After(hold)
				for {
					select {
					case <-t.C:
						if _, err := nc.Write([]byte{'x'}); err != nil {
							return
						}
					case <-end:
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	allDialed := time.Since(t0).Seconds()
	var cut []float64
	held := 0
	end := time.Now().Add(hold + 5*time.Second)
	for _, pr := range peers {
		if pr == nil {
			continue
		}
		select {
		case at := <-pr.closed:
			if at.Sub(pr.header) < hold {
				cut = append(cut, at.Sub(pr.header).Seconds())
			} else {
				held++
			}
		case <-time.After(time.Until(end)):
			held++
		}
	}
	return map[string]any{"conns": conns, "dial_errors": dialErrs, "dial_all_s": allDialed,
		"cut_after_header": dist(cut), "held_to_end": held, "drip_s": drip.Seconds(), "hold_s": hold.Seconds()}, nil
}

func scale(ctx context.Context, p *proc, subs, n int, watch time.Duration) (any, error) {
	var conns []*zmtpguard.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range subs {
		c, err := dial(ctx, p.front, typeXSub)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		if err := send(c, []byte{0x01}); err != nil {
			return nil, err
		}
	}
	live, err := dial(ctx, p.front, typeXSub)
	if err != nil {
		return nil, err
	}
	conns = append(conns, live)
	if err := send(live, []byte{0x01}); err != nil {
		return nil, err
	}
	type pub struct {
		t    float64
		size int
	}
	var mu sync.Mutex
	var pubs []pub
	var wmu sync.Mutex
	go func() {
		var m zmtpguard.Message
		for {
			m.Reset()
			if live.ReadMessage(&m) != nil {
				return
			}
			if m.Command == cmdPing {
				wmu.Lock()
				live.WriteCommand(zmtpwire.CmdPong, zmtpwire.PongContext(m.Frames[0]))
				live.Flush()
				wmu.Unlock()
				continue
			}
			if len(m.Frames) == 1 {
				mu.Lock()
				pubs = append(pubs, pub{time.Since(p.start).Seconds(), len(m.Frames[0])})
				mu.Unlock()
			}
		}
	}()
	// Wait for the live front-end's first publication (its size is the
	// "before"), not for a time.
	first := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n0 := len(pubs)
		mu.Unlock()
		if n0 > 0 {
			break
		}
		if time.Now().After(first) {
			return nil, fmt.Errorf("scale: no publication reached the live front-end within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// ("SCALE_ELASTIC_EP", n) in msgpack: fixarray 2, str 16, uint16.
	msg := append([]byte{0x92, 0xb0}, "SCALE_ELASTIC_EP"...)
	msg = append(msg, 0xcd, byte(n>>8), byte(n))
	sentAt := time.Since(p.start).Seconds()
	wmu.Lock()
	err = send(live, msg)
	wmu.Unlock()
	if err != nil {
		return nil, err
	}
	time.Sleep(watch)
	mu.Lock()
	defer mu.Unlock()
	before, after, count := 0, 0, 0
	for _, x := range pubs {
		if x.t < sentAt {
			before = max(before, x.size)
		} else {
			after = max(after, x.size)
			count++
		}
	}
	return map[string]any{"subscribers_never_reading": subs, "scale_to": n, "watch_s": watch.Seconds(),
		"publication_bytes_before": before, "publication_bytes_after_max": after, "publications_after": count}, nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "coordattack:", err)
		os.Exit(1)
	}
}

// run parses args, runs one attack against a process it starts and writes
// the result (JSON) to stdout.
func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("coordattack", flag.ContinueOnError)
	bin := fs.String("bin", "", "the zmqguard binary (required)")
	conns := fs.Int("conns", 3000, "slowbody: peers")
	drip := fs.Duration("drip", 3*time.Second, "slowbody: one body byte every")
	hold := fs.Duration("hold", 40*time.Second, "slowbody: how long a peer keeps dripping at most")
	subs := fs.Int("subs", 200, "scale: never-reading subscribers")
	n := fs.Int("n", 4096, "scale: the engine count asked for")
	watch := fs.Duration("watch", 60*time.Second, "scale: how long to watch afterwards")
	after := fs.Duration("after", 5*time.Second, "keep sampling the process this long after the attack")
	extra := fs.String("coord-flags", "", "more flags for the coordinator, space-separated (e.g. \"--heartbeat-interval 0\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" || fs.NArg() != 1 {
		return fmt.Errorf("usage: coordattack -bin PATH slowbody|scale [flags]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := startProc(*bin, strings.Fields(*extra)...)
	if err != nil {
		return err
	}
	ectx, stopEngine := context.WithCancel(ctx)
	defer stopEngine()
	if err := engine(ectx, p); err != nil {
		p.kill()
		return fmt.Errorf("engine: %w", err)
	}
	time.Sleep(time.Second)
	var res any
	switch fs.Arg(0) {
	case "slowbody":
		res, err = slowbody(ctx, p, *conns, *drip, *hold)
	case "scale":
		res, err = scale(ctx, p, *subs, *n, *watch)
	default:
		err = fmt.Errorf("unknown attack %q", fs.Arg(0))
	}
	if err != nil {
		stopEngine()
		p.kill()
		return err
	}
	time.Sleep(*after)
	stopEngine()
	exit, err := p.stop()
	if err != nil {
		return err
	}
	p.mu.Lock()
	out := map[string]any{"attack": fs.Arg(0), "result": res, "samples": p.samples, "exit_line": exit}
	p.mu.Unlock()
	b, _ := json.MarshalIndent(out, "", "  ")
	_, err = fmt.Fprintln(stdout, string(b))
	return err
}
