package netproof

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Heartbeat rules of the scenarios: interval 500 ms, timeout 1.5 s, so every
// side must notice a silent partition within interval + timeout + 1 s = 3 s
// (allowed 3× on a loaded machine, measured times are logged).
const (
	hbIvl      = 500 * time.Millisecond
	hbTimeout  = 1500 * time.Millisecond
	detectWant = hbIvl + hbTimeout + time.Second
	detectMax  = 3 * detectWant
	coordPort  = "5555" // inside the coordinator's own namespace
)

// proc is a role running in a host's namespace.
type proc struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	mu    sync.Mutex
	evs   []event
	cond  chan struct{} // closed and replaced on each new event
	done  chan struct{}
	serr  strings.Builder
}

// start runs role inside h with extra environment.
func start(t *testing.T, h *Host, name, role string, env ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	cmd := h.Command(ctx, exe, "-test.run=^TestNetproofHelper$")
	cmd.Env = append(os.Environ(), append([]string{"NETPROOF_ROLE=" + role,
		"NETPROOF_HB_IVL=" + hbIvl.String(), "NETPROOF_HB_TIMEOUT=" + hbTimeout.String()}, env...)...)
	p := &proc{t: t, name: name, cmd: cmd, cond: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = &p.serr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue // go test's own lines
			}
			p.mu.Lock()
			p.evs = append(p.evs, e)
			close(p.cond)
			p.cond = make(chan struct{})
			p.mu.Unlock()
		}
		cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.dump()
		}
	})
	return p
}

// dump logs every event the role reported (not the chatty ones), and its
// stderr, for a failed test.
func (p *proc) dump() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.evs {
		if e.Ev != "stats" {
			p.t.Logf("%s: %s id=%s hb=%v handover=%v err=%s t=%s", p.name, e.Ev, e.ID, e.HB, e.Handover, e.Err,
				time.Unix(0, e.T).Format("15:04:05.000"))
		}
	}
	if s := p.serr.String(); s != "" {
		p.t.Logf("%s stderr: %s", p.name, s)
	}
}

// pid is the role's own process (ip netns exec execs it in place).
func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
}

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.done
}

// stop asks the role to close its sockets and report its baseline.
func (p *proc) stop() event {
	p.t.Helper()
	p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not stop", p.name)
	}
	e, ok := p.find(func(e event) bool { return e.Ev == "baseline" }, 0)
	if !ok {
		p.t.Fatalf("%s reported no baseline: %s", p.name, p.serr.String())
	}
	return e
}

// find returns the first event at or after time since (Unix ns) matching f.
func (p *proc) find(f func(event) bool, since int64) (event, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.evs {
		if e.T >= since && f(e) {
			return e, true
		}
	}
	return event{}, false
}

func (p *proc) count(f func(event) bool, since, until int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.evs {
		if e.T >= since && e.T < until && f(e) {
			n++
		}
	}
	return n
}

// wait returns the first event since `since` matching f, failing after d.
func (p *proc) wait(what string, f func(event) bool, since int64, d time.Duration) event {
	p.t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		p.mu.Lock()
		ch := p.cond
		p.mu.Unlock()
		if e, ok := p.find(f, since); ok {
			return e
		}
		select {
		case <-ch:
		case <-p.done:
			if e, ok := p.find(f, since); ok {
				return e
			}
			p.t.Fatalf("%s exited before %s: %s", p.name, what, p.serr.String())
		case <-tm.C:
			p.t.Fatalf("%s: no %s within %v", p.name, what, d)
		}
	}
}

func ev(kind string) func(event) bool { return func(e event) bool { return e.Ev == kind } }

// waitDelivered waits up to d until r has reported a "stats" event from
// engine id for every sequence number in want, and returns how many are
// still missing then.
func waitDelivered(r *proc, id string, want map[uint64]bool, d time.Duration) int {
	h := hex.EncodeToString([]byte(id))
	deadline := time.Now().Add(d)
	for {
		missing := len(want)
		r.mu.Lock()
		seen := map[uint64]bool{}
		for _, e := range r.evs {
			if e.Ev == "stats" && e.ID == h && want[e.Seq] && !seen[e.Seq] {
				seen[e.Seq] = true
				missing--
			}
		}
		r.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// isTimeout reports whether a handshake failure's text is a timeout.
func isTimeout(err string) bool {
	err = strings.ToLower(err)
	return strings.Contains(err, "timed out") || strings.Contains(err, "timeout") || strings.Contains(err, "deadline exceeded")
}

func evID(kind, id string) func(event) bool {
	h := hex.EncodeToString([]byte(id))
	return func(e event) bool { return e.Ev == kind && e.ID == h }
}

func hbDisconnect(id string) func(event) bool {
	h := hex.EncodeToString([]byte(id))
	return func(e event) bool { return e.Ev == "disconnected" && e.HB && (id == "" || e.ID == h) }
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// checkBaseline checks a role's goroutines and descriptors came back.
func checkBaseline(t *testing.T, name string, b event) {
	t.Helper()
	t.Logf("%s baseline: goroutines %d -> %d, fds %d -> %d", name, b.G0, b.G1, b.FD0, b.FD1)
	if b.G1 > b.G0+1 || b.FD1 > b.FD0 {
		t.Errorf("%s did not return to baseline: goroutines %d -> %d, fds %d -> %d", name, b.G0, b.G1, b.FD0, b.FD1)
	}
}

type world struct {
	net               *Net
	coord, eng1, eng2 *Host
	ep                string
}

func newWorld(t *testing.T) *world {
	n := New(t)
	w := &world{net: n, coord: n.AddHost("coord", 1), eng1: n.AddHost("eng1", 11), eng2: n.AddHost("eng2", 12)}
	w.ep = "tcp://" + w.coord.Addr + ":" + coordPort
	return w
}

func (w *world) router(t *testing.T, env ...string) *proc {
	r := start(t, w.coord, "coordinator", "router", append([]string{"NETPROOF_BIND=tcp://*:" + coordPort}, env...)...)
	r.wait("bound", ev("bound"), 0, 30*time.Second)
	return r
}

func (w *world) engine(t *testing.T, h *Host, id string, env ...string) *proc {
	return start(t, h, id, "engine", append([]string{"NETPROOF_ID=" + id, "NETPROOF_EP=" + w.ep}, env...)...)
}

// A silent partition of one engine host under 2 % loss: both sides notice
// within interval + timeout + 1 s, the other engine keeps being served, and
// after the heal the engine reconnects, gets READY and its stats flow again.
func TestSilentPartitionDetectedAndHealed(t *testing.T) {
	w := newWorld(t)
	r := w.router(t)
	e1 := w.engine(t, w.eng1, "rank-1")
	e2 := w.engine(t, w.eng2, "rank-2")
	e1.wait("READY", ev("ready"), 0, 30*time.Second)
	e2.wait("READY", ev("ready"), 0, 30*time.Second)

	// 2 % random loss on every host for 4 s: stats keep flowing from both
	// engines and nobody is timed out.
	for _, h := range []*Host{w.coord, w.eng1, w.eng2} {
		h.Loss(0.02)
	}
	lossFrom := time.Now().UnixNano()
	time.Sleep(4 * time.Second)
	lossTo := time.Now().UnixNano()
	for _, h := range []*Host{w.coord, w.eng1, w.eng2} {
		h.Heal()
	}
	for _, id := range []string{"rank-1", "rank-2"} {
		n := r.count(evID("stats", id), lossFrom, lossTo)
		t.Logf("under 2%% loss for 4s: %d stats messages from %s (40 sent)", n, id)
		if n < 20 {
			t.Errorf("under 2%% loss only %d of 40 stats messages from %s arrived", n, id)
		}
	}
	if _, ok := r.find(hbDisconnect(""), 0); ok {
		t.Fatal("a heartbeat timeout under 2% loss")
	}

	// Silent partition of eng1.
	w.eng1.Partition()
	t0 := time.Now().UnixNano()
	rd := r.wait("heartbeat disconnect of rank-1", hbDisconnect("rank-1"), t0, detectMax)
	ed := e1.wait("heartbeat disconnect of the coordinator", hbDisconnect(""), t0, detectMax)
	routerTook, engineTook := time.Duration(rd.T-t0), time.Duration(ed.T-t0)
	t.Logf("silent partition noticed by the coordinator after %s, by the engine after %s (want <= %s)", ms(routerTook), ms(engineTook), detectWant)
	// The rest keeps serving: rank-2's stats still arrive.
	r.wait("stats from rank-2 during the partition", evID("stats", "rank-2"), rd.T, 10*time.Second)
	if _, ok := r.find(hbDisconnect("rank-2"), 0); ok {
		t.Fatal("rank-2 timed out during rank-1's partition")
	}

	time.Sleep(time.Second)
	t1 := time.Now().UnixNano() // just before the heal
	w.eng1.Heal()
	ready := e1.wait("READY after heal", ev("ready"), t1, 30*time.Second)
	st := r.wait("stats from rank-1 after heal", evID("stats", "rank-1"), t1, 30*time.Second)
	t.Logf("after heal: rank-1 READY again after %s, its stats at the coordinator after %s", ms(time.Duration(ready.T-t1)), ms(time.Duration(st.T-t1)))
	fmt.Printf("NETPROOF partition: coordinator noticed %s, engine noticed %s, READY after heal %s, stats after heal %s\n",
		ms(routerTook), ms(engineTook), ms(time.Duration(ready.T-t1)), ms(time.Duration(st.T-t1)))

	for _, p := range []*proc{e1, e2, r} {
		b := p.stop()
		checkBaseline(t, p.name, b)
		if (p == r || p == e1) && b.Stats.HeartbeatTimeouts < 1 {
			t.Errorf("%s stats %+v: heartbeat timeout not counted", p.name, b.Stats)
		}
		if p == e2 && b.Stats.HeartbeatTimeouts != 0 {
			t.Errorf("%s stats %+v: a heartbeat timeout on the host that was not partitioned", p.name, b.Stats)
		}
	}
}

// An engine host is partitioned and its engine process hangs (SIGSTOP: its
// kernel keeps the connection open); a restarted engine with the same
// identity starts on the host, which then heals. Under ROUTER handover the
// new process takes the identity over at once, well before the
// coordinator's (deliberately long) heartbeat timeout; without it, it is
// refused until the old connection goes.
func TestRestartedEngineReclaimsIdentity(t *testing.T) {
	for _, handover := range []bool{true, false} {
		name := map[bool]string{true: "handover", false: "refusal"}[handover]
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			r := w.router(t, "NETPROOF_HANDOVER="+map[bool]string{true: "1", false: "0"}[handover], "NETPROOF_HB_TIMEOUT=60s")
			e1 := w.engine(t, w.eng1, "rank-1")
			e1.wait("READY", ev("ready"), 0, 30*time.Second)

			w.eng1.Partition()
			e1.signal(syscall.SIGSTOP)
			t0 := time.Now().UnixNano()
			e1b := w.engine(t, w.eng1, "rank-1")
			time.Sleep(time.Second)
			t1 := time.Now().UnixNano() // just before the heal: packets may pass at once
			w.eng1.Heal()
			if !handover {
				// Refused again and again while the frozen connection holds
				// the identity.
				time.Sleep(4 * time.Second)
				if _, ok := e1b.find(ev("ready"), t0); ok {
					t.Fatal("restarted engine got READY while the old connection held its identity and handover was off")
				}
				e1b.stop()
				b := r.stop()
				t.Logf("without handover: %d refusals in 4 s", b.Stats.IdentityRefusals)
				if b.Stats.IdentityRefusals == 0 || b.Stats.Handovers != 0 {
					t.Errorf("coordinator stats: refusals %d handovers %d, want some and 0", b.Stats.IdentityRefusals, b.Stats.Handovers)
				}
				return
			}
			ready := e1b.wait("READY of the restarted engine", ev("ready"), t1, 30*time.Second)
			ho := r.wait("handover disconnect of the old connection", func(e event) bool { return e.Ev == "disconnected" && e.Handover }, t0, 30*time.Second)
			t.Logf("restarted engine READY %s after heal (old connection handed over at +%s)", ms(time.Duration(ready.T-t1)), ms(time.Duration(ho.T-t1)))
			fmt.Printf("NETPROOF handover: restarted engine READY %s after heal\n", ms(time.Duration(ready.T-t1)))
			e1.kill()
			e1b.stop()
			b := r.stop()
			checkBaseline(t, r.name, b)
			if b.Stats.Handovers != 1 || b.Stats.IdentityRefusals != 0 {
				t.Errorf("coordinator stats: handovers %d refusals %d, want 1 and 0", b.Stats.Handovers, b.Stats.IdentityRefusals)
			}
		})
	}
}

// 200 dialers on one host reconnecting to a restarted coordinator: the
// arrival spread of their reconnects, without and with jitter.
func TestReconnectStormSpread(t *testing.T) {
	const n = 200
	for _, c := range []struct {
		name, jitter string
	}{{"no-jitter", "-1"}, {"jitter-0.2", "0.2"}} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			// Heartbeats at the library defaults (2 s / 6 s), as deployed.
			env := []string{"NETPROOF_HB_IVL=2s", "NETPROOF_HB_TIMEOUT=6s"}
			// The router's pending-handshake pool holds every dialer (the
			// default 128 makes all 200, from one host, evict each other
			// at the first connect on a loaded machine: a herd the
			// eviction policy resolves slowly, and not what this measures).
			r := w.router(t, append(env, "NETPROOF_MAX_PENDING=512")...)
			d := start(t, w.eng2, "dialers", "dialers", append(env, "NETPROOF_N=200", "NETPROOF_EP="+w.ep,
				"NETPROOF_JITTER="+c.jitter, "NETPROOF_RECONNECT_MIN=100ms", "NETPROOF_RECONNECT_MAX=2s")...)
			d.wait("dialing", ev("dialing"), 0, 30*time.Second)
			waitCount(t, r, "connected", n, 0, 60*time.Second)
			r.kill() // the kernel resets its connections: every dialer loses it at once
			time.Sleep(1500 * time.Millisecond)
			// t0 before r2 starts: a dialer may reconnect between r2's bind
			// and the moment this test reads r2's "bound" line, and such an
			// early arrival must count (it used to be missed: 199 of 200).
			t0 := time.Now().UnixNano()
			r2 := w.router(t, append(env, "NETPROOF_MAX_PENDING=512")...)
			times := waitCount(t, r2, "connected", n, t0, 60*time.Second)
			slices.Sort(times)
			hist := map[int]int{}
			for _, x := range times {
				hist[int((x-t0)/int64(100*time.Millisecond))]++
			}
			t.Logf("%s: arrivals per 100 ms after restart: %v; rejected %d", c.name, hist, r2.count(ev("rejected"), 0, 1<<62))
			p := func(q float64) time.Duration { return time.Duration(times[int(q*float64(n-1))] - times[0]) }
			t.Logf("%s: %d reconnects after restart: first at +%s, spread max-min %s, p10..p90 %s",
				c.name, n, ms(time.Duration(times[0]-t0)), ms(p(1)), ms(p(0.9)-p(0.1)))
			fmt.Printf("NETPROOF storm %s: first +%s, spread %s, p10..p90 %s\n", c.name, ms(time.Duration(times[0]-t0)), ms(p(1)), ms(p(0.9)-p(0.1)))
			checkBaseline(t, "dialers", d.stop())
			r2.stop()
		})
	}
}

// waitCount waits for n events of kind since t0 and returns their times.
func waitCount(t *testing.T, p *proc, kind string, n int, t0 int64, d time.Duration) []int64 {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var times []int64
		p.mu.Lock()
		for _, e := range p.evs {
			if e.Ev == kind && e.T >= t0 {
				times = append(times, e.T)
			}
		}
		ch := p.cond
		p.mu.Unlock()
		if len(times) >= n {
			return times[:n]
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d %s events within %v", p.name, len(times), n, kind, d)
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

// Engines reach the coordinator, and a decode host a NIXL handshake
// listener, through a relay adding 50 ms ± 10 ms each way, with 2 % loss on
// every host: ZMTP and NIXL handshakes succeed, READY comes, stats flow,
// and nobody is timed out.
func TestLatencyAndLossFlow(t *testing.T) {
	w := newWorld(t)
	r := w.router(t)
	hs := start(t, w.coord, "handshake-listener", "hslisten")
	hs.wait("bound", ev("bound"), 0, 30*time.Second)
	relay := start(t, w.coord, "relay", "relay", "NETPROOF_LISTEN="+w.coord.Addr+":5556,"+w.coord.Addr+":5610",
		"NETPROOF_TARGET=127.0.0.1:"+coordPort+",127.0.0.1:5600", "NETPROOF_DELAY=50ms", "NETPROOF_DELAY_JITTER=10ms")
	relay.wait("bound", ev("bound"), 0, 30*time.Second)
	for _, h := range []*Host{w.coord, w.eng1, w.eng2} {
		h.Loss(0.02)
	}
	t0 := time.Now().UnixNano()
	via := "tcp://" + w.coord.Addr + ":5556"
	e1 := start(t, w.eng1, "rank-1", "engine", "NETPROOF_ID=rank-1", "NETPROOF_EP="+via)
	e2 := start(t, w.eng2, "rank-2", "engine", "NETPROOF_ID=rank-2", "NETPROOF_EP="+via)
	dec := start(t, w.eng2, "decode", "decode", "NETPROOF_EP=tcp://"+w.coord.Addr+":5610")
	for _, e := range []*proc{e1, e2} {
		c := e.wait("connected", ev("connected"), t0, 30*time.Second)
		rd := e.wait("READY", ev("ready"), t0, 30*time.Second)
		t.Logf("%s through 50±10 ms and 2%% loss: connected +%s, READY %s after connecting", e.name,
			ms(time.Duration(c.T-t0)), ms(time.Duration(rd.T-c.T)))
	}
	from := time.Now().UnixNano()
	time.Sleep(5 * time.Second)
	to := time.Now().UnixNano()
	// Every stats message an engine queued in the window must reach the
	// router: loss costs retransmissions (TCP's RTO, 200 ms and doubling)
	// and the relay 50±10 ms per direction, well under a second even for a
	// segment lost twice, so 20 s is generous. How many an engine queues in
	// 5 s (one every 100 ms: 50) depends on the machine's load, so only a
	// fifth of them is required; how many arrive inside the window is
	// reported, not asserted (the window's edges and the delay move it).
	for _, e := range []*proc{e1, e2} {
		queued := map[uint64]bool{}
		e.mu.Lock()
		for _, x := range e.evs {
			if x.Ev == "sent" && x.T >= from && x.T < to {
				queued[x.Seq] = true
			}
		}
		e.mu.Unlock()
		if len(queued) < 10 {
			t.Errorf("%s: queued only %d stats messages in 5 s (one every 100 ms: 50)", e.name, len(queued))
		}
		missing := waitDelivered(r, e.name, queued, 20*time.Second)
		n := r.count(evID("stats", e.name), from, to)
		t.Logf("%s: %d stats messages queued in 5 s (50 ticks), %d of them not delivered, %d arrived in the window", e.name, len(queued), missing, n)
		fmt.Printf("NETPROOF latency+loss %s: %d of 50 stats queued in 5 s, %d undelivered, %d arrived in the window\n", e.name, len(queued), missing, n)
		if missing > 0 {
			t.Errorf("%s: %d of %d stats messages queued never reached the router within 20 s through latency and loss", e.name, missing, len(queued))
		}
	}
	for _, p := range []*proc{r, e1, e2} {
		if e, ok := p.find(hbDisconnect(""), 0); ok {
			t.Fatalf("%s: heartbeat timeout under latency and loss: %s", p.name, e.Err)
		}
	}
	// NIXL handshakes: at least 5 must succeed; how long they take depends
	// on the load, so wait for them (bounded) rather than counting what a
	// fixed time gave. A failure that is not a timeout (a wrong or broken
	// answer) fails the test; a timeout (5 s per fetch, where loss alone
	// needs a SYN lost three times in a row) is tolerated up to a fifth of
	// the attempts.
	fetched := func() int { return dec.count(ev("fetched"), 0, 1<<62) }
	for deadline := time.Now().Add(60 * time.Second); fetched() < 5 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	var rtts []time.Duration
	var timeouts, otherFails int
	var firstFail string
	dec.mu.Lock()
	for _, e := range dec.evs {
		switch e.Ev {
		case "fetched":
			rtts = append(rtts, time.Duration(e.RTT))
		case "fetch-failed":
			if isTimeout(e.Err) {
				timeouts++
			} else {
				otherFails++
			}
			if firstFail == "" {
				firstFail = e.Err
			}
		}
	}
	dec.mu.Unlock()
	if len(rtts) < 5 || otherFails > 0 || timeouts*5 > len(rtts)+timeouts {
		t.Fatalf("NIXL handshakes through latency and loss: %d succeeded, %d timed out, %d failed otherwise (first: %s)",
			len(rtts), timeouts, otherFails, firstFail)
	}
	if timeouts > 0 {
		t.Logf("NIXL handshakes: %d of %d timed out (first: %s)", timeouts, len(rtts)+timeouts, firstFail)
	}
	slices.Sort(rtts)
	t.Logf("NIXL handshakes through 50±10 ms and 2%% loss: %d, %d timed out, request RTT median %s, max %s", len(rtts), timeouts, ms(rtts[len(rtts)/2]), ms(rtts[len(rtts)-1]))
	fmt.Printf("NETPROOF latency+loss handshakes: %d ok, %d timed out, rtt median %s max %s\n", len(rtts), timeouts, ms(rtts[len(rtts)/2]), ms(rtts[len(rtts)-1]))
	dec.stop()
	hs.stop()
	for _, h := range []*Host{w.coord, w.eng1, w.eng2} {
		h.Heal()
	}
	for _, p := range []*proc{e1, e2, r} {
		checkBaseline(t, p.name, p.stop())
	}
	relay.stop()
}

// The references across hosts: zmqguard's DP coordinator on one host, two
// engines (dppeer.Engine) on two others and a front-end on a fourth.
// A silent partition of engine 0's host is noticed by the coordinator's
// back sockets and by the engine within the bound, engine 1's stats keep
// reaching the front-end; after the heal engine 0 reconnects, gets READY
// again and its stats reach the front-end again.
func TestReferencesAcrossPartition(t *testing.T) {
	w := newWorld(t)
	fe := w.net.AddHost("front", 21)
	c := start(t, w.coord, "coordinator", "vcoord", "NETPROOF_ENGINES=2")
	c.wait("bound", ev("bound"), 0, 30*time.Second)
	coord := "NETPROOF_COORD=" + w.coord.Addr
	e0 := start(t, w.eng1, "engine-0", "vengine", "NETPROOF_INDEX=0", coord)
	e1 := start(t, w.eng2, "engine-1", "vengine", "NETPROOF_INDEX=1", coord)
	f := start(t, fe, "front-end", "vfront", coord)
	e0.wait("READY", ev("ready"), 0, 30*time.Second)
	e1.wait("READY", ev("ready"), 0, 30*time.Second)
	waiting := func(i, above int) func(event) bool {
		return func(e event) bool { return e.Ev == "fstats" && len(e.W) == 2 && e.W[i] > above }
	}
	f.wait("stats of both engines at the front-end", func(e event) bool {
		return e.Ev == "fstats" && len(e.W) == 2 && e.W[0] > 0 && e.W[1] > 0
	}, 0, 30*time.Second)

	w.eng1.Partition()
	t0 := time.Now().UnixNano()
	var last event
	f.mu.Lock()
	for _, e := range f.evs {
		if e.Ev == "fstats" && len(e.W) == 2 {
			last = e
		}
	}
	f.mu.Unlock()
	w0 := last.W[0]
	fromEng1 := func(port string) func(event) bool {
		return func(e event) bool {
			return e.Ev == "disconnected" && e.HB && strings.HasSuffix(e.Endpoint, ":"+port)
		}
	}
	cd := c.wait("back output heartbeat timeout", fromEng1("5602"), t0, detectMax)
	cp := c.wait("back publish heartbeat timeout", fromEng1("5603"), t0, detectMax)
	ed := e0.wait("engine heartbeat timeout", hbDisconnect(""), t0, detectMax)
	t.Logf("partition of engine 0's host: coordinator back_output noticed after %s, back_publish after %s, engine after %s",
		ms(time.Duration(cd.T-t0)), ms(time.Duration(cp.T-t0)), ms(time.Duration(ed.T-t0)))
	// Engine 1 keeps being served: its waiting count keeps rising at the
	// front-end.
	mid := f.wait("a stats publication after the timeouts", waiting(1, 0), cp.T, 10*time.Second)
	f.wait("engine 1's stats during the partition", waiting(1, mid.W[1]), cp.T, 10*time.Second)

	time.Sleep(500 * time.Millisecond)
	t1 := time.Now().UnixNano()
	w.eng1.Heal()
	ready := e0.wait("READY after heal", ev("ready"), t1, 30*time.Second)
	back := f.wait("engine 0's stats at the front-end after heal", waiting(0, w0+5), t1, 30*time.Second)
	t.Logf("after heal: engine 0 READY after %s, its new stats at the front-end after %s",
		ms(time.Duration(ready.T-t1)), ms(time.Duration(back.T-t1)))
	fmt.Printf("NETPROOF references: coordinator noticed %s/%s, engine %s; READY after heal %s, front-end stats %s\n",
		ms(time.Duration(cd.T-t0)), ms(time.Duration(cp.T-t0)), ms(time.Duration(ed.T-t0)),
		ms(time.Duration(ready.T-t1)), ms(time.Duration(back.T-t1)))

	for _, p := range []*proc{f, e0, e1} {
		checkBaseline(t, p.name, p.stop())
	}
	checkBaseline(t, c.name, c.stop())
	cs, _ := c.find(ev("cstats"), 0)
	t.Logf("coordinator heartbeat timeouts by socket: %v", cs.HBTimeouts)
	if cs.HBTimeouts["back_output"] < 1 || cs.HBTimeouts["back_publish"] < 1 {
		t.Errorf("coordinator heartbeat timeouts by socket %v: want the back sockets counted", cs.HBTimeouts)
	}
}

// A KV-event publisher (kvevents.Publisher, replay buffer on) on one host
// and a subscriber (kvevents.Subscriber, replay endpoint configured) on
// another; the publisher's host is partitioned silently while it keeps
// publishing. Both sides notice within interval + timeout + 1 s; after the
// heal the SUB reconnects, sees the gap and replays it, so every batch
// published is delivered exactly once, in order, and nothing is lost.
func TestKVEventsReplayAcrossPartition(t *testing.T) {
	n := New(t)
	ph, sh := n.AddHost("kvpub", 31), n.AddHost("kvsub", 32)
	pub := start(t, ph, "kv-publisher", "kvpub")
	pub.wait("bound", ev("bound"), 0, 30*time.Second)
	sub := start(t, sh, "kv-subscriber", "kvsub", "NETPROOF_PUB="+ph.Addr)
	live := func(kind string) func(event) bool {
		return func(e event) bool { return e.Ev == kind && strings.HasSuffix(e.Endpoint, ":5557") }
	}
	sub.wait("live connection", live("connected"), 0, 30*time.Second)
	sub.wait("the first 20 batches", func(e event) bool { return e.Ev == "batch" && e.Seq >= 19 }, 0, 30*time.Second)

	ph.Partition()
	t0 := time.Now().UnixNano()
	sd := sub.wait("heartbeat disconnect of the live SUB", func(e event) bool { return live("disconnected")(e) && e.HB }, t0, detectMax)
	pd := pub.wait("heartbeat disconnect of the subscriber", hbDisconnect(""), t0, detectMax)
	subTook, pubTook := time.Duration(sd.T-t0), time.Duration(pd.T-t0)
	t.Logf("silent partition of the publisher's host: subscriber noticed after %s, publisher after %s (want <= %s)", ms(subTook), ms(pubTook), detectWant)
	time.Sleep(time.Second)
	t1 := time.Now().UnixNano() // just before the heal
	during := pub.count(ev("published"), t0, t1)
	if during == 0 {
		t.Fatal("nothing was published during the partition")
	}
	var last event
	ok := false
	pub.mu.Lock()
	for _, e := range pub.evs {
		if e.Ev == "published" && e.T < t1 {
			last, ok = e, true
		}
	}
	pub.mu.Unlock()
	if !ok {
		t.Fatal("no batch published before the heal")
	}
	ph.Heal()
	rc := sub.wait("live reconnection after heal", live("connected"), t1, 30*time.Second)
	rp := sub.wait("a replayed batch after heal", func(e event) bool { return e.Ev == "batch" && e.Replayed }, t1, 30*time.Second)
	cu := sub.wait("the batch published last before the heal", func(e event) bool { return e.Ev == "batch" && e.Seq == last.Seq }, t1, 30*time.Second)
	t.Logf("after heal: SUB reconnected after %s, first replayed batch after %s, caught up (seq %d) after %s; %d batches published during the partition",
		ms(time.Duration(rc.T-t1)), ms(time.Duration(rp.T-t1)), last.Seq, ms(time.Duration(cu.T-t1)), during)
	fmt.Printf("NETPROOF kv-events: subscriber noticed %s, publisher noticed %s; after heal reconnected %s, replayed %s, caught up %s\n",
		ms(subTook), ms(pubTook), ms(time.Duration(rc.T-t1)), ms(time.Duration(rp.T-t1)), ms(time.Duration(cu.T-t1)))

	// Let a few live batches follow, then stop publishing and check the
	// whole delivered sequence.
	sub.wait("live batches after the catch-up", func(e event) bool { return e.Ev == "batch" && e.Seq >= last.Seq+10 && !e.Replayed }, cu.T, 30*time.Second)
	pub.signal(syscall.SIGUSR1)
	done := pub.wait("publishing stopped", ev("pubdone"), 0, 30*time.Second)
	if done.N == 0 {
		t.Fatal("publisher reports no batch published")
	}
	sub.wait("the last batch published", func(e event) bool { return e.Ev == "batch" && e.Seq == done.N-1 }, 0, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // a duplicate would show up now
	var seqs []uint64
	replayed := 0
	sub.mu.Lock()
	for _, e := range sub.evs {
		switch e.Ev {
		case "batch":
			seqs = append(seqs, e.Seq)
			if e.Replayed {
				replayed++
			}
		case "lost", "reset":
			t.Errorf("subscriber reported %s (from %d to %d, seq %d)", e.Ev, e.From, e.To, e.Seq)
		}
	}
	sub.mu.Unlock()
	if uint64(len(seqs)) != done.N {
		t.Errorf("%d batches delivered, %d published", len(seqs), done.N)
	}
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("delivery %d is seq %d: not every batch exactly once in order (%v)", i, s, seqs)
		}
	}
	if replayed == 0 {
		t.Error("no batch came from the replay endpoint")
	}
	t.Logf("%d batches published and delivered in order exactly once, %d of them replayed", done.N, replayed)

	checkBaseline(t, sub.name, sub.stop())
	st, ok := sub.find(ev("kvstats"), 0)
	if !ok || st.KV == nil {
		t.Fatal("subscriber reported no stats")
	}
	t.Logf("subscriber totals: batches %d gaps %d replays %d replayed %d lost %d duplicates %d resets %d",
		st.KV.Batches, st.KV.Gaps, st.KV.Replays, st.KV.Replayed, st.KV.Lost, st.KV.Duplicates, st.KV.Resets)
	// The partition ends in a new connection: the subscriber proves the
	// publisher is the run it followed (a replay from the last batch it
	// delivered, digest compared, issue 35) and that replay carries the
	// batches missed; a live gap seen first is replayed the same way.
	if st.KV.Lost != 0 || st.KV.Resets != 0 || st.KV.Gaps+st.KV.ContinuityProven == 0 || st.KV.Replayed == 0 || st.KV.Batches != done.N {
		t.Errorf("subscriber totals %+v: want no loss or reset, the partition's batches replayed (a gap or a proven new connection), %d batches", *st.KV, done.N)
	}
	checkBaseline(t, pub.name, pub.stop())
}
