package loop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// TestCallbacksMayCloseAndStat: the Handler, OnDrop and OnError run in
// Run's goroutine and may call the Loop's Stats and Close: each returns (a
// bounded wait fails the test on a deadlock), the Stats seen from inside
// already count the message, and Run returns ErrLoopClosed.
func TestCallbacksMayCloseAndStat(t *testing.T) {
	const bound = 10 * time.Second
	type result struct {
		stats Stats
		err   error
	}
	boom := errors.New("a broken receiver")
	cases := []struct {
		name    string
		install func(cfg *Config[[][]byte], act func())
		feed    item
		check   func(Stats) bool
	}{
		{"Handler", func(cfg *Config[[][]byte], act func()) {
			cfg.Handler = func(context.Context, Delivery[[][]byte]) error { act(); return nil }
		}, item{frames: [][]byte{[]byte("ok")}}, func(s Stats) bool { return s.Received == 1 }},
		{"OnDrop", func(cfg *Config[[][]byte], act func()) {
			cfg.OnDrop = func(Drop) { act() }
		}, item{frames: [][]byte{[]byte("bad")}}, func(s Stats) bool { return s.Dropped[decodeguard.ReasonValidate] == 1 }},
		{"OnError", func(cfg *Config[[][]byte], act func()) {
			cfg.OnError = func(error) error { act(); return nil }
		}, item{err: boom}, func(Stats) bool { return true }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
			defer cancel()
			var l *Loop[[][]byte]
			res := make(chan result, 1)
			act := func() {
				x := result{stats: l.Stats()}
				x.err = l.Close()
				select {
				case res <- x:
				default:
				}
			}
			cfg := Config[[][]byte]{Name: "reentry", Logger: discard(), Decode: RawDecoder,
				Validate: func(v *[][]byte) error {
					if string((*v)[0]) == "bad" {
						return errors.New("bad")
					}
					return nil
				},
				Handler: func(context.Context, Delivery[[][]byte]) error { return nil }}
			tc.install(&cfg, act)
			r := newChanRecv(1)
			var err error
			l, err = New(r, cfg)
			if err != nil {
				t.Fatal(err)
			}
			r.ch <- tc.feed
			runErr := make(chan error, 1)
			go func() { runErr <- l.Run(ctx) }()
			var x result
			select {
			case x = <-res:
			case <-time.After(bound):
				t.Fatalf("Stats and Close from %s: no return within %s (deadlock?)", tc.name, bound)
			}
			if x.err != nil {
				t.Fatalf("Close from %s: %v", tc.name, x.err)
			}
			if !tc.check(x.stats) {
				t.Fatalf("Stats from %s: %+v", tc.name, x.stats)
			}
			select {
			case err := <-runErr:
				if !errors.Is(err, ErrLoopClosed) {
					t.Fatalf("Run after Close from %s: %v, want ErrLoopClosed", tc.name, err)
				}
			case <-time.After(bound):
				t.Fatalf("Run did not return within %s of Close from %s", bound, tc.name)
			}
		})
	}
}
