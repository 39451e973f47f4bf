package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
	"github.com/zmqguard/zmqguard/internal/testkit/hostile"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

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
