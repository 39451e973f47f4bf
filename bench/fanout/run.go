package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

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
