package netproof

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/vllm"
)

// The roles below run in child processes (this test binary re-executed
// inside a namespace with NETPROOF_ROLE set); they report what happens as
// JSON lines on stdout and stop when stdin closes.

// event is one line a role prints.
type event struct {
	Ev string `json:"ev"`
	// ID is the peer identity in hex.
	ID string `json:"id,omitempty"`
	// T is the wall clock in Unix nanoseconds (one clock for every
	// process of the machine).
	T int64 `json:"t"`
	// HB: a disconnect whose cause is socket.ErrHeartbeatTimeout;
	// Handover: one whose cause says a ROUTER identity was taken over.
	HB       bool   `json:"hb,omitempty"`
	Handover bool   `json:"handover,omitempty"`
	Err      string `json:"err,omitempty"`
	// Baseline report: goroutines and descriptors before the sockets were
	// made and after they were closed.
	G0  int `json:"g0,omitempty"`
	G1  int `json:"g1,omitempty"`
	FD0 int `json:"fd0,omitempty"`
	FD1 int `json:"fd1,omitempty"`
	// Stats is the socket's counters at exit.
	Stats *socket.Stats `json:"stats,omitempty"`
	// Endpoint is the socket endpoint of a connection event.
	Endpoint string `json:"endpoint,omitempty"`
	// W holds the waiting counts per engine of a front-end's stats
	// publication; HBTimeouts a coordinator's heartbeat timeouts by socket.
	W          []int             `json:"w,omitempty"`
	HBTimeouts map[string]uint64 `json:"hb_timeouts,omitempty"`
	// RTT is a decode client's handshake round trip (ns).
	RTT int64 `json:"rtt,omitempty"`
	// Seq is a KV-event batch's sequence number, or an engine's stats
	// message's (Replayed: the batch came from the replay endpoint); From
	// and To bound a lost range; N counts the batches a publisher
	// published.
	Seq      uint64 `json:"seq,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	From     uint64 `json:"from,omitempty"`
	To       uint64 `json:"to,omitempty"`
	N        uint64 `json:"n,omitempty"`
	// KV is a KV-event subscriber's totals at exit.
	KV *kvevents.SourceStats `json:"kv,omitempty"`
}

var outMu sync.Mutex

func emit(e event) {
	if e.T == 0 {
		e.T = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

func envDur(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil {
			return d
		}
	}
	return def
}

func fds() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// roleOptions reads the liveness options every role takes from the
// environment.
func roleOptions() socket.Options {
	o := socket.DefaultOptions()
	o.HeartbeatInterval = envDur("NETPROOF_HB_IVL", 500*time.Millisecond)
	o.HeartbeatTimeout = envDur("NETPROOF_HB_TIMEOUT", 1500*time.Millisecond)
	o.ReconnectMin = envDur("NETPROOF_RECONNECT_MIN", 100*time.Millisecond)
	o.ReconnectMax = envDur("NETPROOF_RECONNECT_MAX", time.Second)
	o.Guard.HandshakeTimeout = 2 * time.Second
	if v := os.Getenv("NETPROOF_JITTER"); v != "" {
		o.ReconnectJitter, _ = strconv.ParseFloat(v, 64)
	}
	o.RouterHandover = os.Getenv("NETPROOF_HANDOVER") == "1"
	o.OnEvent = func(e socket.Event) {
		switch e.Kind {
		case socket.EventConnected:
			emit(event{Ev: "connected", ID: hex.EncodeToString(e.Peer.Identity()), Endpoint: e.Endpoint})
		case socket.EventDisconnected:
			emit(event{Ev: "disconnected", ID: hex.EncodeToString(e.Peer.Identity()), Endpoint: e.Endpoint,
				HB: errors.Is(e.Err, socket.ErrHeartbeatTimeout), Handover: strings.Contains(e.Err.Error(), "identity taken over by a new connection"), Err: e.Err.Error()})
		case socket.EventRejected:
			emit(event{Ev: "rejected", Err: e.Err.Error()})
		}
	}
	return o
}

// stdinClosed is closed when the parent closes our stdin.
func stdinClosed() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString(0)
		close(ch)
	}()
	return ch
}

// TestNetproofHelper runs a role when NETPROOF_ROLE is set (in a child
// process); in a normal run it does nothing.
func TestNetproofHelper(t *testing.T) {
	role := os.Getenv("NETPROOF_ROLE")
	if role == "" {
		return
	}
	// Start the runtime's network poller (its descriptors stay open for
	// the life of the process) before taking the baseline.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	g0, fd0 := runtime.NumGoroutine(), fds()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	stop := stdinClosed()
	var socks []*socket.Socket
	var err error
	switch role {
	case "router":
		socks, err = runRouter(ctx, stop)
	case "engine":
		socks, err = runEngine(ctx, stop)
	case "dialers":
		socks, err = runDialers(ctx, stop)
	case "relay":
		err = runRelay(ctx, stop)
	case "vcoord":
		err = runCoordinator(ctx, stop)
	case "vengine":
		socks, err = runVEngine(ctx, stop)
	case "vfront":
		socks, err = runVFront(ctx, stop)
	case "hslisten":
		err = runHandshakeListener(ctx, stop)
	case "decode":
		err = runDecode(ctx, stop)
	case "kvpub":
		err = runKVPublisher(ctx, stop)
	case "kvsub":
		err = runKVSubscriber(ctx, stop)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		emit(event{Ev: "error", Err: err.Error()})
		t.Fatal(err)
	}
	var st socket.Stats
	for _, s := range socks {
		if len(socks) == 1 {
			st = s.Stats()
		}
		s.Close()
	}
	// Goroutines of closed connections end shortly after Close returns
	// (timer callbacks, the stdin reader is ours).
	var g1 int
	for range 100 {
		if g1 = runtime.NumGoroutine(); g1 <= g0+1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	emit(event{Ev: "baseline", G0: g0, G1: g1, FD0: fd0, FD1: fds(), Stats: &st})
}

// runRouter is the coordinator host: a ROUTER on NETPROOF_BIND that answers
// each "hello" with "READY" and reports every "stats" message.
func runRouter(ctx context.Context, stop <-chan struct{}) ([]*socket.Socket, error) {
	o := roleOptions()
	if v := os.Getenv("NETPROOF_MAX_PENDING"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("NETPROOF_MAX_PENDING %q: %v", v, err)
		}
		o.Guard.MaxPendingHandshakes = n
	}
	r, err := socket.New("ROUTER", o)
	if err != nil {
		return nil, err
	}
	if err := r.Bind(os.Getenv("NETPROOF_BIND")); err != nil {
		r.Close()
		return nil, err
	}
	emit(event{Ev: "bound"})
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := r.Recv(rctx)
			if err != nil {
				return
			}
			if len(m.Frames) < 2 {
				continue
			}
			id := hex.EncodeToString(m.Frames[0])
			switch string(m.Frames[1]) {
			case "hello":
				emit(event{Ev: "hello", ID: id})
				r.Send(rctx, m.Frames[0], []byte("READY"))
			case "stats":
				var seq uint64
				if len(m.Frames) > 2 {
					seq, _ = strconv.ParseUint(string(m.Frames[2]), 10, 64)
				}
				emit(event{Ev: "stats", ID: id, Seq: seq})
			}
		}
	}()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	rcancel()
	<-done
	return []*socket.Socket{r}, nil
}

// runEngine is an engine host: a DEALER with identity NETPROOF_ID dialing
// NETPROOF_EP, saying "hello" on every connection, reporting "READY", and
// sending "stats" with a sequence number every 100 ms (each queued one
// reported as "sent" with its Seq).
func runEngine(ctx context.Context, stop <-chan struct{}) ([]*socket.Socket, error) {
	o := roleOptions()
	o.Identity = []byte(os.Getenv("NETPROOF_ID"))
	connected := make(chan struct{}, 16)
	onEvent := o.OnEvent
	o.OnEvent = func(e socket.Event) {
		onEvent(e)
		if e.Kind == socket.EventConnected {
			select {
			case connected <- struct{}{}:
			default:
			}
		}
	}
	d, err := socket.New("DEALER", o)
	if err != nil {
		return nil, err
	}
	if err := d.Dial(os.Getenv("NETPROOF_EP")); err != nil {
		d.Close()
		return nil, err
	}
	ectx, ecancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			m, err := d.Recv(ectx)
			if err != nil {
				return
			}
			if string(m.Frames[0]) == "READY" {
				emit(event{Ev: "ready"})
			}
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		send := func(frames ...[]byte) error {
			sctx, c := context.WithTimeout(ectx, 50*time.Millisecond)
			defer c()
			return d.Send(sctx, frames...)
		}
		var seq uint64
		for {
			select {
			case <-ectx.Done():
				return
			case <-connected:
				send([]byte("hello"))
			case <-tick.C:
				// Numbered, and reported once queued ("sent"), so that a
				// test can check that every one queued arrives.
				seq++
				if send([]byte("stats"), strconv.AppendUint(nil, seq, 10)) == nil {
					emit(event{Ev: "sent", Seq: seq})
				}
			}
		}
	}()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	ecancel()
	wg.Wait()
	return []*socket.Socket{d}, nil
}

// runDialers is a host of NETPROOF_N DEALERs (no identity) dialing
// NETPROOF_EP, as many engines reconnecting to one coordinator.
func runDialers(ctx context.Context, stop <-chan struct{}) ([]*socket.Socket, error) {
	n, _ := strconv.Atoi(os.Getenv("NETPROOF_N"))
	o := roleOptions()
	o.OnEvent = nil
	var socks []*socket.Socket
	for range n {
		d, err := socket.New("DEALER", o)
		if err != nil {
			return socks, err
		}
		socks = append(socks, d)
		if err := d.Dial(os.Getenv("NETPROOF_EP")); err != nil {
			return socks, err
		}
	}
	emit(event{Ev: "dialing"})
	select {
	case <-stop:
	case <-ctx.Done():
	}
	return socks, nil
}

// runRelay is a delaying TCP relay: it accepts on each address of the
// comma-separated NETPROOF_LISTEN and forwards every connection to the
// address at the same place in NETPROOF_TARGET, holding each chunk of bytes
// for NETPROOF_DELAY ± NETPROOF_DELAY_JITTER (uniform) in each direction,
// without reordering (a chunk never leaves before the one ahead of it). It
// stands in for link latency where tc netem is not available.
func runRelay(ctx context.Context, stop <-chan struct{}) error {
	delay := envDur("NETPROOF_DELAY", 50*time.Millisecond)
	jitter := envDur("NETPROOF_DELAY_JITTER", 10*time.Millisecond)
	listens, targets := strings.Split(os.Getenv("NETPROOF_LISTEN"), ","), strings.Split(os.Getenv("NETPROOF_TARGET"), ",")
	if len(listens) != len(targets) {
		return fmt.Errorf("relay: %d listen addresses for %d targets", len(listens), len(targets))
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, a := range listens {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	emit(event{Ev: "bound"})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	for i, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			relayAccept(ln, targets[i], delay, jitter, &wg, &mu, &conns)
		}()
	}
	select {
	case <-stop:
	case <-ctx.Done():
	}
	for _, ln := range lns {
		ln.Close()
	}
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	return nil
}

// relayAccept serves one relay listener until it is closed.
func relayAccept(ln net.Listener, target string, delay, jitter time.Duration, wg *sync.WaitGroup, mu *sync.Mutex, conns *[]net.Conn) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		mu.Lock()
		*conns = append(*conns, c, up)
		mu.Unlock()
		wg.Add(2)
		go func() { defer wg.Done(); pipeDelayed(up, c, delay, jitter) }()
		go func() { defer wg.Done(); pipeDelayed(c, up, delay, jitter) }()
	}
}

// pipeDelayed copies src to dst, each chunk delayed; it closes both ends
// when either fails.
func pipeDelayed(dst, src net.Conn, delay, jitter time.Duration) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024) // bounded: a full queue stops reading src
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
		for range q { // let the reader finish
		}
	}()
	var last time.Time
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			d := delay + time.Duration((2*rand.Float64()-1)*float64(jitter))
			due := time.Now().Add(d)
			if due.Before(last) {
				due = last
			}
			last = due
			q <- chunk{b: append([]byte(nil), buf[:n]...), due: due}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// runCoordinator is the real reference: zmqguard's vLLM DP coordinator
// binding its three sockets on ports 5601 (front), 5602 (back output) and
// 5603 (back publish) for NETPROOF_ENGINES engines, with the heartbeat
// options of every role.
func runCoordinator(ctx context.Context, stop <-chan struct{}) error {
	n, _ := strconv.Atoi(os.Getenv("NETPROOF_ENGINES"))
	c, err := coordinator.New(coordinator.Config{
		Front: "tcp://*:5601", BackOutput: "tcp://*:5602", BackPublish: "tcp://*:5603",
		Engines: n, Socket: roleOptions(),
	})
	if err != nil {
		return err
	}
	emit(event{Ev: "bound"})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(rctx) }()
	select {
	case <-stop:
	case <-ctx.Done():
	case err = <-done:
		cancel()
		c.Close()
		return err
	}
	cancel()
	<-done
	c.Close()
	st := c.Stats()
	emit(event{Ev: "cstats", HBTimeouts: map[string]uint64{
		"front": st.Front.Socket.HeartbeatTimeouts, "back_output": st.BackOutput.Socket.HeartbeatTimeouts,
		"back_publish": st.BackPublish.Socket.HeartbeatTimeouts,
	}})
	return nil
}

// runVEngine is a vLLM engine core as the coordinator sees it
// (dppeer.Engine, index NETPROOF_INDEX, coordinator at NETPROOF_COORD):
// it reports every READY and sends stats every 100 ms, its waiting count
// rising by one each time.
func runVEngine(ctx context.Context, stop <-chan struct{}) ([]*socket.Socket, error) {
	idx, _ := strconv.Atoi(os.Getenv("NETPROOF_INDEX"))
	host := os.Getenv("NETPROOF_COORD")
	e, err := dppeer.DialEngine(dppeer.EngineConfig{
		BackPublish: "tcp://" + host + ":5603", BackOutput: "tcp://" + host + ":5602", Socket: roleOptions(),
	})
	if err != nil {
		return nil, err
	}
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for e.WaitReady(ectx) == nil {
			emit(event{Ev: "ready"})
		}
	}()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for step := 1; ; step++ {
			select {
			case <-ectx.Done():
				return
			case <-tick.C:
			}
			sctx, c := context.WithTimeout(ectx, 50*time.Millisecond)
			e.SendStats(sctx, idx, step, 1, 0, step)
			c()
		}
	}()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	return nil, e.Close()
}

// runVFront is a vLLM API front-end (dppeer.FrontEnd) reporting the
// waiting counts of every stats publication.
func runVFront(ctx context.Context, stop <-chan struct{}) ([]*socket.Socket, error) {
	f, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{
		Front: "tcp://" + os.Getenv("NETPROOF_COORD") + ":5601", Socket: roleOptions(),
	})
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for fctx.Err() == nil {
			counts, _, _, err := f.NextStats(fctx)
			if err != nil || counts == nil {
				continue
			}
			w := make([]int, len(counts))
			for i, c := range counts {
				w[i] = c[0]
			}
			emit(event{Ev: "fstats", W: w})
		}
	}()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	cancel()
	<-done
	return nil, f.Close()
}

// hsHash is the compatibility hash the handshake roles serve and expect.
const hsHash = "c940fa5f8b20d4d98d462af8137fb052eb4827d811a4ad4dcde0138bddb6d468"

// runHandshakeListener is a prefill host's NIXL handshake listener
// (handshake.Listener) on port 5600 serving rank (0, 0) of "prefill-0".
func runHandshakeListener(ctx context.Context, stop <-chan struct{}) error {
	const blockLen = 16 * 8 * 128 * 2
	m := handshake.NixlAgentMetadata{
		EngineID: "prefill-0", AgentMetadata: []byte("netproof-agent"), KVCachesBaseAddr: []uint64{0x7f0000000000},
		NumBlocks: 1000, BlockLens: []int64{blockLen}, BlockStrides: []int64{blockLen},
		KVCacheLayout: "HND", BlockSize: 16, AttnBackendName: "FLASH_ATTN", PhysicalBlocksPerLogicalKVBlock: 1,
		DCPSize: 1, PCPSize: 1,
	}
	b, err := handshake.EncodePayload(hsHash, &m, vllm.Latest())
	if err != nil {
		return err
	}
	l, err := handshake.NewListener(handshake.ListenerConfig{
		Endpoint: "tcp://*:5600", Payloads: map[handshake.Rank][]byte{{}: b}, Socket: roleOptions(),
	})
	if err != nil {
		return err
	}
	emit(event{Ev: "bound"})
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Serve(lctx) }()
	select {
	case <-stop:
	case <-ctx.Done():
	}
	cancel()
	<-done
	return l.Close()
}

// runDecode is a decode host fetching rank (0, 0) from NETPROOF_EP every
// 200 ms with handshake.Fetch (a fresh REQ socket each time, as vLLM does),
// reporting each result.
func runDecode(ctx context.Context, stop <-chan struct{}) error {
	for {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := handshake.Fetch(fctx, os.Getenv("NETPROOF_EP"), handshake.Request{}, handshake.ClientOptions{
			Timeout: 5 * time.Second, ExpectedHash: hsHash, ExpectedEngineID: "prefill-0",
		})
		cancel()
		if err != nil {
			emit(event{Ev: "fetch-failed", Err: err.Error()})
		} else {
			emit(event{Ev: "fetched", RTT: int64(r.RTT)})
		}
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runKVPublisher is an engine host's KV-event publisher
// (kvevents.Publisher): live XPUB on port 5557, replay ROUTER on 5558,
// one batch (a BlockStored of one block, hash = seq) every NETPROOF_KV_IVL
// (default 50 ms) from the first subscriber on, until SIGUSR1; then it
// reports how many it published ("pubdone") and idles until stdin closes.
func runKVPublisher(ctx context.Context, stop <-chan struct{}) error {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	p, err := kvevents.NewPublisher(kvevents.PublisherConfig{
		Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://*:5558", Topic: "kv", Socket: roleOptions(),
	})
	if err != nil {
		return err
	}
	defer p.Close()
	emit(event{Ev: "bound"})
	for p.Stats().Subscribers == 0 {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	tick := time.NewTicker(envDur("NETPROOF_KV_IVL", 50*time.Millisecond))
	defer tick.Stop()
	for seq := uint64(0); ; seq++ {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-usr1:
			emit(event{Ev: "pubdone", N: seq})
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case <-tick.C:
		}
		if err := p.Publish(kvevents.Event{Type: kvevents.BlockStored, BlockHashes: []kvevents.Hash{kvevents.IntHash(seq)},
			BlockSize: 16}); err != nil {
			return fmt.Errorf("publish %d: %w", seq, err)
		}
		emit(event{Ev: "published", Seq: seq})
	}
}

// runKVSubscriber is a KV-event subscriber (kvevents.Subscriber, FromStart)
// following the publisher at NETPROOF_PUB (live port 5557, replay 5558) and
// reporting every update: "batch" (seq, replayed), "lost" and "reset".
// Its sockets' connection events come from roleOptions.
func runKVSubscriber(ctx context.Context, stop <-chan struct{}) error {
	host := os.Getenv("NETPROOF_PUB")
	s, err := kvevents.NewSubscriber(kvevents.Config{
		Topic: "kv", FromStart: true, Socket: roleOptions(), ReplayTimeout: 5 * time.Second,
		Handler: func(_ context.Context, u kvevents.Update) error {
			switch u.Kind {
			case kvevents.UpdateBatch:
				var h uint64
				if len(u.Batch.Events) == 1 && len(u.Batch.Events[0].BlockHashes) == 1 {
					h = u.Batch.Events[0].BlockHashes[0].Uint64()
				}
				if h != u.Seq {
					return fmt.Errorf("batch %d carries block hash %d", u.Seq, h)
				}
				emit(event{Ev: "batch", Seq: u.Seq, Replayed: u.Batch.Replayed})
			case kvevents.UpdateLost:
				emit(event{Ev: "lost", From: u.From, To: u.To})
			case kvevents.UpdateReset:
				emit(event{Ev: "reset", Seq: u.Seq})
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	if err := s.Add(kvevents.Source{Name: "engine", Live: "tcp://" + host + ":5557", Replay: "tcp://" + host + ":5558"}); err != nil {
		s.Close()
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	select {
	case <-stop:
	case <-ctx.Done():
	case err = <-done:
		cancel()
		s.Close()
		return err
	}
	cancel()
	err = <-done
	s.Close()
	st := s.Stats()
	emit(event{Ev: "kvstats", KV: &st})
	return err
}
