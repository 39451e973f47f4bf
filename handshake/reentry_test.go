package handshake

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestHooksMayCloseAndStat: Lookup and OnDrop run in Serve's goroutine and
// may call the Listener's Stats and Close; both return (a bounded wait
// fails the test on a deadlock) and Serve returns ErrListenerClosed.
func TestHooksMayCloseAndStat(t *testing.T) {
	const bound = 10 * time.Second
	type result struct {
		stats ListenerStats
		err   error
	}
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
			res := make(chan result, 1)
			act := func() {
				x := result{stats: l.Stats()}
				x.err = l.Close()
				select {
				case res <- x:
				default:
				}
			}
			cfg := ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Logger: quiet, Socket: fastOpts()}
			tc.install(&cfg, act)
			var err error
			l, err = NewListener(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
			defer cancel()
			served := make(chan error, 1)
			go func() { served <- l.Serve(ctx) }()
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
			var x result
			select {
			case x = <-res:
			case <-time.After(bound):
				t.Fatalf("Stats and Close from %s: no return within %s (deadlock?)", tc.name, bound)
			}
			if x.err != nil {
				t.Fatalf("Close from %s: %v", tc.name, x.err)
			}
			select {
			case err := <-served:
				if !errors.Is(err, ErrListenerClosed) {
					t.Fatalf("Serve after Close from %s: %v, want ErrListenerClosed", tc.name, err)
				}
			case <-time.After(bound):
				t.Fatalf("Serve did not return within %s of Close from %s", bound, tc.name)
			}
		})
	}
}
