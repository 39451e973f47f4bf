package socket

import (
	"fmt"
	"testing"
	"time"
)

// TestHoldRecv: while one PUSH peer's connection is held, the PULL socket
// still receives another peer's messages and at most the one message the
// held reader had already started reading; once released, every held
// message arrives, in order. HoldRecv of a nil or departed peer is a no-op.
func TestHoldRecv(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	a := mustSocket(t, NewPush)
	mustDial(t, a, ep)
	if err := a.Send(ctx, []byte("a-first")); err != nil {
		t.Fatal(err)
	}
	m, err := pull.Recv(ctx)
	if err != nil || string(m.Frames[0]) != "a-first" {
		t.Fatalf("first Recv: %v %q", err, m.Frames)
	}
	held := m.Peer
	pull.HoldRecv(held, true)
	pull.HoldRecv(nil, true) // no-op
	const n = 50
	for i := 0; i < n; i++ {
		if err := a.Send(ctx, []byte(fmt.Sprintf("a-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	b := mustSocket(t, NewPush)
	mustDial(t, b, ep)
	if err := b.Send(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	var fromA []string
	for {
		got := recvString(t, ctx, pull)
		if got[0] == "b" {
			break
		}
		fromA = append(fromA, got[0])
	}
	if len(fromA) > 1 {
		t.Fatalf("the held peer delivered %d messages while held: %v", len(fromA), fromA)
	}
	pull.HoldRecv(held, false)
	for len(fromA) < n {
		fromA = append(fromA, recvString(t, ctx, pull)[0])
	}
	for i, s := range fromA {
		if s != fmt.Sprintf("a-%d", i) {
			t.Fatalf("message %d from the released peer is %q", i, s)
		}
	}
	a.Close()
	waitPeers(t, ctx, pull, 1)
	pull.HoldRecv(held, true) // departed: no-op
}
