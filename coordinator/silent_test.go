package coordinator

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// freezeProxy forwards TCP connections from a loopback listener to target,
// dialing from src (a loopback address of its own, so the coordinator sees
// a distinct host), until freeze: from then on every byte read in either
// direction is discarded, as on a silent partition (nothing arrives, no FIN,
// no RST).
type freezeProxy struct {
	ln     net.Listener
	target string
	src    *net.TCPAddr
	frozen atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezeProxy(t *testing.T, target string, src *net.TCPAddr) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezeProxy{ln: ln, target: target, src: src}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) endpoint() string { return "tcp://" + p.ln.Addr().String() }

func (p *freezeProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		d := net.Dialer{Timeout: 5 * time.Second}
		if p.src != nil {
			d.LocalAddr = p.src
		}
		up, err := d.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			dst.Close()
			return
		}
	}
}

func (p *freezeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// An engine whose connections go silent (both back sockets, through a proxy
// that stops forwarding) is named by its engine index in the coordinator's
// warning, on the back output socket by its connection and on the back
// publish socket by its host, and counted per engine; the engine that
// stays alive is not.
func TestSilentEngineNamed(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	rec := &recordHandler{}
	cfg := testConfig(2)
	cfg.Logger = slog.New(rec)
	cfg.Socket.HeartbeatInterval = 250 * time.Millisecond
	cfg.Socket.HeartbeatTimeout = 1500 * time.Millisecond // generous: engine 0 must never time out on a loaded machine
	h := startCoordinator(t, cfg)

	// Engine 1 reaches the coordinator from 127.0.0.2 when the loopback
	// takes it (Linux does), so its host differs from engine 0's.
	src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	if c, err := (&net.Dialer{LocalAddr: src, Timeout: 5 * time.Second}).Dial("tcp", h.c.BackOutputEndpoint()[len("tcp://"):]); err != nil {
		t.Logf("no source address 127.0.0.2 (%v): engine 1 shares engine 0's host", err)
		src = nil
	} else {
		c.Close()
	}
	out := newFreezeProxy(t, h.c.BackOutputEndpoint()[len("tcp://"):], src)
	pub := newFreezeProxy(t, h.c.BackPublishEndpoint()[len("tcp://"):], src)

	e0 := dialEngine(t, h)
	opts := testSocketOptions()
	opts.HeartbeatInterval = -1 // engine 1 itself never times out the frozen link
	e1, err := dppeer.DialEngine(dppeer.EngineConfig{BackOutput: out.endpoint(), BackPublish: pub.endpoint(), Socket: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e1.Close() })
	for i, e := range []*dppeer.Engine{e0, e1} {
		if err := e.WaitReady(ctx); err != nil {
			h.failIfEnded(t)
			t.Fatalf("engine %d: READY: %v", i, err)
		}
	}
	// Stats from both until the coordinator holds them (it has then seen
	// each engine's outputs on its connection).
	poll.WaitForCtx(t, ctx, "both engines' stats", func() bool {
		e0.SendStats(ctx, 0, 3, 1, 0, 1)
		e1.SendStats(ctx, 1, 5, 1, 0, 1)
		l := h.c.stateSnapshot().Loads
		return len(l) == 2 && l[0].Waiting == 3 && l[1].Waiting == 5
	})

	out.frozen.Store(true)
	pub.frozen.Store(true)
	wantPub := "1"
	if src == nil {
		wantPub = "ambiguous"
	}
	poll.WaitForCtx(t, ctx, "the back output warning naming engine 1", func() bool {
		return rec.find("coordinator: engine went silent", map[string]string{"socket": "back_output", "engine_index": "1"})
	})
	poll.WaitForCtx(t, ctx, "the back publish warning naming engine 1", func() bool {
		return rec.find("coordinator: engine went silent", map[string]string{"socket": "back_publish", "engine_index": wantPub})
	})
	// Engine 0 keeps being served.
	e0.SendStats(ctx, 0, 7, 1, 0, 2)
	poll.WaitForCtx(t, ctx, "engine 0's stats after the silence", func() bool { return h.c.stateSnapshot().Loads[0].Waiting == 7 })
	st := h.c.Stats()
	want := EngineSilence{EngineIndex: 1, BackOutput: 1, BackPublish: 1}
	wantUnknown := uint64(0)
	if src == nil {
		want.BackPublish, wantUnknown = 0, 1
	}
	if len(st.SilentEngines) != 1 || st.SilentEngines[0] != want || st.SilentUnknown != wantUnknown {
		t.Errorf("SilentEngines %+v, SilentUnknown %d; want [%+v], %d", st.SilentEngines, st.SilentUnknown, want, wantUnknown)
	}
	if rec.find("coordinator: engine went silent", map[string]string{"engine_index": "0"}) {
		t.Error("engine 0, alive, was reported silent")
	}
}
