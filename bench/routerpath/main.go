// Command routerpath measures a KV-aware router's path end to end (issue
// 41): N engines publishing realistic vLLM KV-event batches over loopback
// into a KV-cache index, socket to applied, while the router scores a
// prompt. The same stream, in the same run, goes to each variant:
//
//   - lib: zmqguard as a library, kvevents.Subscriber → kvindex.Index in
//     this process, Score called in process;
//   - cli: zmqguard's CLI, a `zmqguard kv-index` process (-zmqguard BIN),
//     POST /score over loopback HTTP (its /stats polled every 50 ms for
//     the applied count, which the process's CPU includes);
//   - llmd: llm-d-kv-cache v0.8.1's indexer as a library (its
//     SubscriberManager's zmq4 subscribers, its event Pool with the vLLM
//     adapter, its in-memory kvblock index and chunked token processor,
//     Indexer.ScoreTokens), run by the bench/kvbaseline module (-llmd BIN)
//     so that nothing of llm-d reaches this module's go.mod;
//   - sub: zmqguard's subscriber alone (the handler counts; no index).
//
// Each variant gets a fresh publisher child (the engines, one XPUB each,
// in another process so that CPU is counted apart) replaying the same
// deterministic stream: a prefill to -entries entries (32 engines holding
// prefixes of the 8k-token prompt), then the steady stream (stores of new
// blocks and removals of the oldest, so the entry count holds). Phases:
//
//  1. prefill, until the consumer applied every prefill event; memory per
//     entry = (memory after − before) ÷ entries;
//  2. saturate, -duration: the publishers send as fast as the consumer
//     applies (a window of -window events in flight, so nothing is
//     dropped): events applied per second and per CPU second of the
//     consumer's process (every thread: its rate on one core);
//  3. quiet, -duration ÷ 2: the prompt scored every -score-every with
//     nothing ingested (the machine's own latency: its other load, the
//     scheduler, the GC);
//  4. mixed, -duration: the publishers at -rate events/s while one
//     goroutine scores the prompt every -score-every: latency p50, p99,
//     p999, and the ingest rate the consumer kept.
//
// It prints one JSON line per variant and round, then a table, with the
// load average at each phase's start.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/kvstream"
	"github.com/zmqguard/zmqguard/bench/internal/load"
)

type result struct {
	Variant            string  `json:"variant"`
	Round              int     `json:"round"`
	Engines            int     `json:"engines"`
	Entries            int64   `json:"entries"`
	PrefillEvents      int64   `json:"prefill_events"`
	PrefillSeconds     float64 `json:"prefill_seconds"`
	MemoryKind         string  `json:"memory_kind"`
	BytesPerEntry      float64 `json:"bytes_per_entry"`
	IndexBytesPerEntry float64 `json:"index_bytes_per_entry,omitempty"`
	Load1Prefill       float64 `json:"load1_prefill"`

	SatEventsPerSec    float64 `json:"sat_events_per_sec"`
	SatEventsPerCPUSec float64 `json:"sat_events_per_cpu_sec"`
	SatCPUNsPerEvent   float64 `json:"sat_cpu_ns_per_event"`
	Load1Saturate      float64 `json:"load1_saturate"`

	MixTargetRate    float64 `json:"mix_target_events_per_sec"`
	MixEventsPerSec  float64 `json:"mix_events_per_sec"`
	MixCPUNsPerEvent float64 `json:"mix_cpu_ns_per_event"`
	Scores           int     `json:"scores"`
	ScoreP50us       float64 `json:"score_p50_us"`
	ScoreP99us       float64 `json:"score_p99_us"`
	ScoreP999us      float64 `json:"score_p999_us"`
	ScoreMaxus       float64 `json:"score_max_us"`
	Load1Mixed       float64 `json:"load1_mixed"`
	QuietP50us       float64 `json:"quiet_score_p50_us"`
	QuietP99us       float64 `json:"quiet_score_p99_us"`
	QuietP999us      float64 `json:"quiet_score_p999_us"`
	Load1Quiet       float64 `json:"load1_quiet"`
	Error            string  `json:"error,omitempty"`
}

func main() {
	mode := flag.String("mode", "run", "run | publish (the engines' child)")
	engines := flag.Int("engines", 100, "engines publishing")
	entries := flag.Int("entries", 1_000_000, "entries in the index after the prefill")
	duration := flag.Duration("duration", 5*time.Second, "length of the saturate and of the mixed phase")
	rounds := flag.Int("rounds", 1, "rounds (variants interleaved)")
	variants := flag.String("variants", "lib,cli,llmd,sub", "variants, comma-separated: lib, cli, llmd, sub")
	zmqguardBin := flag.String("zmqguard", "", "the zmqguard binary (variant cli)")
	llmdBin := flag.String("llmd", "", "the bench/kvbaseline binary (variant llmd)")
	rate := flag.Float64("rate", 1_000_000, "events/s the engines send in the mixed phase")
	scoreEvery := flag.Duration("score-every", time.Millisecond, "interval between scores in the mixed phase")
	window := flag.Int("window", 400_000, "events in flight (sent, not yet applied) at most")
	workers := flag.Int("workers", 4, "publisher goroutines")
	holders := flag.Int("holders", 32, "engines holding a prefix of the prompt")
	promptBlocks := flag.Int("prompt-blocks", 512, "blocks of 16 tokens in the scored prompt")
	jsonOnly := flag.Bool("json", false, "print the JSON lines only, no table")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the lib or sub variant's saturate phase to this file")
	flag.StringVar(&memProfile, "memprofile", "", "write an allocation profile (every 4 KiB) of the lib or sub variant's saturate phase to this file")
	flag.Parse()

	if *mode == "publish" {
		if err := publish(*engines, *entries, *holders, *promptBlocks, *window, *workers); err != nil {
			fmt.Fprintln(os.Stderr, "routerpath publish:", err)
			os.Exit(1)
		}
		return
	}
	p := kvstream.Prompt(*promptBlocks)
	pf, err := os.CreateTemp("", "routerpath-prompt-*.json")
	if err != nil {
		fail(err)
	}
	defer os.Remove(pf.Name())
	json.NewEncoder(pf).Encode(p)
	pf.Close()

	capacity := *entries + *entries/8 + 1<<16
	var all []result
	loadStart := strings.TrimSpace(readFile("/proc/loadavg"))
	for r := 1; r <= *rounds; r++ {
		for _, v := range strings.Split(*variants, ",") {
			res := result{Variant: v, Round: r, Engines: *engines, MixTargetRate: *rate}
			if err := measure(&res, v, *engines, *entries, capacity, p, pf.Name(), *duration, *rate, *scoreEvery,
				*window, *workers, *holders, *promptBlocks, *zmqguardBin, *llmdBin); err != nil {
				res.Error = err.Error()
				fmt.Fprintf(os.Stderr, "routerpath: %s round %d: %v\n", v, r, err)
			}
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			all = append(all, res)
			runtime.GC()
		}
	}
	if *jsonOnly {
		return
	}
	fmt.Printf("\nrouterpath -engines %d -entries %d -duration %s -rate %.0f -score-every %s, %d CPUs, load average at the start %s, at the end %s\n\n",
		*engines, *entries, *duration, *rate, *scoreEvery, runtime.NumCPU(), loadStart, strings.TrimSpace(readFile("/proc/loadavg")))
	fmt.Println("| variant | round | entries | B/entry (index's own) | saturate events/s | events/CPU-s | CPU ns/event | mixed events/s (target) | score p50 / p99 / p999 µs while ingesting | … with no ingest | load1 prefill/sat/quiet/mixed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range all {
		if x.Error != "" {
			fmt.Printf("| %s | %d | error: %s |||||||||\n", x.Variant, x.Round, x.Error)
			continue
		}
		fmt.Printf("| %s | %d | %d | %.1f %s (%.1f) | %.0f | %.0f | %.0f | %.0f (%.0f) | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f / %.1f |\n",
			x.Variant, x.Round, x.Entries, x.BytesPerEntry, x.MemoryKind, x.IndexBytesPerEntry, x.SatEventsPerSec, x.SatEventsPerCPUSec,
			x.SatCPUNsPerEvent, x.MixEventsPerSec, x.MixTargetRate, x.ScoreP50us, x.ScoreP99us, x.ScoreP999us,
			x.QuietP50us, x.QuietP99us, x.QuietP999us, x.Load1Prefill, x.Load1Saturate, x.Load1Quiet, x.Load1Mixed)
	}
}

var cpuProfile, memProfile string

// startProfiles starts the profiles asked for, in process (lib, sub).
func startProfiles(variant string) (stop func()) {
	if variant != "lib" && variant != "sub" {
		return func() {}
	}
	var cpuF *os.File
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			cpuF = f
		}
	}
	if memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	return func() {
		if cpuF != nil {
			pprof.StopCPUProfile()
			cpuF.Close()
		}
		if memProfile != "" {
			if f, err := os.Create(memProfile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}
	}
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "routerpath:", err)
	os.Exit(1)
}

// pubChild is the publisher child.
type pubChild struct {
	cmd   *exec.Cmd
	inMu  sync.Mutex // the acknowledging goroutine and measure write
	in    *bufio.Writer
	inF   interface{ Close() error }
	lines chan string
	eps   []string
}

func startPublisher(engines, entries, holders, promptBlocks, window, workers int) (*pubChild, error) {
	cmd := exec.Command(os.Args[0], "-mode", "publish", "-engines", strconv.Itoa(engines), "-entries", strconv.Itoa(entries),
		"-holders", strconv.Itoa(holders), "-prompt-blocks", strconv.Itoa(promptBlocks), "-window", strconv.Itoa(window),
		"-workers", strconv.Itoa(workers))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &pubChild{cmd: cmd, in: bufio.NewWriter(in), inF: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<20), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	select {
	case l, ok := <-c.lines:
		if !ok {
			return nil, fmt.Errorf("publisher child exited")
		}
		c.eps = strings.Fields(l)
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("publisher child did not start")
	}
	return c, nil
}

func (c *pubChild) send(format string, a ...any) {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	fmt.Fprintf(c.in, format+"\n", a...)
	c.in.Flush()
}

func (c *pubChild) expect(prefix string, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("publisher child exited")
		}
		if !strings.HasPrefix(l, prefix) {
			return "", fmt.Errorf("publisher child said %q, want %q", l, prefix)
		}
		return strings.TrimSpace(l[len(prefix):]), nil
	case <-time.After(timeout):
		return "", fmt.Errorf("publisher child did not say %q in %s", prefix, timeout)
	}
}

func (c *pubChild) stop() {
	c.inF.Close()
	load.Stop(c.cmd, nil, 20*time.Second)
}

func measure(res *result, variant string, engines, entries, capacity int, p []int64, promptFile string,
	duration time.Duration, rate float64, scoreEvery time.Duration, window, workers, holders, promptBlocks int,
	zmqguardBin, llmdBin string) error {
	pub, err := startPublisher(engines, entries, holders, promptBlocks, window, workers)
	if err != nil {
		return err
	}
	defer pub.stop()
	mem0 := heapAfterGC()
	var c consumer
	switch variant {
	case "lib", "sub":
		c, err = newLib(pub.eps, capacity, p, variant == "lib")
	case "cli":
		if zmqguardBin == "" {
			return fmt.Errorf("variant cli needs -zmqguard")
		}
		c, err = newCLI(zmqguardBin, pub.eps, capacity, p)
	case "llmd":
		if llmdBin == "" {
			return fmt.Errorf("variant llmd needs -llmd")
		}
		c, err = newLLMD(llmdBin, pub.eps, promptFile)
	default:
		return fmt.Errorf("unknown variant %q", variant)
	}
	if err != nil {
		return err
	}
	defer c.close()
	if variant != "lib" && variant != "sub" {
		mem0, _ = c.memory()
	}
	// Acknowledge what the consumer applied, for the publisher's window.
	stopAck := make(chan struct{})
	ackDone := make(chan struct{})
	go func() {
		defer close(ackDone)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopAck:
				return
			case <-t.C:
				pub.send("ack %d", c.applied())
			}
		}
	}()
	defer func() { close(stopAck); <-ackDone }()

	// 1. prefill
	res.Load1Prefill = load.Load1()
	t0 := time.Now()
	pub.send("prefill")
	s, err := pub.expect("prefilled ", 10*time.Minute)
	if err != nil {
		return err
	}
	res.PrefillEvents, _ = strconv.ParseInt(s, 10, 64)
	if err := waitApplied(c, uint64(res.PrefillEvents), 10*time.Minute); err != nil {
		return err
	}
	res.PrefillSeconds = time.Since(t0).Seconds()
	// Let the sockets give their grown read buffers back (after one to
	// two idle seconds) and the RSS settle.
	time.Sleep(3 * time.Second)
	mem1, kind := c.memory()
	res.MemoryKind = kind
	res.Entries = c.entries()
	if res.Entries > 0 {
		res.BytesPerEntry = float64(mem1-mem0) / float64(res.Entries)
		res.IndexBytesPerEntry = float64(c.indexBytes()) / float64(res.Entries)
	}

	// 2. saturate
	res.Load1Saturate = load.Load1()
	pub.send("run 0")
	time.Sleep(500 * time.Millisecond)
	stopProf := startProfiles(variant)
	e0, c0, w0 := c.applied(), c.cpu(), time.Now()
	time.Sleep(duration)
	e1, c1, wall := c.applied(), c.cpu(), time.Since(w0)
	stopProf()
	pub.send("stop")
	sent, err := pub.expect("stopped ", time.Minute)
	if err != nil {
		return err
	}
	n, _ := strconv.ParseUint(sent, 10, 64)
	if err := waitApplied(c, n, 5*time.Minute); err != nil {
		return err
	}
	res.SatEventsPerSec = float64(e1-e0) / wall.Seconds()
	if cpu := (c1 - c0).Seconds(); cpu > 0 {
		res.SatEventsPerCPUSec = float64(e1-e0) / cpu
		res.SatCPUNsPerEvent = cpu * 1e9 / float64(e1-e0)
	}
	if variant == "sub" {
		return nil
	}

	// 3. quiet: the same scoring with nothing ingested, for the machine's
	// own latency (its other load, the scheduler, the GC) apart from the
	// ingest's.
	res.Load1Quiet = load.Load1()
	lat, err := c.score(duration/2, scoreEvery)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	res.QuietP50us, res.QuietP99us, res.QuietP999us = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)

	// 4. mixed
	res.Load1Mixed = load.Load1()
	pub.send("run %g", rate)
	time.Sleep(500 * time.Millisecond)
	e0, c0, w0 = c.applied(), c.cpu(), time.Now()
	lat, err = c.score(duration, scoreEvery)
	e1, c1, wall = c.applied(), c.cpu(), time.Since(w0)
	pub.send("stop")
	if _, err2 := pub.expect("stopped ", time.Minute); err2 != nil && err == nil {
		err = err2
	}
	if err != nil {
		return err
	}
	res.MixEventsPerSec = float64(e1-e0) / wall.Seconds()
	if e1 > e0 {
		res.MixCPUNsPerEvent = (c1 - c0).Seconds() * 1e9 / float64(e1-e0)
	}
	slices.Sort(lat)
	res.Scores = len(lat)
	res.ScoreP50us, res.ScoreP99us, res.ScoreP999us = pct(lat, 0.5), pct(lat, 0.99), pct(lat, 0.999)
	if len(lat) > 0 {
		res.ScoreMaxus = pct(lat, 1)
	}
	return nil
}

func waitApplied(c consumer, n uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last, moved := c.applied(), time.Now()
	for c.applied() < n {
		if now := c.applied(); now != last {
			last, moved = now, time.Now()
		}
		if time.Now().After(deadline) || time.Since(moved) > 30*time.Second {
			return fmt.Errorf("%d of %d events applied (none for %s, %s in all)", c.applied(), n,
				time.Since(moved).Round(time.Second), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}
