package loop

import (
	"context"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
)

// bin32 returns a msgpack bin of n bytes.
func bin32(n int) []byte {
	b := make([]byte, 5+n)
	b[0], b[1], b[2], b[3], b[4] = 0xc6, byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return b
}

// TestSizeFlowsFromSocket: a socket whose MaxMessageSize is raised to 4 MiB
// and a loop with decodeguard.Limits{} accept a 2 MiB message: one size
// limit, from the socket to the decoder. A 5 MiB message is refused by the
// socket.
func TestSizeFlowsFromSocket(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	o := socket.DefaultOptions()
	o.Guard.MaxMessageSize = 4 << 20
	pull, err := socket.New("PULL", o)
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	push, err := socket.New("PUSH", o)
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Dial(pull.Endpoint()); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	l, err := New(pull, Config[any]{
		Logger: discard(),
		Decode: UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d Delivery[any]) error {
			b, _ := (*d.Value).([]byte)
			got <- len(b)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	if err := push.Send(ctx, bin32(2<<20)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 2<<20 {
			t.Fatalf("delivered %d bytes", n)
		}
	case err := <-done:
		t.Fatalf("Run = %v", err)
	case <-ctx.Done():
		t.Fatalf("2 MiB message not delivered under a 4 MiB socket: %+v", l.Stats())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Dropped.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSizeLimitNotOverSocket: a loop limit above the socket's would never
// see such a message; New says so and names both values.
func TestSizeLimitNotOverSocket(t *testing.T) {
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer pull.Close()
	_, err = New(pull, Config[any]{Name: "big", Decode: UntypedDecoder(decodeguard.Limits{}), MaxMessageSize: 4 << 20})
	if err == nil || !strings.Contains(err.Error(), "4194304") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("New = %v", err)
	}
	// Below the socket's limit is a limit set apart on purpose.
	l, err := New(pull, Config[any]{Logger: discard(), Decode: UntypedDecoder(decodeguard.Limits{}), MaxMessageSize: 100})
	if err != nil || l.maxBytes != 100 {
		t.Fatalf("New = %v, maxBytes %d", err, l.maxBytes)
	}
}

// TestSizeLimitOtherReceivers: a receiver that is not a socket gets 1 MiB
// by default, Config.MaxMessageSize raises it for the decoder too, and a
// decoder's own Limits.MaxBytes still applies when set.
func TestSizeLimitOtherReceivers(t *testing.T) {
	run := func(max int64, lim decodeguard.Limits, frame []byte) Stats {
		t.Helper()
		r := &sliceRecv{msgs: [][][]byte{{frame}}}
		l, err := New(r, Config[any]{Logger: discard(), Decode: UntypedDecoder(lim), MaxMessageSize: max,
			Handler: func(context.Context, Delivery[any]) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Run(testCtx(t))
		return l.Stats()
	}
	if st := run(0, decodeguard.Limits{}, bin32(2<<20)); st.Dropped[decodeguard.ReasonOversize] != 1 {
		t.Fatalf("default: %+v", st)
	}
	if st := run(4<<20, decodeguard.Limits{}, bin32(2<<20)); st.Delivered != 1 {
		t.Fatalf("raised: %+v", st)
	}
	if st := run(4<<20, decodeguard.Limits{MaxBytes: 1 << 20}, bin32(2<<20)); st.Dropped[decodeguard.ReasonOversize] != 1 {
		t.Fatalf("decoder's own limit: %+v", st)
	}
}
