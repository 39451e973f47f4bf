// Command fanout measures the DP coordinator's stats publication while many
// subscribers holding many topics each are attached to its front publish
// (XPUB) socket, and what their departure costs (issue 23).
//
//	go run ./bench/fanout [-subs 1000] [-topics 10000] [-quick] [-out FILE]
//
// It starts the coordinator as a child process (this program re-executed
// with FANOUT_ROLE=coordinator: package coordinator's New and Run on
// loopback, one engine, the socket-wide topic bounds lifted and heartbeats
// off so that every subscription is held), and plays, over raw ZMTP
// (zmtpguard.Dial), bytes built here (FANOUT_CPUPROFILE=FILE makes the
// child write a CPU profile of its whole run there):
//
//   - one engine: it subscribes on back publish, waits for READY, then
//     pushes EngineCoreOutputs with scheduler stats every 10 ms whose
//     num_waiting_reqs is the milliseconds since the run started, so that a
//     publication carries the time its stats were sent;
//   - one live front-end (an XSUB subscribed to everything) that records
//     every stats publication: its inter-arrival time and its age (now minus
//     the time the stats it carries were sent);
//   - -subs subscribers (XSUB) that each subscribe to -topics distinct topics
//     that no publication matches, and never read.
//
// Phases: baseline (front-end only), attach (until the coordinator has
// received every subscription), steady (all attached), departure (every
// subscriber closes at once, until the coordinator counts only the
// front-end again and its publications are back to normal), after. For
// each it reports the child's CPU seconds (from /proc), the publications
// the coordinator counted and what the front-end saw, as one JSON object on
// stdout (and in -out). Every phase has a time bound; one that runs out is
// reported as incomplete, not waited for.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/dpwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Config is one run's shape.
type Config struct {
	Subs, Topics  int
	StatsInterval time.Duration
	Baseline      time.Duration
	Steady        time.Duration
	After         time.Duration
	AttachTimeout time.Duration
	DepartTimeout time.Duration
	Label         string
}

// maxTopicsPerPeer is the socket package's fixed limit on one XPUB
// subscriber's distinct topics (see socket.Options.XPubMaxTopics).
const maxTopicsPerPeer = 10000

func defaults(quick bool) Config {
	if quick {
		return Config{Subs: 10, Topics: 100, StatsInterval: 100 * time.Millisecond, Baseline: time.Second,
			Steady: time.Second, After: 2 * time.Second, AttachTimeout: 30 * time.Second, DepartTimeout: 30 * time.Second}
	}
	return Config{Subs: 1000, Topics: 10000, StatsInterval: 100 * time.Millisecond, Baseline: 5 * time.Second,
		Steady: 10 * time.Second, After: 3 * time.Second, AttachTimeout: 150 * time.Second, DepartTimeout: 120 * time.Second}
}

func main() {
	if os.Getenv("FANOUT_ROLE") == "coordinator" {
		if err := runChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fanout coordinator:", err)
			os.Exit(1)
		}
		return
	}
	quick := flag.Bool("quick", false, "10 subscribers x 100 topics, 1 s phases (seconds in all)")
	subs := flag.Int("subs", 0, "subscribers (default 1000; quick 10)")
	topics := flag.Int("topics", 0, "distinct topics per subscriber (default 10000, at most 10000, the socket's per-subscriber limit; quick 100)")
	label := flag.String("label", "", "a name for the run, copied into the result")
	out := flag.String("out", "", "also write the result (JSON) to this file")
	flag.Parse()
	cfg := defaults(*quick)
	if *subs > 0 {
		cfg.Subs = *subs
	}
	if *topics > 0 {
		cfg.Topics = *topics
	}
	cfg.Label = *label
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
	res, err := Run(ctx, self, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(b))
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fanout:", err)
			os.Exit(1)
		}
	}
}

// childStats is what the child reports on request.
type childStats struct {
	Peers          int    `json:"peers"`
	Received       uint64 `json:"received"`
	StatsPublished uint64 `json:"stats_published"`
	// Topics is the front socket's subscriptions held, -1 when the
	// coordinator's socket does not report it.
	Topics int `json:"topics"`
}

// setIfExists sets the named field of *opts when it exists with v's kind:
// the program builds against coordinators with and without the field.
func setIfExists(opts any, name string, v any) {
	f := reflect.ValueOf(opts).Elem().FieldByName(name)
	if f.IsValid() && f.CanSet() && f.Kind() == reflect.ValueOf(v).Kind() {
		f.Set(reflect.ValueOf(v).Convert(f.Type()))
	}
}

// runChild is the coordinator process: it prints its endpoints as a JSON
// line, then answers each "stats" line on in with a childStats line, and
// stops when in closes.
func runChild(in io.Reader, out io.Writer) error {
	si, err := time.ParseDuration(os.Getenv("FANOUT_STATS_INTERVAL"))
	if err != nil {
		return err
	}
	if path := os.Getenv("FANOUT_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var opts socket.Options
	setIfExists(&opts, "XPubMaxTopics", -1)
	setIfExists(&opts, "XPubMaxTopicBytes", int64(-1))
	setIfExists(&opts, "HeartbeatInterval", time.Duration(-1))
	c, err := coordinator.New(coordinator.Config{
		Front: "tcp://127.0.0.1:0", BackOutput: "tcp://127.0.0.1:0", BackPublish: "tcp://127.0.0.1:0",
		Engines: 1, StatsInterval: si, Socket: opts,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	enc := json.NewEncoder(out)
	enc.Encode(map[string]string{"front": c.FrontEndpoint(), "back_output": c.BackOutputEndpoint(), "back_publish": c.BackPublishEndpoint()})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		st := c.Stats()
		cs := childStats{Peers: st.Front.Peers, Received: st.Front.Received, StatsPublished: st.StatsPublished, Topics: -1}
		var sock map[string]any
		if b, err := json.Marshal(st.Front.Socket); err == nil && json.Unmarshal(b, &sock) == nil {
			if n, ok := sock["topics"].(float64); ok {
				cs.Topics = int(n)
			}
		}
		enc.Encode(cs)
	}
	cancel()
	c.Close()
	<-done
	return nil
}

// child is the running coordinator process.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex
	eps  map[string]string
	pid  int
	tick float64
}

func startChild(ctx context.Context, self string, cfg Config, stderr io.Writer) (*child, error) {
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), "FANOUT_ROLE=coordinator", "FANOUT_STATS_INTERVAL="+cfg.StatsInterval.String())
	cmd.Stderr = stderr
	cmd.WaitDelay = 10 * time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := &child{cmd: cmd, in: in, out: bufio.NewScanner(outp), pid: cmd.Process.Pid, tick: 100}
	if !ch.out.Scan() {
		ch.stop()
		return nil, fmt.Errorf("coordinator child printed no endpoints: %v", ch.out.Err())
	}
	if err := json.Unmarshal(ch.out.Bytes(), &ch.eps); err != nil {
		ch.stop()
		return nil, err
	}
	return ch, nil
}

func (ch *child) stats() (childStats, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var st childStats
	if _, err := io.WriteString(ch.in, "stats\n"); err != nil {
		return st, err
	}
	if !ch.out.Scan() {
		return st, fmt.Errorf("coordinator child: no stats line: %v", ch.out.Err())
	}
	return st, json.Unmarshal(ch.out.Bytes(), &st)
}

// cpu returns the child's user+system CPU seconds and its peak RSS (MiB).
func (ch *child) cpu() (float64, float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ch.pid))
	if err != nil {
		return -1, -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields from state (field 3): utime is field 14, stime 15.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	rss := -1.0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ch.pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rss = kb / 1024
			}
		}
	}
	return (ut + st) / ch.tick, rss
}

func (ch *child) stop() {
	ch.in.Close()
	ch.cmd.Wait()
}

// The socket types the peers dial as, in one place.
type socketType = zmtpguard.SocketType

const (
	typeXSub = "XSUB"
	typePush = "PUSH"
)

// dial connects a raw ZMTP peer of type t to endpoint tcp://host:port.
func dial(ctx context.Context, ep string, t socketType) (*zmtpguard.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return zmtpguard.Dial(dctx, "tcp", strings.TrimPrefix(ep, "tcp://"), t, nil, nil)
}

// awaitReady reads c until READY, closing it if that takes longer than d.
func awaitReady(c *zmtpguard.Conn, d time.Duration) error {
	t := time.AfterFunc(d, func() { c.Close() })
	defer t.Stop()
	for {
		var m zmtpguard.Message
		if err := c.ReadMessage(&m); err != nil {
			return fmt.Errorf("no READY within %v: %w", d, err)
		}
		if m.Command == "" && len(m.Frames) == 1 && string(m.Frames[0]) == dpwire.ReadyFrame {
			return nil
		}
	}
}

func send(c *zmtpguard.Conn, frames ...[]byte) error {
	if err := c.WriteMessage(frames...); err != nil {
		return err
	}
	return c.Flush()
}

// engineStats is the EngineCoreOutputs the engine pushes: engine 0, one
// running request, waiting = ms (the send time), step_counter = step. The
// one call into the project's encoder, so that a rename touches one line.
func engineStats(dst []byte, ms, step int64) []byte {
	return dpwire.AppendHeader(dst, &enginecore.Header{EngineIndex: 0, HasStats: true,
		Stats: enginecore.SchedulerStats{NumRunningReqs: 1, NumWaitingReqs: ms, StepCounter: step}})
}

// sample is one stats publication the front-end saw.
type sample struct {
	at  time.Duration // since the run started
	age time.Duration // at minus the send time of the stats it carries
}

// parseStats returns engine 0's waiting count of a stats publication
// ([[[waiting, running, ...], ...], wave, running]); ok is false for a wave
// publication ([nil, wave, running]) or anything else.
func parseStats(b []byte) (int64, bool) {
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 3 || msgp.IsNil(b) {
		return 0, false
	}
	n, b, err = msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return 0, false
	}
	n, b, err = msgp.ReadArrayHeaderBytes(b)
	if err != nil || n < 1 {
		return 0, false
	}
	w, _, err := msgp.ReadInt64Bytes(b)
	return w, err == nil
}

// Dist summarises durations in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

func dist(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Dist{N: len(s), Mean: ms(sum / time.Duration(len(s))), P50: ms(s[len(s)/2]),
		P99: ms(s[min(len(s)-1, len(s)*99/100)]), Max: ms(s[len(s)-1])}
}

// Phase is what one phase measured.
type Phase struct {
	Name string  `json:"name"`
	Wall float64 `json:"wall_s"`
	// Complete is false when the phase's time bound ran out first.
	Complete bool `json:"complete"`
	// CPU is the coordinator process's CPU seconds in the phase;
	// Publications the stats publications it counted; CPUPerPub their
	// ratio (ms), which includes everything else it did meanwhile.
	CPU          float64 `json:"cpu_s"`
	Publications uint64  `json:"publications"`
	CPUPerPub    float64 `json:"cpu_ms_per_publication"`
	// Interarrival and Age: the stats publications the live front-end
	// received in the phase.
	Interarrival Dist `json:"interarrival"`
	Age          Dist `json:"age"`
}

// Result is a run's output.
type Result struct {
	Label  string  `json:"label,omitempty"`
	Config Config  `json:"config"`
	Phases []Phase `json:"phases"`
	// AttachSeconds: from the first subscriber's dial until the coordinator
	// had received every subscription. DepartSeconds: from the first close
	// until it counted only the front-end (and its subscription, when
	// reported); NormalSeconds: until the first
	// of 10 publications in a row no older than NormalAge.
	AttachSeconds float64 `json:"attach_s"`
	DepartSeconds float64 `json:"depart_s"`
	// QuietSeconds: from the first close until the coordinator's CPU rate
	// was back near its baseline (the departure phase's end).
	QuietSeconds  float64 `json:"quiet_after_depart_s"`
	NormalSeconds float64 `json:"normal_after_depart_s"`
	NormalAgeMS   float64 `json:"normal_age_ms"`
	// PeersLeft: subscribers the coordinator still counted when the
	// departure's bound ran out (0 when it completed).
	PeersLeft int `json:"peers_left"`
	// TopicsHeld is the subscribers' subscriptions the front socket held
	// after attach (-1 when the coordinator does not report them); PeakRSSMiB the child's VmHWM.
	TopicsHeld int     `json:"topics_held"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// held is the subscribers' subscriptions: n less the front-end's own
// (-1 when the coordinator does not report them).
func held(n, own int) int {
	if n < 0 {
		return -1
	}
	return n - own
}

// Run measures one coordinator (self re-executed as the child).
func Run(ctx context.Context, self string, cfg Config, logw io.Writer) (*Result, error) {
	if cfg.Topics > maxTopicsPerPeer {
		return nil, fmt.Errorf("-topics %d is over the socket's per-subscriber limit (%d)", cfg.Topics, maxTopicsPerPeer)
	}
	logf := func(format string, a ...any) { fmt.Fprintf(logw, "fanout: "+format+"\n", a...) }
	ch, err := startChild(ctx, self, cfg, logw)
	if err != nil {
		return nil, err
	}
	defer ch.stop()
	start := time.Now()
	res := &Result{Label: cfg.Label, Config: cfg, TopicsHeld: -1}

	// The engine: subscribe on back publish, wait for READY.
	bpub, err := dial(ctx, ch.eps["back_publish"], typeXSub)
	if err != nil {
		return nil, err
	}
	defer bpub.Close()
	if err := send(bpub, []byte{0x01}); err != nil {
		return nil, err
	}
	if err := awaitReady(bpub, 20*time.Second); err != nil {
		return nil, err
	}
	bout, err := dial(ctx, ch.eps["back_output"], typePush)
	if err != nil {
		return nil, err
	}
	defer bout.Close()
	front, err := dial(ctx, ch.eps["front"], typeXSub)
	if err != nil {
		return nil, err
	}
	defer front.Close()
	if err := send(front, []byte{0x01}); err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	rctx, stopRoles := context.WithCancel(ctx)
	defer stopRoles()
	wg.Add(1)
	go func() { // the engine's stats, every 10 ms
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var buf []byte
		for step := int64(1); ; step++ {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			buf = engineStats(buf[:0], time.Since(start).Milliseconds(), step)
			if send(bout, buf) != nil {
				return
			}
		}
	}()
	var smu sync.Mutex
	var samples []sample
	wg.Add(1)
	go func() { // the live front-end
		defer wg.Done()
		var m zmtpguard.Message
		for {
			m.Reset()
			if front.ReadMessage(&m) != nil {
				return
			}
			if m.Command != "" || len(m.Frames) != 1 {
				continue
			}
			if w, ok := parseStats(m.Frames[0]); ok {
				at := time.Since(start)
				smu.Lock()
				samples = append(samples, sample{at: at, age: at - time.Duration(w)*time.Millisecond})
				smu.Unlock()
			}
		}
	}()
	wg.Add(1)
	go func() { defer wg.Done(); <-rctx.Done(); front.Close(); bout.Close() }()

	// phase runs body and records the child's CPU and publications and the
	// front-end's samples over it.
	phase := func(name string, body func() bool) Phase {
		c0, _ := ch.cpu()
		s0, _ := ch.stats()
		t0 := time.Since(start)
		complete := body()
		t1 := time.Since(start)
		c1, rss := ch.cpu()
		s1, _ := ch.stats()
		p := Phase{Name: name, Wall: (t1 - t0).Seconds(), Complete: complete, CPU: c1 - c0,
			Publications: s1.StatsPublished - s0.StatsPublished}
		if p.Publications > 0 {
			p.CPUPerPub = p.CPU * 1000 / float64(p.Publications)
		}
		smu.Lock()
		var gaps, ages []time.Duration
		var prev time.Duration = -1
		for _, s := range samples {
			if s.at < t0 {
				prev = s.at
				continue
			}
			if s.at >= t1 {
				break
			}
			if prev >= 0 {
				gaps = append(gaps, s.at-prev)
			}
			prev = s.at
			ages = append(ages, s.age)
		}
		smu.Unlock()
		p.Interarrival, p.Age = dist(gaps), dist(ages)
		res.PeakRSSMiB = max(res.PeakRSSMiB, rss)
		logf("%s: %.1f s, complete %v, cpu %.2f s, %d publications, age p50 %.0f ms max %.0f ms, gap max %.0f ms",
			name, p.Wall, complete, p.CPU, p.Publications, p.Age.P50, p.Age.Max, p.Interarrival.Max)
		res.Phases = append(res.Phases, p)
		return p
	}
	sleep := func(d time.Duration) func() bool {
		return func() bool {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(d):
				return true
			}
		}
	}
	base := phase("baseline", sleep(cfg.Baseline))
	st0, err := ch.stats() // the front-end's own subscription
	if err != nil {
		return nil, err
	}

	// Attach: the subscribers dial (8 at a time) and send their topics.
	subs := make([]*zmtpguard.Conn, cfg.Subs)
	var subsMu sync.Mutex // subs, against the attach bound's closer
	var attachErr atomic.Value
	var expired atomic.Bool // the attach bound ran out
	phase("attach", func() bool {
		t0 := time.Now()
		deadline := t0.Add(cfg.AttachTimeout)
		// A subscriber still writing when the bound runs out is closed
		// (its writes then fail).
		bound := time.AfterFunc(cfg.AttachTimeout, func() {
			subsMu.Lock()
			defer subsMu.Unlock()
			expired.Store(true)
			for _, c := range subs {
				if c != nil {
					c.Close()
				}
			}
		})
		defer bound.Stop()
		sem := make(chan struct{}, 8)
		var awg sync.WaitGroup
		for i := range subs {
			sem <- struct{}{}
			awg.Add(1)
			go func() {
				defer func() { <-sem; awg.Done() }()
				c, err := dial(ctx, ch.eps["front"], typeXSub)
				if err != nil {
					attachErr.CompareAndSwap(nil, err)
					return
				}
				subsMu.Lock()
				subs[i] = c
				if expired.Load() {
					c.Close()
				}
				subsMu.Unlock()
				topic := make([]byte, 0, 32)
				for k := range cfg.Topics {
					topic = fmt.Appendf(topic[:0], "\x01t%d.%d", i, k)
					if err := c.WriteMessage(topic); err != nil {
						attachErr.CompareAndSwap(nil, err)
						return
					}
					if k%1024 == 1023 {
						if err := c.Flush(); err != nil {
							attachErr.CompareAndSwap(nil, err)
							return
						}
					}
				}
				if err := c.Flush(); err != nil {
					attachErr.CompareAndSwap(nil, err)
				}
			}()
		}
		awg.Wait()
		if err, _ := attachErr.Load().(error); err != nil {
			logf("attach: %v", err)
			return false
		}
		want := uint64(cfg.Subs*cfg.Topics) + 1
		for time.Now().Before(deadline) {
			st, err := ch.stats()
			if err != nil {
				return false
			}
			if st.Received >= want {
				res.AttachSeconds = time.Since(t0).Seconds()
				res.TopicsHeld = held(st.Topics, st0.Topics)
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		st, _ := ch.stats()
		logf("attach: %d of %d subscriptions received when the bound ran out", st.Received, want)
		res.AttachSeconds = time.Since(t0).Seconds()
		res.TopicsHeld = held(st.Topics, st0.Topics)
		return false
	})
	phase("steady", sleep(cfg.Steady))

	// Departure: every subscriber closes at once. It ends when the
	// coordinator counts only the front-end (and, when it reports them,
	// only the front-end's subscription) and then spends a whole second at
	// about its baseline CPU rate (twice it plus 5 %): departure work done
	// in the background counts too.
	var closedAt time.Duration
	quietRate := 2*base.CPU/base.Wall + 0.05
	phase("departure", func() bool {
		t0 := time.Now()
		closedAt = time.Since(start)
		for _, c := range subs {
			if c != nil {
				c.Close()
			}
		}
		var gone bool
		var lastCPU float64
		var lastT time.Time
		for time.Since(t0) < cfg.DepartTimeout {
			st, err := ch.stats()
			if err != nil {
				return false
			}
			now := time.Now()
			if !gone && st.Peers <= 1 && st.Topics <= st0.Topics {
				gone = true
				res.DepartSeconds = now.Sub(t0).Seconds()
				lastCPU, _ = ch.cpu()
				lastT = now
			}
			if gone && now.Sub(lastT) >= time.Second {
				c, _ := ch.cpu()
				if (c-lastCPU)/now.Sub(lastT).Seconds() <= quietRate {
					res.QuietSeconds = lastT.Sub(t0).Seconds()
					return true
				}
				lastCPU, lastT = c, now
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !gone {
			res.DepartSeconds = time.Since(t0).Seconds()
		}
		res.QuietSeconds = time.Since(t0).Seconds()
		if st, err := ch.stats(); err == nil {
			res.PeersLeft = st.Peers - 1
			logf("departure: %d subscribers still counted when the bound ran out", res.PeersLeft)
		}
		return false
	})
	phase("after", sleep(cfg.After))
	stopRoles()

	// Back to normal: 10 publications in a row no older than the baseline's
	// worst age plus one stats interval.
	normal := time.Duration(base.Age.Max*float64(time.Millisecond)) + cfg.StatsInterval
	res.NormalAgeMS = float64(normal.Milliseconds())
	smu.Lock()
	res.NormalSeconds = -1
	for i := range samples {
		if samples[i].at < closedAt || i+10 > len(samples) {
			continue
		}
		if !slices.ContainsFunc(samples[i:i+10], func(s sample) bool { return s.age > normal }) {
			res.NormalSeconds = (samples[i].at - closedAt).Seconds()
			break
		}
	}
	smu.Unlock()
	if err, _ := attachErr.Load().(error); err != nil && !expired.Load() {
		return res, fmt.Errorf("attach: %w", err)
	}
	return res, nil
}
