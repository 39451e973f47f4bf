// Command kvbaseline measures zmqguard's kvevents.Subscriber side by side
// with a baseline subscriber written the way public Go KV-cache routers
// consume vLLM's KV events: go-zeromq/zmq4 SUB sockets, one goroutine per
// source, github.com/vmihailenco/msgpack/v5 decoding each batch and each
// event into structs.
//
// It lives in its own module so that the main module never depends on
// vmihailenco/msgpack. Publishers run in a child process (zmqguard XPUB
// sockets sending pre-encoded vLLM map-form batches as fast as they can),
// so the CPU time measured (getrusage of this process) is the subscriber's
// alone.
//
// Usage (from bench/kvbaseline):
//
//	go run . -mode throughput -sources 256 -seconds 5 -rounds 2
//	go run . -mode idle -sources 1000
//	go run . -mode replay -batches 10000
//	bench/routerpath -llmd BIN (runs -mode llmd: llm-d-kv-cache's indexer)
//
// Each mode prints one JSON line per measurement and a table on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/zmqguard/zmqguard/bench/internal/kvstream"
	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
)

func main() {
	mode := flag.String("mode", "throughput", "throughput | idle | replay | llmd (bench/routerpath's llm-d variant) | publish (internal)")
	endpoints := flag.String("endpoints", "", "llmd: file of the engines' endpoints, one a line")
	promptFile := flag.String("prompt", "", "llmd: JSON file of the prompt's token ids")
	sources := flag.Int("sources", 256, "publishers")
	seconds := flag.Float64("seconds", 5, "measurement window per round")
	rounds := flag.Int("rounds", 2, "interleaved rounds per implementation")
	batches := flag.Int("batches", 10000, "replay buffer size (replay mode)")
	idle := flag.Bool("idle", false, "publish nothing (publish mode)")
	only := flag.String("impl", "", "measure only this implementation (zmqguard or baseline)")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the measurement to this file")
	flag.Parse()
	onlyImpl = *only
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kvbaseline:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var err error
	switch *mode {
	case "publish":
		err = publish(*sources, *idle)
	case "throughput":
		err = throughput(*sources, *seconds, *rounds)
	case "idle":
		err = idleRSS(*sources)
	case "replay":
		err = replay(*batches)
	case "llmd":
		err = runLLMD(*endpoints, *promptFile)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvbaseline:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// onlyImpl restricts throughput and idle to one implementation.
var onlyImpl string

func impls() []string {
	if onlyImpl != "" {
		return []string{onlyImpl}
	}
	return []string{"zmqguard", "baseline"}
}

// realistic is one vLLM map-form batch: 16 BlockStored events of 4 block
// hashes and 64 token ids (block size 16), plus 4 BlockRemoved.
func realistic(n uint64) ([]byte, int) {
	var evs []kvevents.Event
	for i := uint64(0); i < 16; i++ {
		base := n*64 + i*4
		ev := kvevents.Event{Type: kvevents.BlockStored, BlockSize: 16, Medium: kvevents.Some("GPU"),
			ParentBlockHash: kvevents.Opt[kvevents.Hash]{V: kvevents.IntHash(base * 0x9e3779b97f4a7c15), Valid: i > 0}}
		for j := uint64(0); j < 4; j++ {
			ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash((base+j+1)*0x9e3779b97f4a7c15))
		}
		for j := int64(0); j < 64; j++ {
			ev.TokenIDs = append(ev.TokenIDs, (int64(base)*64+j*7919)%151000)
		}
		evs = append(evs, ev)
	}
	for i := uint64(0); i < 4; i++ {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, Medium: kvevents.Some("GPU"),
			BlockHashes: []kvevents.Hash{kvevents.IntHash(n*0x9e3779b97f4a7c15 + i)}})
	}
	return kvevents.AppendBatch(nil, 1.7e9+float64(n), evs, kvevents.Some[int64](0), true), len(evs)
}

// publish is the child: it binds the XPUBs, prints their endpoints, and
// after "go" on stdin publishes until stdin closes.
func publish(n int, idle bool) error {
	payloads := make([][]byte, 64)
	for i := range payloads {
		payloads[i], _ = realistic(uint64(i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	socks, eps, err := kvstream.Bind(ctx, n, socket.DefaultOptions())
	if err != nil {
		return err
	}
	for _, s := range socks {
		defer s.Close()
	}
	fmt.Println(strings.Join(eps, " "))
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return nil
	}
	var wg sync.WaitGroup
	if !idle {
		for i, s := range socks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := kvstream.Engine{Sock: s, Topic: []byte("kv@pod-" + strconv.Itoa(i) + "@model")}
				for k := uint64(0); ctx.Err() == nil; k++ {
					if e.Send(ctx, payloads[k%64]) != nil {
						return
					}
					if s.Stats().Peers == 0 {
						time.Sleep(time.Millisecond)
					}
					if k%64 == 63 {
						runtime.Gosched()
					}
				}
			}()
		}
	}
	in.ReadString('\n') // until stdin closes
	cancel()
	wg.Wait()
	return nil
}

type child struct {
	cmd   *exec.Cmd
	stdin *os.File
	eps   []string
}

func startPublishers(n int, idle bool) (*child, error) {
	args := []string{"-mode", "publish", "-sources", strconv.Itoa(n)}
	if idle {
		args = append(args, "-idle")
	}
	cmd := exec.Command(os.Args[0], args...)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.Close()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		return nil, fmt.Errorf("publisher child: %w", err)
	}
	return &child{cmd: cmd, stdin: w, eps: strings.Fields(line)}, nil
}

func (c *child) start() { c.stdin.WriteString("go\n") }

func (c *child) stop() {
	c.stdin.Close()
	load.Stop(c.cmd, nil, 10*time.Second)
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

// subscriber is one implementation under test.
type subscriber interface {
	events() uint64
	connected() int
	close()
}

// --- zmqguard ---

type guardSub struct {
	sub    *kvevents.Subscriber
	n      atomic.Uint64
	cancel context.CancelFunc
	done   chan error
}

func newGuardSub(eps []string) (*guardSub, error) {
	g := &guardSub{done: make(chan error, 1)}
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quietLogger(), Topic: "kv@",
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch {
				g.n.Add(uint64(len(u.Batch.Events)))
			}
			return nil
		}})
	if err != nil {
		return nil, err
	}
	for i, ep := range eps {
		if err := sub.Add(kvevents.Source{Name: strconv.Itoa(i), Live: ep}); err != nil {
			return nil, err
		}
	}
	g.sub = sub
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	go func() { g.done <- sub.Run(ctx) }()
	return g, nil
}

func (g *guardSub) events() uint64 { return g.n.Load() }
func (g *guardSub) connected() int { return g.sub.Stats().ConnectedSources }
func (g *guardSub) close()         { g.cancel(); <-g.done }

// --- baseline: zmq4 SUB + vmihailenco/msgpack into structs ---

type baseEvent struct {
	Type            string   `msgpack:"type"`
	BlockHashes     []uint64 `msgpack:"block_hashes"`
	ParentBlockHash *uint64  `msgpack:"parent_block_hash"`
	TokenIDs        []int32  `msgpack:"token_ids"`
	BlockSize       int      `msgpack:"block_size"`
	LoraID          *int     `msgpack:"lora_id"`
	Medium          *string  `msgpack:"medium"`
	LoraName        *string  `msgpack:"lora_name"`
	GroupIdx        *int     `msgpack:"group_idx"`
}

type baseBatch struct {
	_msgpack struct{} `msgpack:",as_array"` //lint:ignore U1000 vmihailenco reads this tag
	TS       float64
	Events   []msgpack.RawMessage
	DPRank   *int
}

type baseSub struct {
	n      atomic.Uint64
	conn   atomic.Int64
	socks  []zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newBaseSub(eps []string) (*baseSub, error) {
	b := &baseSub{}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	for _, ep := range eps {
		s := zmq4.NewSub(ctx)
		if err := s.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
			return nil, err
		}
		if err := s.Dial(ep); err != nil {
			return nil, err
		}
		b.socks = append(b.socks, s)
		b.conn.Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			var batch baseBatch
			var ev baseEvent
			for {
				msg, err := s.Recv()
				if err != nil {
					return
				}
				if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
					continue
				}
				_ = binary.BigEndian.Uint64(msg.Frames[1])
				if err := msgpack.Unmarshal(msg.Frames[2], &batch); err != nil {
					continue
				}
				for _, raw := range batch.Events {
					ev = baseEvent{}
					if err := msgpack.Unmarshal(raw, &ev); err != nil {
						continue
					}
					b.n.Add(1)
				}
			}
		}()
	}
	return b, nil
}

func (b *baseSub) events() uint64 { return b.n.Load() }
func (b *baseSub) connected() int { return int(b.conn.Load()) }
func (b *baseSub) close() {
	b.cancel()
	for _, s := range b.socks {
		s.Close()
	}
	b.wg.Wait()
}

type result struct {
	Impl          string  `json:"impl"`
	Round         int     `json:"round"`
	Sources       int     `json:"sources"`
	Seconds       float64 `json:"seconds"`
	Events        uint64  `json:"events"`
	EventsPerSec  float64 `json:"events_per_sec"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	EventsPerCPUs float64 `json:"events_per_cpu_second"`
	NsCPUPerEvent float64 `json:"ns_cpu_per_event"`
	Goroutines    int     `json:"goroutines"`
}

func measure(impl string, round, n int, seconds float64) (result, error) {
	pubs, err := startPublishers(n, false)
	if err != nil {
		return result{}, err
	}
	defer pubs.stop()
	var s subscriber
	if impl == "zmqguard" {
		s, err = newGuardSub(pubs.eps)
	} else {
		s, err = newBaseSub(pubs.eps)
	}
	if err != nil {
		return result{}, err
	}
	defer s.close()
	time.Sleep(time.Second) // connect, subscribe
	pubs.start()
	time.Sleep(time.Second) // warm up
	e0, c0, t0 := s.events(), cpuSeconds(), time.Now()
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	e1, c1, el := s.events(), cpuSeconds(), time.Since(t0).Seconds()
	r := result{Impl: impl, Round: round, Sources: n, Seconds: el, Events: e1 - e0, CPUSeconds: c1 - c0,
		Goroutines: runtime.NumGoroutine()}
	r.EventsPerSec = float64(r.Events) / el
	if r.CPUSeconds > 0 {
		r.EventsPerCPUs = float64(r.Events) / r.CPUSeconds
	}
	if r.Events > 0 {
		r.NsCPUPerEvent = r.CPUSeconds * 1e9 / float64(r.Events)
	}
	return r, nil
}

func throughput(n int, seconds float64, rounds int) error {
	var all []result
	for round := 1; round <= rounds; round++ {
		for _, impl := range impls() {
			r, err := measure(impl, round, n, seconds)
			if err != nil {
				return err
			}
			line, _ := json.Marshal(r)
			fmt.Println(string(line))
			all = append(all, r)
			runtime.GC()
		}
	}
	fmt.Fprintf(os.Stderr, "%-9s %5s %8s %14s %18s %16s\n", "impl", "round", "sources", "events/s", "events/CPU-second", "CPU ns/event")
	for _, r := range all {
		fmt.Fprintf(os.Stderr, "%-9s %5d %8d %14.0f %18.0f %16.0f\n", r.Impl, r.Round, r.Sources, r.EventsPerSec, r.EventsPerCPUs, r.NsCPUPerEvent)
	}
	return nil
}

// idleRSS follows n idle publishers and reports the RSS growth per source.
func idleRSS(n int) error {
	if onlyImpl == "" {
		// One fresh process per implementation: RSS is not returned to the
		// system between runs.
		for _, impl := range impls() {
			cmd := exec.Command(os.Args[0], "-mode", "idle", "-sources", strconv.Itoa(n), "-impl", impl)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, impl := range impls() {
		pubs, err := startPublishers(n, true)
		if err != nil {
			return err
		}
		runtime.GC()
		before := rssKiB()
		var s subscriber
		if impl == "zmqguard" {
			s, err = newGuardSub(pubs.eps)
		} else {
			s, err = newBaseSub(pubs.eps)
		}
		if err != nil {
			pubs.stop()
			return err
		}
		deadline := time.Now().Add(60 * time.Second)
		for s.connected() < n && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		runtime.GC()
		after := rssKiB()
		out, _ := json.Marshal(map[string]any{"impl": impl, "sources": n, "connected": s.connected(),
			"rss_before_kib": before, "rss_after_kib": after, "kib_per_source": float64(after-before) / float64(n),
			"goroutines": runtime.NumGoroutine()})
		fmt.Println(string(out))
		s.close()
		pubs.stop()
		runtime.GC()
	}
	return nil
}

// replay measures how long a late joiner takes to get a full replay buffer
// of realistic batches back.
func replay(batches int) error {
	pub, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true,
		ReplayEndpoint: "tcp://127.0.0.1:0", BufferSteps: batches + 1, QueueSize: batches + 1, Topic: "kv@p@m", Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer pub.Close()
	for i := 0; i < batches; i++ {
		p, _ := realistic(uint64(i))
		if err := pub.PublishRaw(p); err != nil {
			return err
		}
	}
	for pub.Stats().Published < uint64(batches) {
		time.Sleep(10 * time.Millisecond)
	}
	var got atomic.Uint64
	var first, last atomic.Int64
	sub, err := kvevents.NewSubscriber(kvevents.Config{Logger: quietLogger(), FromStart: true, Topic: "kv@",
		Handler: func(_ context.Context, u kvevents.Update) error {
			if u.Kind == kvevents.UpdateBatch && u.Batch.Replayed {
				if got.Add(1) == 1 {
					first.Store(time.Now().UnixNano())
				}
				last.Store(time.Now().UnixNano())
			}
			return nil
		}})
	if err != nil {
		return err
	}
	sub.Add(kvevents.Source{Live: pub.Endpoint(), Replay: pub.ReplayEndpoint()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	// The first live batch reveals the gap [0, batches); time from then.
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	p, _ := realistic(uint64(batches))
	pub.PublishRaw(p)
	deadline := time.Now().Add(60 * time.Second)
	for got.Load() < uint64(batches) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(t0)
	cancel()
	<-done
	out, _ := json.Marshal(map[string]any{"batches": batches, "replayed": got.Load(), "seconds_from_gap": el.Seconds(),
		"seconds_first_to_last": float64(last.Load()-first.Load()) / 1e9, "lost": sub.Stats().Lost})
	fmt.Println(string(out))
	return nil
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
