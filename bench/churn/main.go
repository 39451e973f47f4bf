// Command churn measures one KV-cache index following a fleet that churns
// (issue 36): --engines publishers (kvevents.Publisher, vLLM's bytes, each
// on its own kernel-chosen loopback ports) are restarted one after the
// other over --roll (a rolling restart of the whole fleet: each restarted
// engine is a new run on new ports, so a new source, and its old run must
// be retired), while one kvevents.Subscriber feeding one in-memory
// kvindex follows them through discovery.File on a sources file the
// engines' process rewrites (by a rename) at each restart.
//
// Usage:
//
//	churn [--engines 1000] [--roll 60s] [--step 1s] [--held 16] [--sample 5s] [--poll 250ms]
//
// The engines run in a child process (this program with --role engines),
// so that what is measured (goroutines, Go heap, RSS) is the index's
// process alone. Every engine publishes one batch per --step: a store of
// one new block and, past --held blocks, the removal of its oldest, and
// it stored 2 blocks of a prompt every engine shares when it started; so
// an exact index holds (held + 2) entries per listed engine and scores the
// shared prompt on exactly the engines the file lists.
//
// Every --sample it prints one JSON line: seconds, goroutines, heap and
// RSS, sources followed, entries, departed, and how far the index is from
// exact against the file at that instant (stale: engines scored that the
// file no longer lists; missing: listed engines not scored). Stale and
// missing are the in-flight lag of the last poll interval while the
// restart rolls. After the roll it waits (at most 2 minutes) until the
// index is exact (no stale, no missing, entries = listed × (held + 2),
// departed = engines) and prints a final line with that wait and the
// peaks.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvevents/discovery"
	"github.com/zmqguard/zmqguard/kvindex"
)

const blockSize = 16

// shared is the prompt every engine stores (2 blocks).
var shared = tokens(1<<40, 2*blockSize)

func tokens(base int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = base + int64(i)
	}
	return out
}

func main() {
	role := flag.String("role", "index", "index (the measured process) or engines (the child)")
	engines := flag.Int("engines", 1000, "engines in the fleet")
	roll := flag.Duration("roll", 60*time.Second, "time over which every engine is restarted once")
	step := flag.Duration("step", time.Second, "each engine publishes one batch per step")
	held := flag.Int("held", 16, "blocks each engine keeps (besides the 2 shared ones)")
	sample := flag.Duration("sample", 5*time.Second, "sampling interval")
	poll := flag.Duration("poll", 250*time.Millisecond, "discovery.File's Interval")
	file := flag.String("file", "", "sources file (engines role; the index role makes one)")
	flag.Parse()
	if *engines < 1 || *roll <= 0 || *step <= 0 || *held < 1 || *sample <= 0 || *poll <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if *role == "engines" {
		runEngines(*file, *engines, *roll, *step, *held)
		return
	}
	runIndex(*engines, *roll, *step, *held, *sample, *poll)
}

// ---- the engines (child process) ----

type eng struct {
	id    int
	run   int
	pub   *kvevents.Publisher
	next  int64   // next block number
	held  []int64 // block numbers held, oldest first
	due   time.Time
	lineC string
}

func startEng(id, run, held int) *eng {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", BufferSteps: 256})
	if err != nil {
		fatal(err)
	}
	e := &eng{id: id, run: run, pub: pub}
	e.lineC = pub.Endpoint() + " " + pub.ReplayEndpoint()
	base := uint64(id)<<32 | uint64(run)<<20
	// The shared prompt, and held blocks of its own at once: an engine
	// holds held + 2 blocks from its first batch on.
	first := kvevents.Event{Type: kvevents.BlockStored, BlockSize: blockSize,
		TokenIDs: tokens(int64(id)<<32|int64(run)<<24|1<<22, held*blockSize)}
	for range held {
		first.BlockHashes = append(first.BlockHashes, e.hash(e.next))
		e.held = append(e.held, e.next)
		e.next++
	}
	_ = pub.Publish(kvevents.Event{Type: kvevents.BlockStored, BlockSize: blockSize, TokenIDs: shared,
		BlockHashes: []kvevents.Hash{kvevents.IntHash(base), kvevents.IntHash(base + 1)}}, first)
	return e
}

// hash of block n of engine e's run.
func (e *eng) hash(n int64) kvevents.Hash {
	return kvevents.IntHash(uint64(e.id)<<32 | uint64(e.run)<<20 | uint64(n+2))
}

// publish stores one new block and removes the oldest past held.
func (e *eng) publish(held int) {
	n := e.next
	e.next++
	evs := []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: blockSize,
		TokenIDs: tokens(int64(e.id)<<32|int64(e.run)<<24|n<<5, blockSize), BlockHashes: []kvevents.Hash{e.hash(n)}}}
	e.held = append(e.held, n)
	if len(e.held) > held {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: []kvevents.Hash{e.hash(e.held[0])}})
		e.held = e.held[1:]
	}
	_ = e.pub.Publish(evs...)
}

func writeFile(path string, es []*eng) {
	var b strings.Builder
	b.WriteString("# churn's engines\n")
	for _, e := range es {
		b.WriteString(e.lineC)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		fatal(err)
	}
}

// runEngines starts the fleet and publishes, says "ready", starts the
// rolling restart on "go" from stdin, saying "restarted N" now and then
// and "done" at the end, and publishes until stdin closes.
func runEngines(path string, n int, roll, step time.Duration, held int) {
	es := make([]*eng, n)
	start := time.Now()
	for i := range es {
		es[i] = startEng(i, 0, held)
		es[i].due = start.Add(time.Duration(i) * step / time.Duration(n))
	}
	writeFile(path, es)
	fmt.Println("ready")
	goCh, stdinClosed := make(chan struct{}), make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if in.Text() == "go" {
				close(goCh)
			}
		}
		close(stdinClosed)
	}()
	var t0 time.Time
	rolling := false
	restarted := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stdinClosed:
			for _, e := range es {
				e.pub.Close()
			}
			return
		case <-goCh:
			goCh = nil
			rolling, t0 = true, time.Now()
		case now := <-tick.C:
			for _, e := range es {
				if !now.Before(e.due) {
					e.publish(held)
					e.due = e.due.Add(step)
				}
			}
			changed := false
			for rolling && restarted < n && now.Sub(t0) >= time.Duration(restarted)*roll/time.Duration(n) {
				old := es[restarted]
				old.pub.Close()
				ne := startEng(old.id, old.run+1, held)
				ne.due = old.due
				es[restarted] = ne
				restarted++
				changed = true
				if restarted%100 == 0 || restarted == n {
					fmt.Println("restarted", restarted)
				}
			}
			if changed {
				writeFile(path, es)
				if restarted == n {
					fmt.Println("done")
				}
			}
		}
	}
}

// ---- the index (measured process) ----

type sampleLine struct {
	Phase      string  `json:"phase"`
	Seconds    float64 `json:"seconds"`
	Restarted  int     `json:"restarted"`
	Goroutines int     `json:"goroutines"`
	HeapMiB    float64 `json:"heap_inuse_mib"`
	RSSMiB     float64 `json:"rss_mib"`
	Sources    int     `json:"sources"`
	Listed     int     `json:"listed"`
	Entries    int64   `json:"entries"`
	Engines    int64   `json:"backend_engines"`
	Departed   uint64  `json:"departed"`
	Stale      int     `json:"stale"`
	Missing    int     `json:"missing"`
	Exact      bool    `json:"exact"`
}

func runIndex(n int, roll, step time.Duration, held int, sampleEvery, poll time.Duration) {
	dir, err := os.MkdirTemp("", "churn")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "engines")
	self, err := os.Executable()
	if err != nil {
		fatal(err)
	}
	child := exec.Command(self, "--role", "engines", "--file", path, "--engines", strconv.Itoa(n), "--roll", roll.String(),
		"--step", step.String(), "--held", strconv.Itoa(held))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		fatal(err)
	}
	if err := child.Start(); err != nil {
		fatal(err)
	}
	defer func() {
		stdin.Close()
		child.Wait()
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != "ready" {
		fatal(fmt.Errorf("engines: %q", l))
	}

	x, err := kvindex.New(kvindex.Config{BlockSize: blockSize, Capacity: 4 * n * (held + 2)})
	if err != nil {
		fatal(err)
	}
	defer x.Close()
	sub, err := kvevents.NewSubscriber(kvevents.Config{FromStart: true,
		Handler: func(_ context.Context, u kvevents.Update) error { return x.Apply(u) }})
	if err != nil {
		fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- sub.Run(ctx) }()
	followDone := make(chan error, 1)
	go func() { followDone <- discovery.Follow(ctx, sub, discovery.File{Path: path, Interval: poll}) }()

	t0 := time.Now()
	restarted := 0
	var peak sampleLine
	take := func(phase string) sampleLine {
		s := measure(x, sub, path, held, n)
		s.Phase, s.Seconds, s.Restarted = phase, time.Since(t0).Seconds(), restarted
		peak.Goroutines = max(peak.Goroutines, s.Goroutines)
		peak.HeapMiB = max(peak.HeapMiB, s.HeapMiB)
		peak.RSSMiB = max(peak.RSSMiB, s.RSSMiB)
		peak.Sources = max(peak.Sources, s.Sources)
		peak.Entries = max(peak.Entries, s.Entries)
		peak.Engines = max(peak.Engines, s.Engines)
		return s
	}
	// Join: wait until the index is exact over the first runs.
	exactBy := func(phase string, limit time.Duration, departed uint64) (sampleLine, bool) {
		deadline := time.Now().Add(limit)
		next := time.Now()
		for {
			s := take(phase)
			if s.Exact && s.Departed == departed {
				return s, true
			}
			if time.Now().After(deadline) {
				return s, false
			}
			if time.Now().After(next) {
				printJSON(s)
				next = time.Now().Add(sampleEvery)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	s, ok := exactBy("join", 3*time.Minute, 0)
	joinSecs := s.Seconds
	printJSON(s)
	if !ok {
		fatal(fmt.Errorf("the index was not exact over the first runs within 3 minutes"))
	}
	base := take("before_roll")
	printJSON(base)
	fmt.Fprintln(stdin, "go")
	t1 := time.Now()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	done := false
	for !done {
		select {
		case l, ok := <-lines:
			if !ok {
				fatal(fmt.Errorf("the engines' process ended"))
			}
			if f := strings.Fields(l); len(f) == 2 && f[0] == "restarted" {
				restarted, _ = strconv.Atoi(f[1])
			}
			if l == "done" {
				done = true
			}
		case <-tick.C:
			printJSON(take("roll"))
		}
	}
	rollSecs := time.Since(t1).Seconds()
	t2 := time.Now()
	s, ok = exactBy("settle", 2*time.Minute, uint64(n))
	s.Phase = "final"
	printJSON(s)
	printJSON(struct {
		Phase         string     `json:"phase"`
		Engines       int        `json:"engines"`
		Held          int        `json:"held"`
		Step          string     `json:"step"`
		JoinSeconds   float64    `json:"join_seconds"`
		RollSeconds   float64    `json:"roll_seconds"`
		SettleSeconds float64    `json:"settle_seconds"`
		ExactAfter    bool       `json:"exact_after_roll"`
		Before        sampleLine `json:"before_roll"`
		Peak          sampleLine `json:"peak"`
		CPUs          int        `json:"cpus"`
		Load          string     `json:"loadavg"`
	}{"summary", n, held, step.String(), joinSecs, rollSecs, time.Since(t2).Seconds(), ok, base, peak, runtime.NumCPU(), loadavg()})
	cancel()
	<-followDone
	<-runDone
	if !ok {
		os.Exit(1)
	}
}

// measure samples the process and compares the index with the file.
func measure(x *kvindex.Index, sub *kvevents.Subscriber, path string, held, n int) sampleLine {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := sampleLine{Goroutines: runtime.NumGoroutine(), HeapMiB: float64(ms.HeapInuse) / (1 << 20), RSSMiB: rssMiB()}
	s.Sources = len(sub.Stats().Sources)
	data, err := os.ReadFile(path)
	if err != nil {
		fatal(err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			listed[f[0]] = true
		}
	}
	s.Listed = len(listed)
	r, err := x.Score(kvindex.ScoreRequest{Tokens: shared})
	if err != nil {
		fatal(err)
	}
	scored := map[string]bool{}
	for _, e := range r.Engines {
		if e.Blocks == 2 {
			scored[e.Engine] = true
		}
		if !listed[e.Engine] {
			s.Stale++
		}
	}
	for name := range listed {
		if !scored[name] {
			s.Missing++
		}
	}
	st := x.Stats()
	s.Entries, s.Engines, s.Departed = st.Backend.Entries, st.Backend.Engines, st.Departed
	s.Exact = s.Stale == 0 && s.Missing == 0 && s.Listed == n && s.Entries == int64(n*(held+2))
	return s
}

func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "churn:", err)
	os.Exit(1)
}
