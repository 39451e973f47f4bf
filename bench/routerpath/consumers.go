package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/kvstream"
	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
)

// consumer is one implementation under test, following the engines.
type consumer interface {
	// applied is the number of events applied to the index (delivered to
	// the handler for "sub").
	applied() uint64
	// cpu is the CPU time of the consumer's process, every thread.
	cpu() time.Duration
	// memory is the consumer's memory measure in bytes and its name
	// (heap after a GC in process, RSS for a child).
	memory() (int64, string)
	// entries is the number of entries the index holds (0 if unknown).
	entries() int64
	// indexBytes is the index's own count of its arena and table bytes
	// (kvindex BackendStats.Bytes; 0 if unknown).
	indexBytes() int64
	// score scores the prompt every interval for d and returns the
	// latencies (nil if the consumer does not score).
	score(d, interval time.Duration) ([]time.Duration, error)
	close()
}

func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

func heapAfterGC() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// timedScores calls one every interval for d, one goroutine, and returns
// the latencies.
func timedScores(d, interval time.Duration, one func() error) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, int(d/interval)+1)
	end := time.Now().Add(d)
	next := time.Now()
	for time.Now().Before(end) {
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		next = next.Add(interval)
		s := time.Now()
		if err := one(); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(s))
	}
	return lat, nil
}

// --- zmqguard as a library: kvevents.Subscriber → kvindex.Index ---

type libConsumer struct {
	x      *kvindex.Index
	sub    *kvevents.Subscriber
	n      atomic.Uint64
	cancel context.CancelFunc
	done   chan error
	req    kvindex.ScoreRequest
}

// newLib follows eps; with index false (variant "sub") the handler only
// counts events, the subscriber alone.
func newLib(eps []string, capacity int, p []int64, index bool) (*libConsumer, error) {
	c := &libConsumer{done: make(chan error, 1), req: kvindex.ScoreRequest{Model: kvstream.Model, Tokens: p}}
	if index {
		x, err := kvindex.New(kvindex.Config{Capacity: capacity, Model: kvstream.Model, Logger: quiet()})
		if err != nil {
			return nil, err
		}
		c.x = x
	}
	h := func(_ context.Context, u kvevents.Update) error {
		if c.x != nil {
			if err := c.x.Apply(u); err != nil {
				return err
			}
		}
		if u.Kind == kvevents.UpdateBatch && u.Batch != nil {
			c.n.Add(uint64(len(u.Batch.Events)))
		}
		return nil
	}
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quiet(), Topic: "kv@", Handler: h})
	if err != nil {
		return nil, err
	}
	for i, ep := range eps {
		if err := sub.Add(kvevents.Source{Name: kvstream.EngineName(i), Live: ep}); err != nil {
			return nil, err
		}
	}
	c.sub = sub
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() { c.done <- sub.Run(ctx) }()
	return c, nil
}

func (c *libConsumer) applied() uint64         { return c.n.Load() }
func (c *libConsumer) cpu() time.Duration      { return load.ProcessCPU(os.Getpid()) }
func (c *libConsumer) memory() (int64, string) { return heapAfterGC(), "heap" }
func (c *libConsumer) entries() int64 {
	if c.x == nil {
		return 0
	}
	return c.x.Stats().Backend.Entries
}
func (c *libConsumer) indexBytes() int64 {
	if c.x == nil {
		return 0
	}
	return c.x.Stats().Backend.Bytes
}
func (c *libConsumer) score(d, interval time.Duration) ([]time.Duration, error) {
	if c.x == nil {
		return nil, nil
	}
	return timedScores(d, interval, func() error {
		r, err := c.x.Score(c.req)
		if err == nil && len(r.Engines) == 0 {
			err = fmt.Errorf("score found no engine")
		}
		return err
	})
}
func (c *libConsumer) close() {
	c.cancel()
	<-c.done
	if c.x != nil {
		c.x.Close()
	}
}

// --- zmqguard's CLI: a `zmqguard kv-index` process, /score over HTTP ---

type cliConsumer struct {
	cmd    *exec.Cmd
	addr   string
	client *http.Client
	body   []byte
	last   atomic.Uint64
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newCLI(bin string, eps []string, capacity int, p []int64) (*cliConsumer, error) {
	args := []string{"kv-index", "--http", "127.0.0.1:0", "--from-start=false", "--model", kvstream.Model,
		"--capacity", strconv.Itoa(capacity), "--log-format", "json", "--topic", "kv@"}
	for _, ep := range eps {
		args = append(args, "--connect", ep)
	}
	c := &cliConsumer{cmd: exec.Command(bin, args...), stop: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	body, _ := json.Marshal(map[string]any{"tokens": p})
	c.body = body
	errPipe, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	c.cmd.Stdout = io.Discard
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	// The HTTP address is in the log line "kv-index endpoint serving".
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				if a, ok := l["http_addr"].(string); ok {
					select {
					case found <- a:
					default:
					}
				}
			}
		}
	}()
	select {
	case c.addr = <-found:
	case <-time.After(60 * time.Second):
		c.cmd.Process.Kill()
		c.cmd.Wait()
		return nil, fmt.Errorf("kv-index did not log its http_addr in 60 s")
	}
	c.wg.Add(1)
	go c.poll()
	return c, nil
}

// stats reads GET /stats.
func (c *cliConsumer) stats() (events uint64, entries int64, err error) {
	events, entries, _, err = c.stats3()
	return events, entries, err
}

func (c *cliConsumer) indexBytes() int64 {
	_, _, b, _ := c.stats3()
	return b
}

// stats3 reads GET /stats: events applied, entries, index bytes.
func (c *cliConsumer) stats3() (events uint64, entries, bytes int64, err error) {
	resp, err := c.client.Get("http://" + c.addr + "/stats")
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	var s struct {
		Index kvindex.Stats `json:"index"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return 0, 0, 0, err
	}
	return s.Index.Events, s.Index.Backend.Entries, s.Index.Backend.Bytes, nil
}

// poll keeps the applied count fresh (every 50 ms).
func (c *cliConsumer) poll() {
	defer c.wg.Done()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if n, _, err := c.stats(); err == nil {
			c.last.Store(n)
		}
	}
}

func (c *cliConsumer) applied() uint64         { return c.last.Load() }
func (c *cliConsumer) cpu() time.Duration      { return load.ProcessCPU(c.cmd.Process.Pid) }
func (c *cliConsumer) memory() (int64, string) { return rssBytes(c.cmd.Process.Pid), "rss" }
func (c *cliConsumer) entries() int64 {
	_, e, _ := c.stats()
	return e
}
func (c *cliConsumer) score(d, interval time.Duration) ([]time.Duration, error) {
	return timedScores(d, interval, func() error {
		resp, err := c.client.Post("http://"+c.addr+"/score", "application/json", bytes.NewReader(c.body))
		if err != nil {
			return err
		}
		var r struct {
			Best *struct {
				Engine string `json:"engine"`
			} `json:"best"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err == nil && r.Best == nil {
			err = fmt.Errorf("/score found no engine (status %d)", resp.StatusCode)
		}
		return err
	})
}
func (c *cliConsumer) close() {
	close(c.stop)
	c.wg.Wait()
	load.Stop(c.cmd, syscall.SIGTERM, 20*time.Second)
}

// --- llm-d-kv-cache's indexer: the bench/kvbaseline child (-mode llmd) ---
//
// The child prints "applied N" every 10 ms, and answers "mem" with
// "mem HEAP ENTRIES" and "score SECONDS INTERVAL_NS" with
// "scores NS NS ..." (one line).

type llmdConsumer struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	last    atomic.Uint64
	replies chan string
}

func newLLMD(bin string, eps []string, promptFile string) (*llmdConsumer, error) {
	epFile, err := os.CreateTemp("", "routerpath-eps-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(epFile.Name())
	fmt.Fprintln(epFile, strings.Join(eps, "\n"))
	epFile.Close()
	c := &llmdConsumer{cmd: exec.Command(bin, "-mode", "llmd", "-endpoints", epFile.Name(), "-prompt", promptFile),
		replies: make(chan string, 4)}
	c.cmd.Stderr = os.Stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<20), 64<<20)
		once := sync.Once{}
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "applied "):
				n, _ := strconv.ParseUint(l[len("applied "):], 10, 64)
				c.last.Store(n)
				once.Do(func() { close(ready) })
			default:
				c.replies <- l
			}
		}
		close(c.replies)
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		c.cmd.Process.Kill()
		c.cmd.Wait()
		return nil, fmt.Errorf("kvbaseline -mode llmd did not start in 60 s")
	}
	return c, nil
}

func (c *llmdConsumer) ask(cmd string) (string, error) {
	if _, err := fmt.Fprintln(c.stdin, cmd); err != nil {
		return "", err
	}
	select {
	case l, ok := <-c.replies:
		if !ok {
			return "", fmt.Errorf("kvbaseline exited")
		}
		return l, nil
	case <-time.After(5 * time.Minute):
		return "", fmt.Errorf("kvbaseline did not answer %q", cmd)
	}
}

func (c *llmdConsumer) applied() uint64    { return c.last.Load() }
func (c *llmdConsumer) cpu() time.Duration { return load.ProcessCPU(c.cmd.Process.Pid) }
func (c *llmdConsumer) memory() (int64, string) {
	l, err := c.ask("mem")
	if err != nil {
		return 0, "heap"
	}
	f := strings.Fields(l)
	if len(f) < 3 {
		return 0, "heap"
	}
	v, _ := strconv.ParseInt(f[1], 10, 64)
	return v, "heap"
}
func (c *llmdConsumer) entries() int64 {
	l, err := c.ask("mem")
	if err != nil {
		return 0
	}
	f := strings.Fields(l)
	if len(f) < 3 {
		return 0
	}
	v, _ := strconv.ParseInt(f[2], 10, 64)
	return v
}
func (c *llmdConsumer) indexBytes() int64 { return 0 }
func (c *llmdConsumer) score(d, interval time.Duration) ([]time.Duration, error) {
	l, err := c.ask(fmt.Sprintf("score %g %d", d.Seconds(), interval.Nanoseconds()))
	if err != nil {
		return nil, err
	}
	f := strings.Fields(l)
	if len(f) == 0 || f[0] != "scores" {
		return nil, fmt.Errorf("kvbaseline: %s", l)
	}
	lat := make([]time.Duration, 0, len(f)-1)
	for _, s := range f[1:] {
		v, _ := strconv.ParseInt(s, 10, 64)
		lat = append(lat, time.Duration(v))
	}
	return lat, nil
}
func (c *llmdConsumer) close() {
	c.stdin.Close()
	load.Stop(c.cmd, nil, 20*time.Second)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// pct returns the q-quantile of sorted latencies in µs.
func pct(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	i := min(len(lat)-1, int(q*float64(len(lat))))
	return float64(lat[i].Nanoseconds()) / 1e3
}
