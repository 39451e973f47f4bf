package socket

import (
	"testing"
	"time"
)

func TestPushPull(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	push := mustSocket(t, NewPush)
	mustDial(t, push, ep)
	for i := 0; i < 1000; i++ {
		if err := push.Send(ctx, []byte("hello"), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 1000; i++ {
		got := recvString(t, ctx, pull)
		if !eq(got, "hello", string([]byte{byte(i)})) {
			t.Fatalf("msg %d: %q", i, got)
		}
	}
}

func TestDealerRouter(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	dealer := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("d1") })
	mustDial(t, dealer, ep)
	if err := dealer.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := recvString(t, ctx, router)
	if !eq(got, "d1", "ping") {
		t.Fatalf("router got %q", got)
	}
	if err := router.Send(ctx, []byte("d1"), []byte("pong")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, dealer); !eq(got, "pong") {
		t.Fatalf("dealer got %q", got)
	}
}

func TestReqRouter(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	router := mustSocket(t, NewRouter)
	ep := mustBind(t, router)
	req := mustSocket(t, NewReq)
	mustDial(t, req, ep)
	for i := 0; i < 10; i++ {
		if err := req.Send(ctx, []byte("q")); err != nil {
			t.Fatal(err)
		}
		m, err := router.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Frames) != 3 || len(m.Frames[1]) != 0 || string(m.Frames[2]) != "q" {
			t.Fatalf("router got %q", m.Frames)
		}
		id := append([]byte(nil), m.Frames[0]...)
		if err := router.Send(ctx, id, nil, []byte("a")); err != nil {
			t.Fatal(err)
		}
		if got := recvString(t, ctx, req); !eq(got, "a") {
			t.Fatalf("req got %q", got)
		}
	}
}

func TestXSubXPub(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	xpub := mustSocket(t, NewXPub)
	ep := mustBind(t, xpub)
	xsub := mustSocket(t, NewXSub)
	mustDial(t, xsub, ep)
	if err := xsub.Send(ctx, []byte("\x01top")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, xpub); !eq(got, "\x01top") {
		t.Fatalf("xpub got %q", got)
	}
	xpub.Send(ctx, []byte("other"), []byte("x"))
	xpub.Send(ctx, []byte("topic"), []byte("y"))
	if got := recvString(t, ctx, xsub); !eq(got, "topic", "y") {
		t.Fatalf("xsub got %q", got)
	}
	if err := xsub.Send(ctx, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, xpub); !eq(got, "data") {
		t.Fatalf("xpub got %q", got)
	}
}
