package zmtpguard

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestSocketTypeValues: ZMTP's type names are byte for byte what zmq4
// sends, and each is valid.
func TestSocketTypeValues(t *testing.T) {
	pairs := map[SocketType]zmq4.SocketType{
		"PAIR": zmq4.Pair, "PUB": zmq4.Pub, "SUB": zmq4.Sub, "REQ": zmq4.Req, "REP": zmq4.Rep, "DEALER": zmq4.Dealer,
		"ROUTER": zmq4.Router, "PULL": zmq4.Pull, "PUSH": zmq4.Push, "XPUB": zmq4.XPub, "XSUB": zmq4.XSub,
	}
	for ours, theirs := range pairs {
		if string(ours) != string(theirs) {
			t.Errorf("%q != zmq4's %q", ours, theirs)
		}
		if err := validType(ours); err != nil {
			t.Errorf("%s: %v", ours, err)
		}
	}
	if !compatible("PULL", "PUSH") || compatible("PULL", "PULL") || compatible("pull", "PUSH") {
		t.Error("compatible disagrees with ZMTP's table")
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
