// Command replicas measures kv-index's shared ingest (issue 41): R
// `zmqguard kv-index --share-ingest` processes on one redis-server split E
// engines by their writer leases, and the same stream goes to them for
// each R in -replicas. Per R it prints one JSON line: the split (engines
// each replica follows), the events applied per second across the
// replicas, each replica's CPU per event, and redis-server's. -mode lease
// runs the mode before issue 41 instead (--redis-lease: every replica
// follows every engine, the lease holder writes, the others' batches are
// refused): events are then the stream's, counted once (the slowest
// replica's count).
//
// The engines are kvevents.Publishers in this process (one XPUB each,
// vLLM's array form); they send as fast as the replicas apply, with at
// most -window events sent and not yet applied (the replicas' /stats
// polled every 50 ms; that polling is in their CPU), so nothing is
// dropped. Each batch is 16 events: 8 BlockStored of 2 new blocks chained
// to the engine's previous one, 8 BlockRemoved of its 2 oldest once it
// holds -hold blocks.
//
//	go build -o /tmp/rb/ ./bench/replicas ./cmd/zmqguard
//	/tmp/rb/replicas -zmqguard /tmp/rb/zmqguard -engines 8 -replicas 1,2,4 -duration 10s
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/bench/internal/load"
	"github.com/zmqguard/zmqguard/internal/ref/kvmodel"
	"github.com/zmqguard/zmqguard/kvevents"
)

// result is one R's JSON line.
type result struct {
	Mode          string    `json:"mode"`
	Replicas      int       `json:"replicas"`
	Engines       int       `json:"engines"`
	Split         []int     `json:"split"`
	Seconds       float64   `json:"seconds"`
	Events        uint64    `json:"events"`
	EventsPerSec  float64   `json:"events_per_sec"`
	ReplicaEvents []uint64  `json:"replica_events"`
	ReplicaCPUSec []float64 `json:"replica_cpu_sec"`
	ReplicaCPUNs  []float64 `json:"replica_cpu_ns_per_event"`
	ReplicasCPUNs float64   `json:"replicas_cpu_ns_per_event"`
	// ReplicaIdleCPU is each replica's CPU seconds per second with nothing
	// sent (polled as in the measurement); ReplicasNetCPUNs the replicas'
	// CPU per event with that idle rate taken out.
	ReplicaIdleCPU   []float64 `json:"replica_idle_cpu_per_sec"`
	ReplicasNetCPUNs float64   `json:"replicas_net_cpu_ns_per_event"`
	RedisCPUSec      float64   `json:"redis_cpu_sec"`
	RedisCPUNs       float64   `json:"redis_cpu_ns_per_event"`
	Load1Start       float64   `json:"load1_start"`
	Load1End         float64   `json:"load1_end"`
	SettleSeconds    float64   `json:"settle_seconds"`
	MaxPerReplica    int       `json:"max_per_replica"`
	SplitUnchanged   bool      `json:"split_unchanged"`
	// TakeoverSeconds: with 2 replicas or more, the first is killed
	// (SIGKILL) after the measurement; the time until the others follow
	// every engine again.
	TakeoverSeconds float64 `json:"takeover_seconds,omitempty"`
}

func main() {
	bin := flag.String("zmqguard", "", "the zmqguard binary (required)")
	redisBin := flag.String("redis-server", "redis-server", "the redis-server binary")
	engines := flag.Int("engines", 8, "engines (publishers)")
	replicas := flag.String("replicas", "1,2,4", "replica counts to run, comma-separated")
	duration := flag.Duration("duration", 10*time.Second, "measured time per replica count")
	window := flag.Int("window", 16000, "most events sent and not yet applied")
	hold := flag.Int("hold", 512, "blocks each engine holds before it removes its oldest")
	ttl := flag.Duration("lease-ttl", 2*time.Second, "--redis-lease-ttl of the replicas")
	idle := flag.Duration("idle", 3*time.Second, "idle phase before the measurement (the replicas' CPU with nothing sent)")
	mode := flag.String("mode", "share", "share (--share-ingest) or lease (--redis-lease: every replica follows every engine)")
	flag.Parse()
	if *bin == "" {
		log.Fatal("-zmqguard BIN is required")
	}
	for _, f := range strings.Split(*replicas, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 1 {
			log.Fatalf("-replicas: %q is not a count", f)
		}
		if *mode != "share" && *mode != "lease" {
			log.Fatalf("-mode %q: want share or lease", *mode)
		}
		res, err := run(*bin, *redisBin, *mode, *engines, r, *duration, *idle, *window, *hold, *ttl)
		if err != nil {
			log.Fatalf("%d replicas: %v", r, err)
		}
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
}

// replica is one kv-index process.
type replica struct {
	cmd  *exec.Cmd
	addr string
}

// replicaStats is what the bench reads of a replica's /stats.
type replicaStats struct {
	Total struct {
		Events uint64 `json:"events"`
	} `json:"total"`
	Share struct {
		Following []string `json:"following"`
	} `json:"share"`
}

var httpc = &http.Client{Timeout: 5 * time.Second}

func (r *replica) stats() (replicaStats, error) {
	var st replicaStats
	resp, err := httpc.Get("http://" + r.addr + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func startRedis(bin, dir string) (*exec.Cmd, string, error) {
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--databases", "1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return cmd, "unix://" + sock, nil
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	return nil, "", errors.New("redis-server did not listen within 10s")
}

func startReplica(bin, redisURL string, share bool, engines []string, ttl time.Duration) (*replica, error) {
	mode := "--redis-lease"
	if share {
		mode = "--share-ingest"
	}
	args := []string{"kv-index", "--http", "127.0.0.1:0", "--redis", redisURL, mode,
		"--redis-lease-ttl", ttl.String(), "--from-start=false", "--log-format", "json"}
	for _, e := range engines {
		args = append(args, "--connect", e)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "kv-index endpoint serving" && !sent {
				a, _ := m["http_addr"].(string)
				addr <- a
				sent = true
			}
		}
	}()
	select {
	case a := <-addr:
		return &replica{cmd: cmd, addr: a}, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("kv-index did not log its http_addr within 30s")
	}
}

// engine is one publisher and its stream state.
type engine struct {
	pub  *kvevents.Publisher
	next uint64   // next block hash
	held []uint64 // blocks held, oldest first
}

// batch returns the engine's next 16 events.
func (e *engine) batch(hold int) []kvevents.Event {
	evs := make([]kvevents.Event, 0, 16)
	for range 8 {
		parent := int64(-1)
		if len(e.held) > 0 {
			parent = int64(e.held[len(e.held)-1])
		}
		hs := []uint64{e.next, e.next + 1}
		e.next += 2
		evs = append(evs, kvmodel.Store(hs, parent, kvmodel.Tokens(int(e.next), 32), 16, "GPU", 0))
		e.held = append(e.held, hs...)
	}
	for range 8 {
		if len(e.held) < hold+2 {
			break
		}
		evs = append(evs, kvmodel.Remove(e.held[:2], "GPU", 0))
		e.held = e.held[2:]
	}
	return evs
}

func run(bin, redisBin, mode string, nEngines, nReplicas int, duration, idle time.Duration, window, hold int, ttl time.Duration) (res result, err error) {
	share := mode == "share"
	res = result{Mode: mode, Replicas: nReplicas, Engines: nEngines, Load1Start: load.Load1()}
	dir, err := os.MkdirTemp("", "replicas-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	rcmd, url, err := startRedis(redisBin, dir)
	if err != nil {
		return res, err
	}
	defer func() { rcmd.Process.Kill(); rcmd.Wait() }()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var es []*engine
	var names []string
	for i := range nEngines {
		p, err := kvevents.NewPublisher(kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet})
		if err != nil {
			return res, err
		}
		defer p.Close()
		es = append(es, &engine{pub: p, next: uint64(i+1) << 40})
		names = append(names, p.Endpoint())
	}
	var rs []*replica
	defer func() {
		for _, r := range rs {
			load.Stop(r.cmd, syscall.SIGTERM, 20*time.Second)
		}
	}()
	t0 := time.Now()
	for range nReplicas {
		r, err := startReplica(bin, url, share, names, ttl)
		if err != nil {
			return res, err
		}
		rs = append(rs, r)
	}
	// Settled: every engine followed by exactly one replica, each at most
	// its share; then every engine's subscription delivers.
	res.MaxPerReplica = (nEngines + nReplicas - 1) / nReplicas
	maxPer := res.MaxPerReplica
	split := func() ([]int, bool) {
		if !share {
			return nil, true
		}
		seen := map[string]int{}
		var sizes []int
		for _, r := range rs {
			st, err := r.stats()
			if err != nil {
				return nil, false
			}
			sizes = append(sizes, len(st.Share.Following))
			for _, e := range st.Share.Following {
				seen[e]++
			}
		}
		if len(seen) != nEngines {
			return sizes, false
		}
		for _, n := range seen {
			if n != 1 {
				return sizes, false
			}
		}
		return sizes, slices.Max(sizes) <= maxPer
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if sizes, ok := split(); ok {
			res.Split = sizes
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("the replicas did not settle on a split within 60s")
		}
	}
	res.SettleSeconds = time.Since(t0).Seconds()
	applied := func() (uint64, []uint64) {
		var sum uint64
		var per []uint64
		for _, r := range rs {
			st, _ := r.stats()
			sum += st.Total.Events
			per = append(per, st.Total.Events)
		}
		if !share { // every replica gets every event: the slowest's count
			return slices.Min(per), per
		}
		return sum, per
	}
	// Warm up: each engine sends until the replicas have applied events of
	// all (PUB drops what it sends before the subscription arrives).
	for deadline := time.Now().Add(30 * time.Second); ; {
		before, _ := applied()
		for _, e := range es {
			e.pub.Publish(e.batch(hold)...)
		}
		time.Sleep(100 * time.Millisecond)
		after, _ := applied()
		if after >= before+uint64(16*nEngines) {
			break
		}
		if time.Now().After(deadline) {
			return res, errors.New("warm-up: the replicas did not apply every engine's batch within 30s")
		}
	}
	time.Sleep(500 * time.Millisecond) // what the warm-up sent, applied
	// Idle: the replicas' CPU with nothing sent, /stats polled as below
	// (the rounds, the runtime, the polling): subtracted in the net
	// figures.
	idle0 := make([]time.Duration, len(rs))
	for i, r := range rs {
		idle0[i] = load.ProcessCPU(r.cmd.Process.Pid)
	}
	idleStart := time.Now()
	for time.Since(idleStart) < idle {
		applied()
		time.Sleep(50 * time.Millisecond)
	}
	idleSec := time.Since(idleStart).Seconds()
	for i, r := range rs {
		res.ReplicaIdleCPU = append(res.ReplicaIdleCPU, (load.ProcessCPU(r.cmd.Process.Pid)-idle0[i]).Seconds()/idleSec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var appliedNow atomic.Uint64
	base, perBase := applied()
	appliedNow.Store(base)
	cpu0 := make([]time.Duration, len(rs))
	for i, r := range rs {
		cpu0[i] = load.ProcessCPU(r.cmd.Process.Pid)
	}
	rcpu0 := load.ProcessCPU(rcmd.Process.Pid)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // feedback
		defer wg.Done()
		for ctx.Err() == nil {
			n, _ := applied()
			appliedNow.Store(n)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	sent := base
	for ctx.Err() == nil {
		for _, e := range es {
			for sent-appliedNow.Load() >= uint64(window) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			evs := e.batch(hold)
			e.pub.Publish(evs...)
			sent += uint64(len(evs))
		}
	}
	end, perEnd := applied()
	elapsed := time.Since(start)
	wg.Wait()
	res.Seconds = elapsed.Seconds()
	res.Events = end - base
	res.EventsPerSec = float64(res.Events) / res.Seconds
	var cpuSum time.Duration
	var netSum float64
	for i, r := range rs {
		c := load.ProcessCPU(r.cmd.Process.Pid) - cpu0[i]
		cpuSum += c
		netSum += c.Seconds() - res.ReplicaIdleCPU[i]*res.Seconds
		ev := perEnd[i] - perBase[i]
		res.ReplicaEvents = append(res.ReplicaEvents, ev)
		res.ReplicaCPUSec = append(res.ReplicaCPUSec, c.Seconds())
		ns := 0.0
		if ev > 0 {
			ns = float64(c.Nanoseconds()) / float64(ev)
		}
		res.ReplicaCPUNs = append(res.ReplicaCPUNs, ns)
	}
	if res.Events > 0 {
		res.ReplicasCPUNs = float64(cpuSum.Nanoseconds()) / float64(res.Events)
		res.ReplicasNetCPUNs = netSum * 1e9 / float64(res.Events)
		rc := load.ProcessCPU(rcmd.Process.Pid) - rcpu0
		res.RedisCPUSec = rc.Seconds()
		res.RedisCPUNs = float64(rc.Nanoseconds()) / float64(res.Events)
	}
	sizes, ok := split()
	res.SplitUnchanged = ok && slices.Equal(sizes, res.Split)
	res.Load1End = load.Load1()
	if share && len(rs) > 1 {
		rs[0].cmd.Process.Kill()
		rs[0].cmd.Wait()
		killed := time.Now()
		rs = rs[1:]
		maxPer = (nEngines + len(rs) - 1) / len(rs)
		for deadline := killed.Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := split(); ok {
				break
			}
			if time.Now().After(deadline) {
				return res, errors.New("the survivors did not take the killed replica's engines within 60s")
			}
		}
		res.TakeoverSeconds = time.Since(killed).Seconds()
	}
	return res, nil
}
