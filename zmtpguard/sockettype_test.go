package zmtpguard

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestSocketTypeValues: the constants are ZMTP's names, byte for byte what
// zmq4 sends, and each is valid.
func TestSocketTypeValues(t *testing.T) {
	pairs := map[SocketType]zmq4.SocketType{
		Pair: zmq4.Pair, Pub: zmq4.Pub, Sub: zmq4.Sub, Req: zmq4.Req, Rep: zmq4.Rep, Dealer: zmq4.Dealer,
		Router: zmq4.Router, Pull: zmq4.Pull, Push: zmq4.Push, XPub: zmq4.XPub, XSub: zmq4.XSub,
	}
	for ours, theirs := range pairs {
		if string(ours) != string(theirs) {
			t.Errorf("%q != zmq4's %q", ours, theirs)
		}
		if err := ours.Valid(); err != nil {
			t.Errorf("%s: %v", ours, err)
		}
	}
	if !Pull.CompatibleWith(Push) || Pull.CompatibleWith(Pull) || SocketType("pull").CompatibleWith(Push) {
		t.Error("CompatibleWith disagrees with ZMTP's table")
	}
}

// TestUnknownSocketTypeRefused: Listen, NewListener, Dial and Handshake
// refuse a type that is not ZMTP's with one line naming it (quoted, so an
// empty or odd value shows).
func TestUnknownSocketTypeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(what string, err error, bad string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s accepted socket type %q", what, bad)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, `"`+bad+`"`) {
			t.Fatalf("%s: error %q does not name %q on one line", what, msg, bad)
		}
	}
	for _, bad := range []string{"pull", "", "STREAM", "PULL\n"} {
		_, err := Listen(ctx, "tcp", "127.0.0.1:0", SocketType(bad), nil)
		check("Listen", err, strings.ReplaceAll(bad, "\n", `\n`))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = NewListener(ln, "sub", nil)
	check("NewListener", err, "sub")
	_, err = Dial(ctx, "tcp", ln.Addr().String(), "push", nil, nil)
	check("Dial", err, "push")
	a, b := net.Pipe()
	defer b.Close()
	_, err = Handshake(ctx, a, "Dealer", nil, nil)
	check("Handshake", err, "Dealer")
}
