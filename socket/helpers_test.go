package socket

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// testCtx returns a context bounded by d, cancelled at test end.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustSocket builds a socket with defaults plus fast reconnects, closed at
// test end.
func mustSocket(t testing.TB, ctor func(Options) (*Socket, error), mod ...func(*Options)) *Socket {
	t.Helper()
	o := DefaultOptions()
	o.ReconnectMin = 20 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	for _, f := range mod {
		f(&o)
	}
	s, err := ctor(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustBind(t testing.TB, s *Socket) string {
	t.Helper()
	if err := s.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	return s.Endpoint()
}

func mustDial(t testing.TB, s *Socket, ep string) {
	t.Helper()
	if err := s.Dial(ep); err != nil {
		t.Fatal(err)
	}
}

// waitPeers waits until s has n peers.
func waitPeers(t testing.TB, ctx context.Context, s *Socket, n int) {
	t.Helper()
	for {
		if got := s.Stats().Peers; got == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d peers: have %d", n, s.Stats().Peers)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func recvString(t testing.TB, ctx context.Context, s *Socket) []string {
	t.Helper()
	m, err := s.Recv(ctx)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	out := make([]string, len(m.Frames))
	for i, f := range m.Frames {
		out[i] = string(f)
	}
	return out
}

func eq(a []string, b ...string) bool {
	return fmt.Sprintf("%q", a) == fmt.Sprintf("%q", b)
}
