package socket

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// curveKeys is a server and a client key pair for one test.
type curveKeys struct{ srvPub, srvSec, cliPub, cliSec zmtpguard.CurveKey }

func newCurveKeys(t *testing.T) curveKeys {
	t.Helper()
	var k curveKeys
	var err error
	if k.srvPub, k.srvSec, err = zmtpguard.GenerateCurveKeyPair(); err != nil {
		t.Fatal(err)
	}
	if k.cliPub, k.cliSec, err = zmtpguard.GenerateCurveKeyPair(); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k curveKeys) server(o *Options) {
	o.Guard.Curve = &zmtpguard.CurveConfig{Server: true, SecretKey: k.srvSec,
		Authorize: func(key zmtpguard.CurveKey, _ net.Addr) (bool, string) { return key == k.cliPub, "" }, Logger: slog.New(slog.DiscardHandler)}
}

func (k curveKeys) client(o *Options) {
	o.Guard.Curve = &zmtpguard.CurveConfig{SecretKey: k.cliSec, ServerKey: k.srvPub}
}

// TestCurveSocketTypes: every socket pairing works with Options.Guard.Curve
// selecting CURVE (the binding side as CURVE server).
func TestCurveSocketTypes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bind, dial func(Options) (*Socket, error)
		run        func(t *testing.T, bound, dialed *Socket)
	}{
		{"PUSH-PULL", NewPull, NewPush, func(t *testing.T, pull, push *Socket) {
			ctx := testCtx(t, 20*time.Second)
			if err := push.Send(ctx, []byte("a"), []byte("b")); err != nil {
				t.Fatal(err)
			}
			if got := recvString(t, ctx, pull); !eq(got, "a", "b") {
				t.Fatalf("got %q", got)
			}
		}},
		{"DEALER-ROUTER", NewRouter, NewDealer, func(t *testing.T, router, dealer *Socket) {
			ctx := testCtx(t, 20*time.Second)
			dealer.Send(ctx, []byte("ping"))
			got := recvString(t, ctx, router)
			if len(got) != 2 || got[1] != "ping" {
				t.Fatalf("router got %q", got)
			}
			router.Send(ctx, []byte(got[0]), []byte("pong"))
			if got := recvString(t, ctx, dealer); !eq(got, "pong") {
				t.Fatalf("dealer got %q", got)
			}
		}},
		{"REQ-ROUTER", NewRouter, NewReq, func(t *testing.T, router, req *Socket) {
			ctx := testCtx(t, 20*time.Second)
			req.Send(ctx, []byte("q"))
			got := recvString(t, ctx, router)
			if len(got) != 3 || got[1] != "" || got[2] != "q" {
				t.Fatalf("router got %q", got)
			}
			router.Send(ctx, []byte(got[0]), nil, []byte("r"))
			if got := recvString(t, ctx, req); !eq(got, "r") {
				t.Fatalf("req got %q", got)
			}
		}},
		{"XPUB-SUB", NewXPub, NewSub, func(t *testing.T, xpub, sub *Socket) {
			ctx := testCtx(t, 20*time.Second)
			sub.Subscribe([]byte("t"))
			if got := recvString(t, ctx, xpub); !eq(got, "\x01t") {
				t.Fatalf("xpub got %q", got)
			}
			xpub.Send(ctx, []byte("t"), []byte("news"))
			if got := recvString(t, ctx, sub); !eq(got, "t", "news") {
				t.Fatalf("sub got %q", got)
			}
		}},
		{"XPUB-XSUB", NewXPub, NewXSub, func(t *testing.T, xpub, xsub *Socket) {
			ctx := testCtx(t, 20*time.Second)
			xsub.Send(ctx, []byte("\x01"))
			if got := recvString(t, ctx, xpub); !eq(got, "\x01") {
				t.Fatalf("xpub got %q", got)
			}
			xpub.Send(ctx, []byte("any"))
			if got := recvString(t, ctx, xsub); !eq(got, "any") {
				t.Fatalf("xsub got %q", got)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newCurveKeys(t)
			bound := mustSocket(t, tc.bind, k.server)
			ep := mustBind(t, bound)
			dialed := mustSocket(t, tc.dial, k.client)
			mustDial(t, dialed, ep)
			tc.run(t, bound, dialed)
		})
	}
}

// TestCurveSocketRefusals: a NULL peer and a CURVE client with an unlisted
// key never reach a CURVE socket, and both are counted.
func TestCurveSocketRefusals(t *testing.T) {
	k := newCurveKeys(t)
	pull := mustSocket(t, NewPull, k.server)
	ep := mustBind(t, pull)
	ctx := testCtx(t, 20*time.Second)

	plain := mustSocket(t, NewPush)
	mustDial(t, plain, ep)
	stranger := newCurveKeys(t)
	stranger.srvPub = k.srvPub // knows the server, but its key is not listed
	other := mustSocket(t, NewPush, stranger.client)
	mustDial(t, other, ep)
	poll.WaitForCtx(t, ctx, "two auth refusals", func() bool {
		return pull.Stats().Refused[decodeguard.ReasonAuth] >= 2
	})
	good := mustSocket(t, NewPush, k.client)
	mustDial(t, good, ep)
	if err := good.Send(ctx, []byte("in")); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, ctx, pull); !eq(got, "in") {
		t.Fatalf("got %q", got)
	}
}
