package outputs

import (
	"context"
	"errors"
	"testing"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// TestCallbacksMayCloseAndStat: every callback of a Receiver (Handler,
// OnEngineDead, OnDrop, and the socket's OnEvent given in Config.Socket)
// may call Stats and Close from inside. Each returns (a bounded wait fails
// the test on a deadlock), Run then returns loop.ErrLoopClosed, and every
// goroutine ends (goleak in TestMain).
func TestCallbacksMayCloseAndStat(t *testing.T) {
	valid := encode(simple(0, "req-0", 1, 2, 3))
	cases := []struct {
		name    string
		install func(cfg *Config, act func())
		send    [][]byte // what the pusher sends to trigger the callback (nil: nothing)
		pre     [][]byte // sent before it (a sentinel reaches OnEngineDead only from a connection holding an engine)
	}{
		{"Handler", func(cfg *Config, act func()) {
			cfg.Handler = func(context.Context, *enginecore.Message, *socket.Peer) error { act(); return nil }
		}, valid, nil},
		{"OnEngineDead", func(cfg *Config, act func()) {
			cfg.OnEngineDead = func(EngineDeadError) { act() }
		}, [][]byte{[]byte(engineCoreDead)}, valid},
		{"OnDrop", func(cfg *Config, act func()) {
			cfg.OnDrop = func(loop.Drop) { act() }
		}, [][]byte{{0x45}}, nil},
		{"Socket.OnEvent", func(cfg *Config, act func()) {
			cfg.Socket.OnEvent = func(e socket.Event) {
				if e.Kind == socket.EventConnected {
					act()
				}
			}
		}, nil, nil}, // the connection is the trigger; a Send could wait for a peer forever once the receiver is closed
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*reentrytest.Bound)
			defer cancel()
			var r *Receiver
			probe := reentrytest.NewProbe(func() Stats { return r.Stats() }, func() error { return r.Close() })
			cfg := Config{Name: "reentry", Logger: quiet, Socket: socket.Options{},
				Handler: func(context.Context, *enginecore.Message, *socket.Peer) error { return nil }}
			cfg.Socket.Logger = quiet
			tc.install(&cfg, probe.Act)
			var err error
			r, err = New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			run := reentrytest.Start(t, r.Run)
			p := pusher(t, r.Endpoint())
			defer p.Close()
			if tc.pre != nil {
				if err := p.Send(ctx, tc.pre...); err != nil {
					t.Fatal(err)
				}
			}
			if tc.send != nil {
				if err := p.Send(ctx, tc.send...); err != nil {
					t.Fatal(err)
				}
			}
			probe.Closed(t, tc.name)
			if err := run.Result(t, "Run after Close from "+tc.name); !errors.Is(err, loop.ErrLoopClosed) {
				t.Fatalf("Run after Close from %s: %v, want loop.ErrLoopClosed", tc.name, err)
			}
			reentrytest.CloseAgain(t, r.Close)
		})
	}
}
