package socket

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestCurveBodyTimeoutHeartbeatsOn (issue 29 row 10): an admitted CURVE
// peer that sends a MESSAGE frame's header and dribbles its body is cut off
// by BodyTimeout, with heartbeats on and a heartbeat timeout far beyond it
// (as with heartbeats off: the body deadline is the socket's, not the
// heartbeat's). Before, a MESSAGE that fit the read buffer was read with
// no deadline; only the heartbeat timeout, when on, ended it.
func TestCurveBodyTimeoutHeartbeatsOn(t *testing.T) {
	k := newCurveKeys(t)
	pull := mustSocket(t, NewPull, k.server, func(o *Options) {
		o.Guard.BodyTimeout = 300 * time.Millisecond
		o.HeartbeatInterval = 100 * time.Millisecond
		o.HeartbeatTimeout = time.Minute
	})
	ep := mustBind(t, pull)
	ctx := testCtx(t, 30*time.Second)
	var cli Options
	k.client(&cli)
	c, err := zmtpguard.Dial(ctx, "tcp", strings.TrimPrefix(ep, "tcp://"), "PUSH", nil, &cli.Guard)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nc := c.NetConn()
	// A 200-byte MESSAGE frame's header and 10 bytes of it, then a byte
	// every 50 ms: never complete within the 20 s the test waits.
	if _, err := nc.Write(append([]byte{0, 200}, make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for range 189 {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := nc.Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	closed := make(chan error, 1)
	go func() {
		nc.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.Copy(io.Discard, nc) // the server's PINGs, then its close
		closed <- err
	}()
	select {
	case err := <-closed:
		if err != nil && strings.Contains(err.Error(), "timeout") {
			t.Fatalf("a dribbled CURVE body was held for 20 s (BodyTimeout 300ms, heartbeats on): %v", err)
		}
	case <-ctx.Done():
		t.Fatal("timed out")
	}
	poll.WaitForCtx(t, ctx, "the body-timeout policy violation", func() bool {
		return pull.Stats().Refused[decodeguard.ReasonPolicy] >= 1
	})
	if n := pull.Stats().HeartbeatTimeouts; n != 0 {
		t.Errorf("%d heartbeat timeouts: the heartbeat, not BodyTimeout, ended the peer", n)
	}
}
