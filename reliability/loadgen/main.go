// Command loadgen drives zmqguard's reference processes for the soak and
// fault scripts in reliability/ (see RELIABILITY.md). It is a test tool, not
// part of the library; every mode talks only to the endpoints it is given,
// which should be processes you run (normally on 127.0.0.1).
//
// Usage:
//
//	loadgen soak     --listener EP --front EP --back-output EP --back-publish EP [--duration 10m]
//	loadgen engine   --back-publish EP --back-output EP [--index 0] [--complete-after 300ms]
//	loadgen frontend --front EP [--wake-every 1s]
//	loadgen fetch    --listener EP [--duration 30s] [--interval 20ms] [--timeout 1s]
//	loadgen idle     --target EP [--conns 1000] [--mode tcp|zmtp] [--hold 20s] [--source IP]
//	loadgen stall    --listener EP [--requests 200000] [--hold 20s]
//
// soak sends mixed valid traffic (handshakes, engine stats, wave notices,
// front-end wake-ups) and junk (bad requests, undecodable frames, payload
// hazards, raw TCP garbage, the built-in hostile corpus) at full rate to a
// coordinator started with --engines 1 and a handshake listener, for the
// duration. engine and frontend play one DP engine and one API front-end and
// log what they see. fetch performs handshakes in a loop and prints each
// second how many succeeded and how many failed, by error kind. idle opens
// many connections and holds them without a word (tcp) or after a completed
// ZMTP handshake (zmtp). stall is a peer that sends requests and never reads
// a reply.
//
// Progress goes to stderr, one line per second; a final JSON summary goes to
// stdout. SIGINT or SIGTERM ends any mode early (with its summary).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/dppeer"
	"github.com/zmqguard/zmqguard/internal/hostile"
	"github.com/zmqguard/zmqguard/internal/nixlwire"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadgen soak|engine|frontend|fetch|idle|stall [flags] (see the package doc)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	modes := map[string]func(context.Context, []string) (any, error){
		"soak": runSoak, "engine": runEngine, "frontend": runFrontend,
		"fetch": runFetch, "idle": runIdle, "stall": runStall,
	}
	mode, ok := modes[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "loadgen: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	summary, err := mode(ctx, os.Args[2:])
	if summary != nil {
		b, _ := json.Marshal(summary)
		fmt.Println(string(b))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// quiet returns socket options that log nothing.
func quiet() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// progress prints fn's line to stderr every second until ctx ends.
func progress(ctx context.Context, fn func(elapsed time.Duration) string) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "%s t=%ds %s\n", time.Now().Format("15:04:05"), int(time.Since(start).Seconds()), fn(time.Since(start)))
		}
	}
}

// kinds counts events by name, concurrently.
type kinds struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (k *kinds) add(name string) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]uint64{}
	}
	k.m[name]++
	k.mu.Unlock()
}

func (k *kinds) snapshot() map[string]uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]uint64, len(k.m))
	for n, v := range k.m {
		out[n] = v
	}
	return out
}

func (k *kinds) String() string {
	s := k.snapshot()
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, s[n])
	}
	return strings.Join(parts, " ")
}

// fetchKind names the kind of a failed handshake.
func fetchKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{handshake.ErrTimeout, "timeout"}, {handshake.ErrRefused, "refused"},
		{handshake.ErrBadReplyShape, "bad-reply-shape"}, {handshake.ErrUndecodablePayload, "undecodable-payload"},
		{handshake.ErrHashMismatch, "hash-mismatch"}, {handshake.ErrEngineIDMismatch, "engine-id-mismatch"},
		{handshake.ErrRejected, "rejected"}, {context.Canceled, "cancelled"}, {context.DeadlineExceeded, "cancelled"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "untyped"
}

// fetchLoop performs handshakes with listener, one every interval (as fast
// as they complete when interval is 0), until ctx ends.
func fetchLoop(ctx context.Context, listener string, interval, timeout time.Duration, ok *atomic.Uint64, failed *kinds) {
	opts := handshake.ClientOptions{Timeout: timeout, SkipHashCheck: true, Socket: quiet()} // load only: any listener
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for ctx.Err() == nil {
		_, err := handshake.Fetch(ctx, listener, handshake.Request{Variant: handshake.V3}, opts)
		switch {
		case err == nil:
			ok.Add(1)
		case ctx.Err() != nil:
			return
		default:
			failed.add(fetchKind(err))
		}
		if tick != nil {
			select {
			case <-ctx.Done():
				return
			case <-tick:
			}
		}
	}
}

// ---- soak -----------------------------------------------------------------

type soakSummary struct {
	Seconds        float64           `json:"seconds"`
	HandshakesOK   uint64            `json:"handshakes_ok"`
	HandshakesFail map[string]uint64 `json:"handshakes_failed"`
	StatsSent      uint64            `json:"stats_sent"`
	Publications   uint64            `json:"publications"`
	WavesStarted   uint64            `json:"waves_started"`
	WavesCompleted uint64            `json:"waves_completed"`
	Wakes          uint64            `json:"wakes"`
	// Junk counts junk messages by kind as handed to Send; for XSUB
	// sockets (which drop at their HWM rather than wait) JunkSockets says
	// how many were actually queued to the target.
	Junk        map[string]uint64      `json:"junk"`
	JunkSockets map[string]socketTally `json:"junk_sockets"`
	ScanPasses  int                    `json:"scan_passes"`
	ScanOK      bool                   `json:"scan_all_alive"`
	// ScanDead lists the probes after which a target did not complete a
	// fresh ZMTP handshake within the scanner's timeout (3 s).
	ScanDead []scanDead `json:"scan_dead,omitempty"`
}

// scanDead is a probe after which a target did not answer in time.
type scanDead struct {
	Target    string `json:"target"`
	Probe     string `json:"probe"`
	Sent      uint64 `json:"sent"`
	Dead      uint64 `json:"dead"`
	LastError string `json:"last_error"`
}

// socketTally is what one of loadgen's own junk sockets did.
type socketTally struct {
	Queued     uint64 `json:"queued"`
	DroppedHWM uint64 `json:"dropped_hwm"`
}

func runSoak(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	listener := fs.String("listener", "", "handshake listener endpoint")
	front := fs.String("front", "", "coordinator front publish endpoint")
	backOut := fs.String("back-output", "", "coordinator back output endpoint")
	backPub := fs.String("back-publish", "", "coordinator back publish endpoint (coordinator started with --engines 1)")
	duration := fs.Duration("duration", 10*time.Minute, "how long to run")
	fetchInterval := fs.Duration("fetch-interval", 5*time.Millisecond, "pause between handshakes per fetcher (fresh TCP connection each: keeps TIME_WAIT sockets bounded)")
	fetchers := fs.Int("fetchers", 2, "concurrent handshake loops")
	rawInterval := fs.Duration("raw-interval", 20*time.Millisecond, "pause between raw TCP junk connections")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *listener == "" || *front == "" || *backOut == "" || *backPub == "" {
		return nil, errors.New("soak: --listener, --front, --back-output and --back-publish are required")
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	start := time.Now()
	var (
		wg                                         sync.WaitGroup
		hsOK, stats, pubs, started, completed, wak atomic.Uint64
		hsFail, junk                               kinds
		scanRep                                    *hostile.Report
		tallyMu                                    sync.Mutex
		tallies                                    = map[string]socketTally{}
	)
	tally := func(name string, s *socket.Socket) {
		st := s.Stats()
		tallyMu.Lock()
		tallies[name] = socketTally{Queued: st.Sent, DroppedHWM: st.DroppedHWM}
		tallyMu.Unlock()
	}
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }

	// Valid: the engine (the coordinator's only one), its stats at full rate
	// and its wave notices; a front-end reading publications and waking the
	// engines; handshakes.
	eng, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: *backPub, BackOutput: *backOut, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	err = eng.WaitReady(rctx)
	rcancel()
	if err != nil {
		return nil, fmt.Errorf("soak: no READY from the coordinator: %w", err)
	}
	var wave atomic.Int64
	run(func() {
		for step := 1; ctx.Err() == nil; step++ {
			if eng.SendStats(ctx, 0, step%50, step%7, int(wave.Load()), step) == nil {
				stats.Add(1)
			}
		}
	})
	run(func() {
		for ctx.Err() == nil {
			w, _, err := eng.NextStartWave(ctx)
			if err != nil {
				continue
			}
			started.Add(1)
			wave.Store(int64(w))
			// As DP rank 0 does since vLLM PR #51481: report the
			// paused->running edge itself (a wake no longer sets running).
			_ = eng.SendStartWave(ctx, 0, w)
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			if eng.SendWaveComplete(ctx, 0, w) == nil {
				completed.Add(1)
				wave.Store(int64(w) + 1)
			}
		}
	})
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: *front, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer fe.Close()
	run(func() {
		for ctx.Err() == nil {
			p, err := fe.Next(ctx)
			if err != nil {
				continue
			}
			pubs.Add(1)
			if !p.HasCounts && !p.Running {
				if fe.Wake(ctx, nil, int(p.Wave)) == nil {
					wak.Add(1)
				}
			}
		}
	})
	run(func() { // the first wake; later ones follow each pause
		for ctx.Err() == nil && fe.Wake(ctx, nil, 0) != nil {
			time.Sleep(10 * time.Millisecond)
		}
		wak.Add(1)
	})
	for i := 0; i < *fetchers; i++ {
		run(func() { fetchLoop(ctx, *listener, *fetchInterval, 5*time.Second, &hsOK, &hsFail) })
	}

	// Junk, at full rate on established connections.
	v3 := nixlwire.AppendRequest(nil, 3, 0, 0)
	unknownRank := nixlwire.AppendRequest(nil, 3, 0, 7)
	hazards := hostile.Payloads()
	run(func() { // the listener: a DEALER sending bad requests, reading the error replies
		d, err := socket.New("DEALER", quiet())
		if err != nil {
			return
		}
		defer d.Close()
		defer tally("listener", d)
		d.Dial(*listener)
		go func() {
			for {
				if _, err := d.Recv(ctx); err != nil {
					return
				}
			}
		}()
		junkReqs := []struct {
			name   string
			frames [][]byte
		}{
			{"listener-bare-dealer", [][]byte{v3}},
			{"listener-undecodable", [][]byte{{}, {0xc1}}},
			{"listener-wrong-arity", [][]byte{{}, {0x91, 0xc4, 0x0c, 'g', 'e', 't', '_', 'm', 'e', 't', 'a', '_', 'm', 's', 'g'}}},
			{"listener-unknown-rank", [][]byte{{}, unknownRank}},
			{"listener-3-frames", [][]byte{{}, v3, v3}},
		}
		for i := 0; ctx.Err() == nil; i++ {
			j := junkReqs[i%len(junkReqs)]
			if d.Send(ctx, j.frames...) == nil {
				junk.add(j.name)
			}
		}
	})
	pushJunk := func(name, ep string, typ zmtpguard.SocketType, skip func([]byte) bool) {
		s, err := socket.New(typ, quiet())
		if err != nil {
			return
		}
		defer s.Close()
		defer tally(name, s)
		s.Dial(ep)
		for i := 0; ctx.Err() == nil; i++ {
			h := hazards[i%len(hazards)]
			if skip(h.Bytes) || (len(h.Bytes) > 1<<20 && i%1000 != 0) {
				continue // the oversize frame costs a reconnect: one in a thousand
			}
			if s.Send(ctx, h.Bytes) == nil {
				junk.add(name + "-" + h.Name)
			}
		}
	}
	none := func([]byte) bool { return false }
	notForXSub := func(b []byte) bool { return len(b) == 0 || b[0] <= 1 } // would be (un)subscriptions
	run(func() { pushJunk("back-output", *backOut, "PUSH", none) })
	run(func() { pushJunk("front", *front, "XSUB", notForXSub) })
	run(func() { pushJunk("back-publish", *backPub, "XSUB", notForXSub) })
	run(func() { // raw TCP garbage at every port, paced (each costs a TIME_WAIT socket)
		targets := []string{*listener, *front, *backOut, *backPub}
		for i := 0; ctx.Err() == nil; i++ {
			network, addr, _ := hostile.SplitEndpoint(targets[i%len(targets)])
			if c, err := net.DialTimeout(network, addr, time.Second); err == nil {
				c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				c.Close()
				junk.add("raw-http")
			}
			select {
			case <-ctx.Done():
			case <-time.After(*rawInterval):
			}
		}
	})
	run(func() { // the whole hostile corpus, pass after pass
		rep, err := hostile.Scan(ctx, []string{*listener, *front, *backOut, *backPub}, hostile.ScanConfig{
			Duration: *duration,
			OnProbe: func(ev hostile.Event) {
				if !ev.Alive && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "%s scan: %s did not answer after %s: %v\n",
						time.Now().Format("15:04:05.000"), ev.Target, ev.Probe.Name, ev.AliveErr)
				}
			},
		})
		if err == nil {
			scanRep = rep
		}
	})

	go progress(ctx, func(time.Duration) string {
		return fmt.Sprintf("handshakes ok=%d failed={%s} stats=%d pubs=%d waves=%d/%d junk=%d",
			hsOK.Load(), hsFail.String(), stats.Load(), pubs.Load(), started.Load(), completed.Load(), total(junk.snapshot()))
	})
	wg.Wait()
	// Let the engine's PUSH queue drain before the deferred Close discards
	// it, so that every stats message counted here reaches the coordinator.
	time.Sleep(2 * time.Second)
	s := soakSummary{
		Seconds: time.Since(start).Seconds(), HandshakesOK: hsOK.Load(), HandshakesFail: hsFail.snapshot(),
		StatsSent: stats.Load(), Publications: pubs.Load(), WavesStarted: started.Load(), WavesCompleted: completed.Load(),
		Wakes: wak.Load(), Junk: junk.snapshot(), JunkSockets: tallies,
	}
	if scanRep != nil {
		for _, p := range scanRep.Passes {
			s.ScanPasses += p
		}
		s.ScanOK = scanRep.OK()
		for _, r := range scanRep.Results {
			if r.Dead > 0 {
				s.ScanDead = append(s.ScanDead, scanDead{r.Target, r.Probe, r.Sent, r.Dead, r.LastError})
			}
		}
	}
	return s, nil
}

func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// ---- engine and frontend ----------------------------------------------------

func runEngine(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("engine", flag.ContinueOnError)
	backPub := fs.String("back-publish", "", "coordinator back publish endpoint")
	backOut := fs.String("back-output", "", "coordinator back output endpoint")
	index := fs.Int("index", 0, "this engine's data-parallel rank")
	completeAfter := fs.Duration("complete-after", 300*time.Millisecond, "rank 0: how long a wave runs before wave_complete")
	statsEvery := fs.Duration("stats-every", 10*time.Millisecond, "stats period")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	e, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: *backPub, BackOutput: *backOut, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	start := time.Now()
	if err := e.WaitReady(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s engine %d: READY after %v\n", time.Now().Format("15:04:05.000"), *index, time.Since(start).Round(time.Millisecond))
	// wave and step change together: an engine's (wave, step) pair only
	// grows, or the coordinator takes its stats for stale ones.
	var mu sync.Mutex
	var wave, step int64
	var sent atomic.Uint64
	go func() {
		reported := int64(-1)
		for ctx.Err() == nil {
			w, ex, err := e.NextStartWave(ctx)
			if err != nil {
				continue
			}
			exs := "none"
			if ex != nil {
				exs = fmt.Sprint(*ex)
			}
			fmt.Fprintf(os.Stderr, "%s engine %d: START_DP_WAVE wave=%d exclude=%s\n", time.Now().Format("15:04:05.000"), *index, w, exs)
			mu.Lock()
			if int64(w) > wave {
				wave, step = int64(w), 0
			}
			mu.Unlock()
			if *index == 0 && int64(w) > reported {
				// Rank 0 reports the paused->running edge (vLLM PR #51481),
				// once per wave.
				reported = int64(w)
				_ = e.SendStartWave(ctx, 0, w)
				go func(w int) {
					select {
					case <-ctx.Done():
						return
					case <-time.After(*completeAfter):
					}
					if e.SendWaveComplete(ctx, 0, w) == nil {
						fmt.Fprintf(os.Stderr, "%s engine 0: wave_complete=%d sent\n", time.Now().Format("15:04:05.000"), w)
					}
				}(w)
			}
		}
	}()
	t := time.NewTicker(*statsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			return map[string]any{"index": *index, "stats_sent": sent.Load(), "wave": wave}, nil
		case <-t.C:
			mu.Lock()
			step++
			w, s := wave, step
			mu.Unlock()
			if e.SendStats(ctx, *index, int(s%20), 1, int(w), int(s)) == nil {
				sent.Add(1)
			}
		}
	}
}

func runFrontend(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("frontend", flag.ContinueOnError)
	front := fs.String("front", "", "coordinator front publish endpoint")
	wakeEvery := fs.Duration("wake-every", time.Second, "wake the engines this long after they pause")
	scale := fs.Int("scale", 0, "if set, first send (\"SCALE_ELASTIC_EP\", N): the engine list (and every publication) grows to N engines")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: *front, Socket: quiet()})
	if err != nil {
		return nil, err
	}
	defer fe.Close()
	if *scale > 0 {
		for ctx.Err() == nil && fe.Scale(ctx, *scale) != nil {
			time.Sleep(10 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "%s frontend: SCALE_ELASTIC_EP %d sent\n", time.Now().Format("15:04:05.000"), *scale)
	}
	var pubs uint64
	var last string
	wakeAt := time.Now().Add(*wakeEvery)
	wave, running := 0, false
	for ctx.Err() == nil {
		nctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		p, err := fe.Next(nctx)
		cancel()
		if err == nil {
			pubs++
			wave, running = int(p.Wave), p.Running
			line := fmt.Sprintf("counts=%v wave=%d running=%v", p.Counts(), p.Wave, p.Running)
			if !p.HasCounts {
				line = fmt.Sprintf("wave publication: wave=%d running=%v", p.Wave, p.Running)
			}
			if line != last {
				fmt.Fprintf(os.Stderr, "%s frontend: %s\n", time.Now().Format("15:04:05.000"), line)
				last = line
			}
		}
		if !running && time.Now().After(wakeAt) && fe.Connected() {
			if fe.Wake(ctx, nil, wave) == nil {
				fmt.Fprintf(os.Stderr, "%s frontend: wake (nil, %d) sent\n", time.Now().Format("15:04:05.000"), wave)
			}
			wakeAt = time.Now().Add(*wakeEvery)
		}
	}
	return map[string]any{"publications": pubs}, nil
}

// ---- fetch ----------------------------------------------------------------------

func runFetch(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("fetch", flag.ContinueOnError)
	listener := fs.String("listener", "", "handshake listener endpoint")
	duration := fs.Duration("duration", 30*time.Second, "how long to run")
	interval := fs.Duration("interval", 20*time.Millisecond, "pause between handshakes")
	timeout := fs.Duration("timeout", time.Second, "per-handshake timeout (vLLM: 5 s)")
	clients := fs.Int("clients", 1, "concurrent handshake loops")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var ok atomic.Uint64
	var failed kinds
	var wg sync.WaitGroup
	for i := 0; i < *clients; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); fetchLoop(ctx, *listener, *interval, *timeout, &ok, &failed) }()
	}
	var lastOK uint64
	lastFail := map[string]uint64{}
	go progress(ctx, func(time.Duration) string {
		o, f := ok.Load(), failed.snapshot()
		var parts []string
		for k, v := range f {
			if d := v - lastFail[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s=%d", k, d))
			}
		}
		sort.Strings(parts)
		line := fmt.Sprintf("this second: ok=%d failed={%s}", o-lastOK, strings.Join(parts, " "))
		lastOK, lastFail = o, f
		return line
	})
	wg.Wait()
	return map[string]any{"ok": ok.Load(), "failed": failed.snapshot()}, nil
}

// ---- idle -----------------------------------------------------------------------

func runIdle(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	target := fs.String("target", "", "endpoint to connect to")
	conns := fs.Int("conns", 1000, "connections to open")
	mode := fs.String("mode", "tcp", "tcp: connect and say nothing; zmtp: complete a ZMTP handshake as a DEALER, then say nothing")
	hold := fs.Duration("hold", 20*time.Second, "how long to hold them")
	source := fs.String("source", "", "tcp mode: local IP to connect from, e.g. 127.0.0.2 (another host, as a remote attacker would be)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	network, addr, err := hostile.SplitEndpoint(*target)
	if err != nil {
		return nil, err
	}
	dialer := net.Dialer{Timeout: 10 * time.Second}
	if *source != "" {
		ip := net.ParseIP(*source)
		if ip == nil {
			return nil, fmt.Errorf("--source %q is not an IP address", *source)
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	var opened, failed, closedByPeer atomic.Int64
	var mu sync.Mutex
	var open []io.Closer
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	start := time.Now()
	for i := 0; i < *conns && ctx.Err() == nil; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var c io.Closer
			var nc net.Conn
			switch *mode {
			case "zmtp":
				hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				zc, err := zmtpguard.Dial(hctx, network, addr, "DEALER", nil, nil)
				cancel()
				if err != nil {
					failed.Add(1)
					return
				}
				c, nc = zc, zc.NetConn()
			default:
				tc, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					failed.Add(1)
					return
				}
				c, nc = tc, tc
			}
			opened.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			go func() { // notice when the server closes it
				buf := make([]byte, 512)
				for {
					if _, err := nc.Read(buf); err != nil {
						if !errors.Is(err, net.ErrClosed) {
							closedByPeer.Add(1)
						}
						return
					}
				}
			}()
		}()
	}
	wg.Wait()
	fmt.Fprintf(os.Stderr, "%s idle: %d open, %d failed to open, in %v\n", time.Now().Format("15:04:05.000"),
		opened.Load(), failed.Load(), time.Since(start).Round(time.Millisecond))
	hctx, cancel := context.WithTimeout(ctx, *hold)
	defer cancel()
	go progress(hctx, func(time.Duration) string {
		return fmt.Sprintf("idle: open %d, closed by the server %d", opened.Load()-closedByPeer.Load(), closedByPeer.Load())
	})
	<-hctx.Done()
	summary := map[string]any{"mode": *mode, "opened": opened.Load(), "failed": failed.Load(), "closed_by_server": closedByPeer.Load()}
	mu.Lock()
	for _, c := range open {
		c.Close()
	}
	mu.Unlock()
	return summary, nil
}

// ---- stall ----------------------------------------------------------------------

func runStall(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("stall", flag.ContinueOnError)
	listener := fs.String("listener", "", "handshake listener endpoint")
	requests := fs.Int("requests", 200000, "requests to send without reading any reply")
	hold := fs.Duration("hold", 20*time.Second, "how long to keep the connection open afterwards, still not reading")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	network, addr, err := hostile.SplitEndpoint(*listener)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := zmtpguard.Dial(hctx, network, addr, "DEALER", nil, nil)
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	req := nixlwire.AppendRequest(nil, 3, 0, 0)
	start := time.Now()
	sent := 0
	c.NetConn().SetWriteDeadline(time.Now().Add(60 * time.Second))
	var werr error
	for ; sent < *requests && ctx.Err() == nil; sent++ {
		if werr = c.WriteMessage([]byte{}, req); werr != nil {
			break
		}
		if sent%256 == 255 {
			if werr = c.Flush(); werr != nil {
				break
			}
		}
	}
	if werr == nil {
		werr = c.Flush()
	}
	fmt.Fprintf(os.Stderr, "%s stall: %d requests written in %v (err %v); now holding, reading nothing\n",
		time.Now().Format("15:04:05.000"), sent, time.Since(start).Round(time.Millisecond), werr)
	t := time.NewTimer(*hold)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	errText := ""
	if werr != nil {
		errText = werr.Error()
	}
	return map[string]any{"requests_written": sent, "write_error": errText}, nil
}
