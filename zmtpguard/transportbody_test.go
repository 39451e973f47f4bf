package zmtpguard

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// violations collects the violations a Config reports.
type violations struct {
	mu sync.Mutex
	vs []Violation
}

func (v *violations) add(x Violation) {
	v.mu.Lock()
	v.vs = append(v.vs, x)
	v.mu.Unlock()
}

func (v *violations) with(detail string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, x := range v.vs {
		if x.Reason == decodeguard.ReasonPolicy && strings.Contains(x.Detail, detail) {
			n++
		}
	}
	return n
}

// guardedPull binds a zmq4 PULL on a fresh guarded scheme.
func guardedPull(t *testing.T, ctx context.Context, cfg *Config) (*guardTransport, zmq4.Socket) {
	t.Helper()
	tr, scheme := registerTestTransport(t, "tcp", cfg)
	pull := zmq4.NewPull(ctx, zmq4.WithLogger(quietLogger()))
	t.Cleanup(func() { pull.Close() })
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return tr, pull
}

// TestTransportSlowBody: through the Transport, a frame header and then
// one byte every 3 s (each byte well within any per-read timeout) is cut
// off once BodyTimeout (4 s here) has passed since the header, and counted
// as the policy violation the Conn path reports. Before, zmq4 waited for
// the rest of the frame for ever.
func TestTransportSlowBody(t *testing.T) {
	t.Parallel()
	var vs violations
	const timeout = 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, pull := guardedPull(t, ctx, &Config{BodyTimeout: timeout, OnViolation: vs.add})
	nc, err := net.Dial("tcp", pull.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(append(handshakeAs("PUSH"), longHeader(0, 1000)...)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Second):
			}
			if _, err := nc.Write([]byte{'x'}); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	if err := waitClosed(nc, timeout+20*time.Second); err != nil {
		t.Fatalf("slow-body peer: %v", err)
	}
	took := time.Since(start)
	poll.WaitFor(t, 10*time.Second, "the violation to be counted", func() bool {
		return tr.Stats().Refused[decodeguard.ReasonPolicy] == 1 && vs.with("BodyTimeout") == 1
	})
	if took < timeout/2 {
		t.Fatalf("closed after %v, before the deadline could pass (%+v)", took, vs.vs)
	}
	t.Logf("closed %v after the header", took.Round(time.Millisecond))

	// The socket still serves a healthy peer.
	push := zmq4.NewPush(ctx, zmq4.WithLogger(quietLogger()))
	defer push.Close()
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := push.Send(zmq4.NewMsgString("ok")); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the closed connection may surface as one error first
		m, err := pull.Recv()
		if err == nil {
			if len(m.Frames) != 1 || string(m.Frames[0]) != "ok" {
				t.Fatalf("received %q", m.Frames)
			}
			return
		}
	}
	t.Fatal("healthy peer's message not received")
}

// TestTransportBudget: 24 peers each send a frame header for 1 MiB and
// most of the body to a zmq4 PULL on a Transport with a 4 MiB Budget.
// zmq4 allocates a frame whole when it reads its header, so without the
// budget the socket holds 24 MiB; with it, headers past the budget are
// held back (stalls), the largest holders are closed past BudgetWait
// (policy violations), the bytes charged never pass twice the limit, and
// everything is returned once the peers are gone.
func TestTransportBudget(t *testing.T) {
	t.Parallel()
	const limit = 4 << 20
	const size = 1 << 20
	var vs violations
	budget := &Budget{Limit: limit, Wait: 200 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, pull := guardedPull(t, ctx, &Config{Budget: budget, BodyTimeout: -1, OnViolation: vs.add})
	// zmq4 hands each failed connection's error to Recv through a queue of
	// 10, and its reader goroutine waits for ever to enqueue it: drain them
	// all (one per connection), or they outlive the socket.
	recvErrs := make(chan struct{}, 64)
	go func() {
		for ctx.Err() == nil {
			if _, err := pull.Recv(); err != nil {
				recvErrs <- struct{}{}
			}
		}
	}()
	body := make([]byte, size-1)
	var conns []net.Conn
	var wg sync.WaitGroup
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	for range 24 {
		nc, err := net.Dial("tcp", pull.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			nc.Write(append(handshakeAs("PUSH"), longHeader(0, size)...))
			nc.Write(body)
		}()
	}
	var peak int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := budget.stats()
		peak = max(peak, st.Used)
		if st.Used > 2*limit {
			t.Fatalf("budget holds %d bytes, over twice its %d-byte limit (%+v)", st.Used, limit, st)
		}
		if st.Stalls > 0 && st.Evictions >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no stalls or evictions within 30 s: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := budget.stats()
	poll.WaitFor(t, 10*time.Second, "the evictions to be reported", func() bool {
		return vs.with("byte budget") >= int(st.Evictions) &&
			tr.Stats().Refused[decodeguard.ReasonPolicy] >= st.Evictions
	})
	// Only a connection whose handshake completed has a zmq4 reader to
	// surface its error: on a loaded machine one may still be in its
	// handshake here, so wait for all of them before closing.
	poll.WaitFor(t, 20*time.Second, "every connection's handshake", func() bool {
		return tr.Stats().Handshakes >= uint64(len(conns))
	})
	for _, c := range conns {
		c.Close()
	}
	poll.WaitFor(t, 20*time.Second, "the budget to be returned", func() bool {
		s := budget.stats()
		return s.Used == 0 && s.Holders == 0
	})
	for i := range len(conns) {
		select {
		case <-recvErrs:
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d connection errors surfaced from Recv", i, len(conns))
		}
	}
	t.Logf("budget peak %d KiB of %d KiB; stats %+v", peak>>10, limit>>10, st)
}
