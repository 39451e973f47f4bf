// Command outputs re-measures issue 29's rows 4 and 11 (the engine output
// receiver) from outside, on loopback only, bounded in count and time, for
// RELIABILITY.md's "Fair shares (issue 29)" table:
//
//	go run ./reliability/fairshare/outputs row4
//	go run ./reliability/fairshare/outputs -bin PATH [-for 20s] [-huge 1024x4096] [-rate 50] [-engines 1] [-attackers process|nice|inproc] row11
//
// row4 runs an outputs.Receiver in this process with the library's
// defaults (OnEngineDead nil) on 127.0.0.1 port 0 and plays three peers: an
// honest engine 0 that sends one valid message every 10 ms, a raw PUSH
// peer that sends only ENGINE_CORE_DEAD, and a second connection that
// claims engine 0 with forged outputs and then sends ENGINE_CORE_DEAD. It
// prints one JSON object: whether Run ended and with what, how many forged
// outputs reached the handler as engine 0's, whether OnEngineDead ran (it
// is set only to count; the default behaviour is what matters, so the
// receiver is run twice: once with OnEngineDead nil, once with it set) and
// how many honest messages were delivered after the attack.
//
// row11 starts PATH outputs --bind tcp://127.0.0.1:0 (the kernel chooses
// the port; it is read from the start line), then for -for: attacking
// engines 1..-engines, each on its own connection, send valid
// EngineCoreOutputs of -huge request outputs, each with a float32 pooling
// output of the given width in its own aux frame (1024x4096: 16 MiB a
// message), back to back; an honest engine 0 sends one small message every
// 1/-rate s with its send time in the request id. The attackers run in a
// child process (this binary's "heavy" mode; -attackers nice runs it under
// nice -n 19, inproc in this process as before issue 37's second round),
// so that the honest sender and the reader do not share a process with
// them. The harness reads the process's stdout and, for each honest line,
// the delay from send to line. It prints one JSON object: honest messages
// sent and printed, delay p50/p99/max, how many took 50 ms or more (and
// when the first 16 of those were sent, from the start), p99 and that
// count for the messages sent 2 s or more after the start (past the heavy
// engines' first burst), attacker messages
// printed, the process's peak RSS (/proc), the CPU time of the CLI, of
// this process and of the attackers', the load average, and the CLI's
// exit counters.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
)

var quiet = slog.New(slog.DiscardHandler)

// stderrFile is -stderr.
var stderrFile string

func main() {
	bin := flag.String("bin", "", "zmqguard binary (row11)")
	dur := flag.Duration("for", 20*time.Second, "attack duration (row11)")
	huge := flag.String("huge", "1024x4096", "attacker's message: OUTPUTSxWIDTH float32 pooling outputs (row11)")
	rate := flag.Float64("rate", 50, "honest messages per second (row11)")
	heavy := flag.Int("engines", 1, "attacking engines, each on its own connection and engine index (row11)")
	attackers := flag.String("attackers", "process", "where the attacking engines run (row11): process (a child process), nice (a child process under nice -n 19) or inproc (this process)")
	ep := flag.String("ep", "", "the outputs endpoint (heavy: the attackers' process row11 starts)")
	flag.StringVar(&stderrFile, "stderr", "", "also write the CLI's stderr to this file (row11; with GODEBUG=gctrace=1 in the environment, its GC lines)")
	flag.Parse()
	var err error
	switch flag.Arg(0) {
	case "row4":
		err = row4()
	case "row11":
		err = row11(*bin, *dur, *huge, *rate, *heavy, *attackers)
	case "heavy":
		err = heavyMain(*ep, *dur, *huge, *heavy)
	default:
		err = errors.New("usage: outputs row4 | -bin PATH row11")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "outputs:", err)
		os.Exit(1)
	}
}

func pusher(ep string) (*socket.Socket, error) {
	o := socket.DefaultOptions()
	o.Logger = quiet
	p, err := socket.New("PUSH", o)
	if err != nil {
		return nil, err
	}
	if err := p.Dial(ep); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func message(engine int64, id string, tokens ...int64) [][]byte {
	var enc enginecore.Encoder
	f := enc.Encode(&enginecore.Message{Header: enginecore.Header{EngineIndex: engine, Timestamp: 1},
		Outputs: []enginecore.Output{{RequestID: []byte(id), NewTokenIDs: tokens}}})
	return append([][]byte(nil), f...)
}

type row4Result struct {
	OnEngineDead      bool    `json:"on_engine_dead_set"`
	RunEnded          bool    `json:"run_ended"`
	RunErr            string  `json:"run_err,omitempty"`
	DeadEvents        int     `json:"dead_events"`
	DeadEventEngines  []int64 `json:"dead_event_engines"`
	ForgedDelivered   int     `json:"forged_delivered_as_engine_0"`
	HonestAfterAttack int     `json:"honest_delivered_after_attack"`
	Engine0MarkedDead bool    `json:"engine_0_marked_dead"`
}

func row4() error {
	var out []row4Result
	for _, withCallback := range []bool{false, true} {
		res, err := row4Once(withCallback)
		if err != nil {
			return err
		}
		out = append(out, res)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func row4Once(withCallback bool) (row4Result, error) {
	res := row4Result{OnEngineDead: withCallback}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var attackDone atomic.Bool
	cfg := outputs.Config{Logger: quiet, Socket: socket.Options{},
		Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
			mu.Lock()
			defer mu.Unlock()
			for _, o := range m.Outputs {
				switch {
				case bytes.HasPrefix(o.RequestID, []byte("forged")):
					res.ForgedDelivered++
				case attackDone.Load():
					res.HonestAfterAttack++
				}
			}
			return nil
		}}
	cfg.Socket.Logger = quiet
	if withCallback {
		cfg.OnEngineDead = func(e outputs.EngineDeadError) {
			mu.Lock()
			res.DeadEvents++
			res.DeadEventEngines = append(res.DeadEventEngines, e.Engine)
			mu.Unlock()
		}
	}
	r, err := outputs.New(cfg)
	if err != nil {
		return res, err
	}
	defer r.Close()
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		return res, err
	}
	runc := make(chan error, 1)
	go func() { runc <- r.Run(ctx) }()
	honest, err := pusher(r.Endpoint())
	if err != nil {
		return res, err
	}
	defer honest.Close()
	if err := honest.Send(ctx, message(0, "honest-first", 1)...); err != nil {
		return res, err
	}
	for r.Stats().Messages < 1 && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	raw, err := pusher(r.Endpoint())
	if err != nil {
		return res, err
	}
	defer raw.Close()
	if err := raw.Send(ctx, []byte("ENGINE_CORE_DEAD")); err != nil {
		return res, err
	}
	claim, err := pusher(r.Endpoint())
	if err != nil {
		return res, err
	}
	defer claim.Close()
	for i := 0; i < 10; i++ {
		if err := claim.Send(ctx, message(0, "forged-"+strconv.Itoa(i), 666)...); err != nil {
			return res, err
		}
	}
	if err := claim.Send(ctx, []byte("ENGINE_CORE_DEAD")); err != nil {
		return res, err
	}
	// Every attack message taken off the socket (1 + 12 + 1 honest).
	for r.Stats().Received < 13 && ctx.Err() == nil {
		select {
		case err := <-runc:
			runc <- err
			goto sent
		case <-time.After(5 * time.Millisecond):
		}
	}
sent:
	attackDone.Store(true)
	for i := 0; i < 100; i++ {
		if err := honest.Send(ctx, message(0, "honest-"+strconv.Itoa(i), 1)...); err != nil {
			return res, err
		}
		time.Sleep(10 * time.Millisecond) // the honest engine's pace, not a wait for a condition
	}
	// Wait (bounded) for the honest messages, or Run's end.
	deadline := time.After(5 * time.Second)
wait:
	for {
		mu.Lock()
		n := res.HonestAfterAttack
		mu.Unlock()
		if n >= 100 {
			break
		}
		select {
		case err := <-runc:
			runc <- err
			break wait
		case <-deadline:
			break wait
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case err := <-runc:
		res.RunEnded = true
		if err != nil {
			res.RunErr = err.Error()
		}
	default:
	}
	for _, e := range r.Stats().Engines {
		if e.Engine == 0 {
			res.Engine0MarkedDead = e.Dead
		}
	}
	r.Close()
	if !res.RunEnded {
		<-runc
	}
	mu.Lock()
	defer mu.Unlock()
	return res, nil
}

type row11Result struct {
	Huge          string          `json:"huge"`
	Engines       int             `json:"attack_engines"`
	HugeBytes     int             `json:"huge_message_bytes"`
	For           string          `json:"for"`
	HonestSent    int             `json:"honest_sent"`
	HonestPrinted int             `json:"honest_printed"`
	HonestPct     float64         `json:"honest_printed_pct"`
	P50ms         float64         `json:"honest_delay_p50_ms"`
	P99ms         float64         `json:"honest_delay_p99_ms"`
	Maxms         float64         `json:"honest_delay_max_ms"`
	Over50        int             `json:"honest_over_50ms"`
	LaterP99ms    float64         `json:"honest_delay_p99_from_2s_ms"`
	LaterOver50   int             `json:"honest_over_50ms_from_2s"`
	SlowAt        []string        `json:"slow_at,omitempty"`
	AttackSent    int             `json:"attack_sent"`
	AttackPrinted int             `json:"attack_lines_printed"`
	PeakRSSMiB    float64         `json:"peak_rss_mib"`
	CLICPUs       float64         `json:"cli_cpu_s"`
	HarnessCPUs   float64         `json:"harness_cpu_s"`
	Attackers     string          `json:"attackers"`
	AttackCPUs    float64         `json:"attackers_cpu_s,omitempty"`
	LoadAvg       string          `json:"loadavg"`
	Counters      json.RawMessage `json:"counters,omitempty"`
}

func row11(bin string, dur time.Duration, huge string, rate float64, heavy int, attackers string) error {
	if bin == "" {
		return errors.New("row11 needs -bin")
	}
	var nOut, width int
	if _, err := fmt.Sscanf(huge, "%dx%d", &nOut, &width); err != nil || nOut < 1 || width < 1 {
		return fmt.Errorf("-huge %q: want OUTPUTSxWIDTH", huge)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur+90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "outputs", "--bind", "tcp://127.0.0.1:0", "--log-format", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	epc := make(chan string, 1)
	var errCopy io.Writer = io.Discard
	if stderrFile != "" {
		f, err := os.Create(stderrFile)
		if err != nil {
			return err
		}
		defer f.Close()
		errCopy = f
	}
	go func() {
		sc := bufio.NewScanner(io.TeeReader(stderr, errCopy))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == "outputs receiving" {
				if ep, ok := l["endpoint"].(string); ok {
					select {
					case epc <- ep:
					default:
					}
				}
			}
		}
	}()
	var ep string
	select {
	case ep = <-epc:
	case <-time.After(20 * time.Second):
		return errors.New("no start line within 20 s")
	}

	// The reader: honest lines' delays (the send time is in the id).
	var mu sync.Mutex
	var delays []time.Duration
	var attackLines int
	var lastLine string
	var slowAt []string
	var later []time.Duration // honest delays of messages sent 2 s or more after the start
	t0 := time.Now()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		br := bufio.NewReaderSize(stdout, 1<<20)
		start := true
		for {
			line, err := br.ReadSlice('\n')
			if start && len(line) > 0 {
				now := time.Now()
				s := string(line[:min(len(line), 96)])
				mu.Lock()
				if i := strings.Index(s, `"request_id":"h-`); i >= 0 {
					rest := s[i+len(`"request_id":"h-`):]
					if j := strings.IndexByte(rest, '"'); j > 0 {
						if ns, err := strconv.ParseInt(rest[:j], 10, 64); err == nil {
							d := now.Sub(time.Unix(0, ns))
							delays = append(delays, d)
							if time.Unix(0, ns).Sub(t0) >= 2*time.Second {
								later = append(later, d)
							}
							if d >= 50*time.Millisecond && len(slowAt) < 16 {
								slowAt = append(slowAt, fmt.Sprintf("%.2fs:%dms", time.Unix(0, ns).Sub(t0).Seconds(), d.Milliseconds()))
							}
						}
					}
				} else if strings.Contains(s, `"request_id":"a-`) {
					attackLines++
				} else if strings.HasPrefix(s, `{"counters"`) && err == nil {
					lastLine = string(line)
				}
				mu.Unlock()
			}
			start = err == nil
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}()
	// RSS sampler.
	var peakKiB atomic.Int64
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if kib := rssKiB(cmd.Process.Pid); kib > peakKiB.Load() {
				peakKiB.Store(kib)
			}
			select {
			case <-t.C:
			case <-stopRSS:
				return
			}
		}
	}()

	// The attackers: valid huge messages back to back, engines 1..heavy,
	// in a child process (an attacker is another host: its CPU is not the
	// honest engine's sender's nor the reader's), under nice with
	// -attackers nice, or in this process with -attackers inproc.
	actx, acancel := context.WithTimeout(ctx, dur)
	defer acancel()
	var attackSent atomic.Int64
	var attackCPU float64
	size := 0
	attackDone := make(chan struct{})
	var attackErr error
	switch attackers {
	case "inproc":
		go func() {
			defer close(attackDone)
			n, sz, err := runAttackers(actx, ep, heavy, nOut, width)
			attackSent.Store(n)
			size, attackErr = sz, err
		}()
	case "process", "nice":
		self, err := os.Executable()
		if err != nil {
			return err
		}
		args := []string{self, "-ep", ep, "-engines", strconv.Itoa(heavy), "-huge", huge, "-for", dur.String(), "heavy"}
		if attackers == "nice" {
			args = append([]string{"nice", "-n", "19"}, args...)
		}
		ac := exec.CommandContext(ctx, args[0], args[1:]...)
		ac.Stderr = os.Stderr
		out, err := ac.StdoutPipe()
		if err != nil {
			return err
		}
		if err := ac.Start(); err != nil {
			return err
		}
		go func() {
			defer close(attackDone)
			var r heavyResult
			derr := json.NewDecoder(out).Decode(&r)
			if err := ac.Wait(); err != nil {
				attackErr = fmt.Errorf("the attackers' process: %w", err)
			} else if derr != nil {
				attackErr = fmt.Errorf("the attackers' process: %w", derr)
			}
			attackSent.Store(r.Sent)
			size, attackCPU = r.Bytes, r.CPUs
		}()
	default:
		return fmt.Errorf("-attackers %q: want process, nice or inproc", attackers)
	}
	// The honest engine, at its own pace.
	hp, err := pusher(ep)
	if err != nil {
		return err
	}
	defer hp.Close()
	honestSent := 0
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	for actx.Err() == nil {
		select {
		case <-tick.C:
		case <-actx.Done():
		}
		if actx.Err() != nil {
			break
		}
		id := "h-" + strconv.FormatInt(time.Now().UnixNano(), 10)
		if err := hp.Send(actx, message(0, id, 1)...); err == nil {
			honestSent++
		}
	}
	tick.Stop()
	<-attackDone
	if attackErr != nil {
		return attackErr
	}
	// Let what was sent be printed (bounded), then stop the process.
	grace := time.Now().Add(30 * time.Second)
	for time.Now().Before(grace) {
		mu.Lock()
		n := len(delays)
		mu.Unlock()
		if n >= honestSent {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-readDone:
	case <-time.After(30 * time.Second):
	}
	cmd.Wait()
	close(stopRSS)
	<-rssDone

	mu.Lock()
	defer mu.Unlock()
	res := row11Result{Huge: huge, Engines: heavy, HugeBytes: size, Attackers: attackers, AttackCPUs: attackCPU, For: dur.String(), HonestSent: honestSent, HonestPrinted: len(delays),
		AttackSent: int(attackSent.Load()), AttackPrinted: attackLines, PeakRSSMiB: float64(peakKiB.Load()) / 1024}
	if honestSent > 0 {
		res.HonestPct = math.Round(1000*float64(len(delays))/float64(honestSent)) / 10
	}
	res.SlowAt = slowAt
	if len(later) > 0 {
		slices.Sort(later)
		res.LaterP99ms = float64(later[max(int(math.Ceil(0.99*float64(len(later))))-1, 0)].Microseconds()) / 1000
		for _, d := range later {
			if d >= 50*time.Millisecond {
				res.LaterOver50++
			}
		}
	}
	for _, d := range delays {
		if d >= 50*time.Millisecond {
			res.Over50++
		}
	}
	if len(delays) > 0 {
		slices.Sort(delays)
		q := func(p float64) float64 {
			i := int(math.Ceil(p*float64(len(delays)))) - 1
			return float64(delays[max(i, 0)].Microseconds()) / 1000
		}
		res.P50ms, res.P99ms, res.Maxms = q(0.50), q(0.99), q(1)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.TrimSpace(string(b))
	}
	if ps := cmd.ProcessState; ps != nil {
		res.CLICPUs = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.HarnessCPUs = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	var c struct {
		Counters json.RawMessage `json:"counters"`
	}
	if json.Unmarshal([]byte(lastLine), &c) == nil {
		res.Counters = c.Counters
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// heavyResult is the attackers' process's line.
type heavyResult struct {
	Sent  int64   `json:"attack_sent"`
	Bytes int     `json:"huge_message_bytes"`
	CPUs  float64 `json:"cpu_s"`
}

// heavyMain is the attackers' process: engines 1..heavy send huge
// messages to ep back to back for dur, then it prints a heavyResult.
func heavyMain(ep string, dur time.Duration, huge string, heavy int) error {
	var nOut, width int
	if _, err := fmt.Sscanf(huge, "%dx%d", &nOut, &width); err != nil || nOut < 1 || width < 1 {
		return fmt.Errorf("-huge %q: want OUTPUTSxWIDTH", huge)
	}
	if ep == "" || dur <= 0 || dur > 5*time.Minute {
		return errors.New("heavy needs -ep and a -for up to 5 minutes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	n, size, err := runAttackers(ctx, ep, heavy, nOut, width)
	if err != nil {
		return err
	}
	r := heavyResult{Sent: n, Bytes: size}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUs = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// runAttackers sends, from engines 1..heavy each on its own connection,
// valid huge messages to ep back to back until ctx ends. It returns the
// messages sent and one message's size.
func runAttackers(ctx context.Context, ep string, heavy, nOut, width int) (int64, int, error) {
	var sent atomic.Int64
	var wg sync.WaitGroup
	size := 0
	for e := 1; e <= heavy; e++ {
		attack, err := hugeMessage(int64(e), nOut, width)
		if err != nil {
			return 0, 0, err
		}
		size = 0
		for _, f := range attack {
			size += len(f)
		}
		ap, err := pusher(ep)
		if err != nil {
			return 0, 0, err
		}
		defer ap.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if ap.Send(ctx, attack...) == nil {
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return sent.Load(), size, nil
}

// hugeMessage is one valid EngineCoreOutputs of engine with n request
// outputs, each with a float32 pooling output of width elements (an aux
// frame each once it reaches 256 bytes).
func hugeMessage(engine int64, n, width int) ([][]byte, error) {
	data := make([]byte, 4*width)
	for i := 0; i < width; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)/7))
	}
	m := &enginecore.Message{Header: enginecore.Header{EngineIndex: engine, Timestamp: 1}}
	for i := 0; i < n; i++ {
		m.Outputs = append(m.Outputs, enginecore.Output{RequestID: []byte("a-" + strconv.Itoa(i)),
			PoolingOutput: enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{width}, Data: data}})
	}
	var enc enginecore.Encoder
	f := enc.Encode(m)
	out := make([][]byte, len(f))
	for i := range f {
		out[i] = append([]byte(nil), f[i]...)
	}
	if err := enginecore.Decode(out, new(enginecore.Message), &enginecore.Limits{MaxFrames: 4096,
		Scan: decodeguard.Limits{MaxBytes: 64 << 20, MaxElements: 1 << 22}}); err != nil {
		return nil, fmt.Errorf("the attack message does not decode: %w", err)
	}
	return out, nil
}

func rssKiB(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			fs := strings.Fields(l)
			if len(fs) >= 2 {
				n, _ := strconv.ParseInt(fs[1], 10, 64)
				return n
			}
		}
	}
	return 0
}
