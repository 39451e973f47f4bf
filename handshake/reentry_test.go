package handshake

import (
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestHooksMayCloseAndStat: Lookup and OnDrop run in Serve's goroutine and
// may call the Listener's Stats and Close; both return (a bounded wait
// fails the test on a deadlock) and Serve returns ErrListenerClosed.
func TestHooksMayCloseAndStat(t *testing.T) {
	cases := []struct {
		name    string
		install func(cfg *ListenerConfig, act func())
		body    []byte
	}{
		{"Lookup", func(cfg *ListenerConfig, act func()) {
			ps := testPayloads(t)
			cfg.Lookup = func(pp, tp int) ([]byte, bool) {
				act()
				b, ok := ps[Rank{PP: pp, TP: tp}]
				return b, ok
			}
		}, []byte("get_meta_msg")},
		{"OnDrop", func(cfg *ListenerConfig, act func()) {
			cfg.Payloads = testPayloads(t)
			cfg.OnDrop = func(loop.Drop) { act() }
		}, []byte{0x45}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l *Listener
			probe := reentrytest.NewProbe(func() ListenerStats { return l.Stats() }, func() error { return l.Close() })
			cfg := ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Logger: quiet, Socket: fastOpts()}
			tc.install(&cfg, probe.Act)
			var err error
			l, err = NewListener(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx := testCtx(t, 2*reentrytest.Bound)
			served := reentrytest.Start(t, l.Serve)
			c, err := socket.New("REQ", fastOpts())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Dial(l.Endpoint()); err != nil {
				t.Fatal(err)
			}
			if err := c.Send(ctx, tc.body); err != nil {
				t.Fatal(err)
			}
			probe.Closed(t, tc.name)
			if err := served.Result(t, "Serve after Close from "+tc.name); !errors.Is(err, ErrListenerClosed) {
				t.Fatalf("Serve after Close from %s: %v, want ErrListenerClosed", tc.name, err)
			}
		})
	}
}
