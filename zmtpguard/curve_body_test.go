package zmtpguard

import (
	"context"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// TestCurveBodyTimeout: an admitted CURVE client that sends a MESSAGE
// frame's header and then dribbles its body (one byte every 100 ms) is
// closed once BodyTimeout passes, as on NULL (TestBodyTimeoutSlowBody),
// whether the MESSAGE fits in the read buffer or not (issue 29 row 10: a
// MESSAGE that fit was read with no deadline at all and held for ever).
func TestCurveBodyTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{
		{"fits-read-buffer", 200},
		{"larger-than-read-buffer", 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := newCurvePair(t, ctx, "PULL", func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
			sink := startSink(t, p.l)
			defer sink.close()
			r := dialRawCurve(t, p)
			r.handshake()
			frame := r.message(r.nonce+1, 0, make([]byte, tc.size))
			// The header and the first 20 bytes of the box, then a trickle.
			if _, err := r.nc.Write(frame[:len(frame)-tc.size]); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for i := len(frame) - tc.size; i < len(frame)-1; i++ {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						if _, err := r.nc.Write(frame[i : i+1]); err != nil {
							return
						}
					}
				}
			}()
			p.expect(t, decodeguard.ReasonPolicy, "BodyTimeout")
			if err := waitClosed(r.nc, 20*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
}
