package socket

import (
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// TestCommandsOnlyPeerStaysAlive: a peer whose only traffic is ZMTP commands
// (PINGs and PONGs, never delivered to Recv) is alive. The reader adds what
// it read to the liveness counter once per batch, before it waits for the
// next bytes (issue 41); a command that is not delivered ends its batch
// empty, and must be counted all the same, or a live idle peer would be
// dropped HeartbeatInterval + HeartbeatTimeout after its last data message.
// The wait runs past that eight times over.
func TestCommandsOnlyPeerStaysAlive(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	hb := func(o *Options) {
		o.HeartbeatInterval = 20 * time.Millisecond
		o.HeartbeatTimeout = 300 * time.Millisecond
	}
	r := mustSocket(t, NewRouter, hb)
	ep := mustBind(t, r)
	d := mustSocket(t, NewDealer, hb)
	mustDial(t, d, ep)
	waitPeers(t, ctx, r, 1)
	waitPeers(t, ctx, d, 1)
	start := time.Now()
	// Eight timeouts' worth of silence in data.
	poll.WaitForCtx(t, ctx, "pongs for 8 heartbeat timeouts", func() bool {
		a, b := r.Stats(), d.Stats()
		return time.Since(start) > 8*320*time.Millisecond && a.PongsReceived >= 20 && b.PongsReceived >= 20
	})
	for _, s := range []*Socket{r, d} {
		if st := s.Stats(); st.HeartbeatTimeouts != 0 || st.Disconnects != 0 || st.Connects != 1 {
			t.Fatalf("%s stats %+v: a peer sending only PINGs and PONGs was dropped", s.Type(), st)
		}
	}
}
