package socket

import (
	"net"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestBoundWorkKeepsItsPlace: a bound PULL full of idle connections from
// many source addresses (127.1.0.x: distinct hosts to the listener) keeps
// serving its working PUSH peers, and a new PUSH peer gets in; the
// evictions are counted by reason in Stats (issue 37, scaled down).
func TestBoundWorkKeepsItsPlace(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	const maxConns, attackers = 8, 40
	pull := mustSocket(t, NewPull, func(o *Options) { o.Guard.MaxConns = maxConns })
	ep := mustBind(t, pull)
	addr := ep[len("tcp://"):]
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	send := func(s *Socket, body string) {
		t.Helper()
		if err := s.Send(ctx, []byte(body)); err != nil {
			t.Fatal(err)
		}
		for {
			if got := recvString(t, ctx, pull); got[0] == body {
				return
			}
		}
	}
	send(push, "working")
	for i := range attackers {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 1, 0, byte(1+i))}}
		c, err := zmtpguard.Dial(ctx, "tcp", addr, "PUSH", nil, &zmtpguard.Config{Dialer: d})
		if err != nil {
			// Refused at once (full, nothing this newcomer may close) or
			// closed later for the next one: both are the rule at work.
			continue
		}
		t.Cleanup(func() { c.Close() })
	}
	poll.WaitForCtx(t, ctx, "the idle connections evicted", func() bool { return pull.Stats().EvictedIdle >= attackers-maxConns })
	send(push, "still working")
	late := mustSocket(t, NewPush)
	mustDial(t, late, ep)
	send(late, "new peer")
	st := pull.Stats()
	if st.ConnsEvicted != st.EvictedIdle || st.EvictedOverShare != 0 || st.EvictedForReserve != 0 {
		t.Errorf("evictions %d: idle %d, over share %d, for reserve %d; want all idle", st.ConnsEvicted, st.EvictedIdle, st.EvictedOverShare, st.EvictedForReserve)
	}
	if st.Disconnects > uint64(st.ConnsEvicted) {
		t.Errorf("Disconnects %d > evictions %d", st.Disconnects, st.ConnsEvicted)
	}
}
