package zmtpguard

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// rawPeer connects to addr, sends a PUSH handshake and returns the
// connection and the server's Conn.
func rawPeer(t *testing.T, cfg *Config) (net.Conn, *Conn) {
	t.Helper()
	addr, result, errs := serveOne(t, "PULL", cfg)
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := nc.Write(handshakeAs("PUSH")); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-result:
		t.Cleanup(func() { c.Close() })
		return nc, c
	case err := <-errs:
		t.Fatal(err)
	case <-time.After(20 * time.Second):
		t.Fatal("handshake timed out")
	}
	return nil, nil
}

// readResult runs ReadMessage in the background.
func readResult(c *Conn, m *Message) chan error {
	ch := make(chan error, 1)
	go func() { ch <- c.ReadMessage(m) }()
	return ch
}

// TestBodyTimeoutSlowBody: a header, then one byte every 100 ms, never the
// whole body: the connection is closed once BodyTimeout passes, as a
// policy violation reported to OnViolation. (Before BodyTimeout existed the
// read waited for ever: the heartbeat saw a live peer.)
func TestBodyTimeoutSlowBody(t *testing.T) {
	viols := make(chan Violation, 4)
	cfg := &Config{BodyTimeout: 300 * time.Millisecond, OnViolation: func(v Violation) { viols <- v }}
	nc, c := rawPeer(t, cfg)
	nc.Write(longHeader(0, 1000))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := nc.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	var m Message
	select {
	case err := <-readResult(c, &m):
		var v *Violation
		if !errors.As(err, &v) || v.Reason != decodeguard.ReasonPolicy {
			t.Fatalf("ReadMessage = %v, want a policy violation (body timeout)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a dribbled body was held past 20 s (BodyTimeout 300ms)")
	}
	select {
	case v := <-viols:
		if v.Reason != decodeguard.ReasonPolicy {
			t.Fatalf("violation %v", v)
		}
	default:
		t.Fatal("the body timeout was not reported to OnViolation")
	}
	if err := waitClosed(nc, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestBodyTimeoutIdleAndChunked: waiting between messages is not bounded by
// BodyTimeout (heartbeats judge idle peers), and a message sent in pieces
// that completes in time is read whole, repeatedly (the deadline is re-armed
// per message, never left to fire between them).
func TestBodyTimeoutIdleAndChunked(t *testing.T) {
	cfg := &Config{BodyTimeout: 2 * time.Second}
	nc, c := rawPeer(t, cfg)
	body := make([]byte, 200<<10)
	for round := range 3 {
		var m Message
		ch := readResult(c, &m)
		time.Sleep(2500 * time.Millisecond / 2) // idle between messages
		msg := dataFrame(false, body)
		nc.Write(msg[:len(msg)/2])
		time.Sleep(10 * time.Millisecond)
		nc.Write(msg[len(msg)/2:])
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if m.Size() != len(body) {
				t.Fatalf("round %d: got %d bytes", round, m.Size())
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: message not read", round)
		}
	}
}

// TestBudgetStallsAndEvictsLargest: three connections share a 256 KiB
// budget. Two attackers send most of a 1 MiB body; the budget stalls them
// (they hold more than their fair share) and, past Wait, evicts the
// largest. A third connection within its fair share still reads whole
// messages, and the budget never holds more than the limit plus one chunk
// plus fair shares (2 x limit).
func TestBudgetStallsAndEvictsLargest(t *testing.T) {
	const limit = 256 << 10
	bud := &Budget{Limit: limit, Wait: 200 * time.Millisecond}
	cfg := &Config{Budget: bud, BodyTimeout: -1, MaxMessageSize: 1 << 20}
	big := make([]byte, 1<<20-1)
	var atk []net.Conn
	var res []chan error
	for range 2 {
		nc, c := rawPeer(t, cfg)
		atk = append(atk, nc)
		var m Message
		res = append(res, readResult(c, &m))
		go func() {
			nc.Write(longHeader(0, 1<<20))
			nc.Write(big)
		}()
	}
	good, gc := rawPeer(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	evicted := 0
	for evicted < 2 && time.Now().Before(deadline) {
		if u := bud.used.Load(); u > 2*limit {
			t.Fatalf("budget holds %d bytes, over 2 x %d", u, limit)
		}
		for i, ch := range res {
			select {
			case err := <-ch:
				if decodeguard.ReasonOf(err) != decodeguard.ReasonPolicy {
					t.Fatalf("attacker %d: %v, want a policy violation (evicted)", i, err)
				}
				res[i] = nil
				evicted++
			default:
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if evicted < 1 {
		t.Fatalf("no attacker evicted within 20 s: %+v", bud.stats())
	}
	st := bud.stats()
	if st.Stalls == 0 || st.Evictions == 0 {
		t.Fatalf("stats %+v: want stalls and evictions counted", st)
	}
	// The well-behaved connection sends 64 KiB messages (its fair share).
	msg := dataFrame(false, make([]byte, 64<<10))
	for i := range 5 {
		var m Message
		ch := readResult(gc, &m)
		go good.Write(msg)
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("good message %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("good message %d not read (budget %+v)", i, bud.stats())
		}
	}
	for _, nc := range atk {
		nc.Close()
	}
	poll.WaitFor(t, 20*time.Second, "budget released", func() bool { return bud.used.Load() == 0 && bud.stats().Holders == 0 })
}

// TestBudgetStallNotEvictedWhenChargedOutside: a budget spent by Charge
// (messages the application has not taken) stalls a reader over its fair
// share, reported by Stalled, but never evicts it; releasing the charge
// lets the message complete.
func TestBudgetStallNotEvictedWhenChargedOutside(t *testing.T) {
	const limit = 128 << 10
	bud := &Budget{Limit: limit, Wait: 100 * time.Millisecond}
	bud.Charge(2 * limit) // past even fair-share reads
	cfg := &Config{Budget: bud, BodyTimeout: -1}
	nc, c := rawPeer(t, cfg)
	var m Message
	ch := readResult(c, &m)
	go nc.Write(dataFrame(false, make([]byte, 100<<10)))
	poll.WaitFor(t, 20*time.Second, "the reader to stall", c.Stalled)
	time.Sleep(500 * time.Millisecond) // several Waits: no eviction
	if st := bud.stats(); st.Evictions != 0 || !c.Stalled() {
		t.Fatalf("stats %+v, stalled %v: want a stall and no eviction", st, c.Stalled())
	}
	bud.Charge(-2 * limit)
	select {
	case err := <-ch:
		if err != nil || m.Size() != 100<<10 {
			t.Fatalf("ReadMessage = %v, %d bytes", err, m.Size())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("message not completed after the charge was released: %+v", bud.stats())
	}
	if c.Stalled() || bud.used.Load() != 0 {
		t.Fatalf("stalled %v, used %d after the message", c.Stalled(), bud.used.Load())
	}
}
