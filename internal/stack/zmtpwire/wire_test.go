package zmtpwire

import (
	"testing"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLocalGreeting pins the greeting's bytes: signature, version 3.1,
// mechanism NULL, as-server 0, zero filler; and zmq4's: the same at 3.0.
func TestLocalGreeting(t *testing.T) {
	g := LocalGreeting()
	want := [GreetingSize]byte{0: 0xFF, 9: 0x7F, 10: 3, 11: 1, 12: 'N', 13: 'U', 14: 'L', 15: 'L'}
	if g != want {
		t.Fatalf("greeting % x, want % x", g, want)
	}
	want[11] = 0
	if g := ZMQ4Greeting(); g != want {
		t.Fatalf("zmq4 greeting % x, want % x", g, want)
	}
}

// TestHeartbeats: PING is for ZMTP 3.1 and later only.
func TestHeartbeats(t *testing.T) {
	for _, c := range []struct {
		major, minor byte
		want         bool
	}{{3, 0, false}, {3, 1, true}, {3, 2, true}, {4, 0, true}, {2, 9, false}} {
		if got := Heartbeats(c.major, c.minor); got != c.want {
			t.Errorf("Heartbeats(%d, %d) = %v, want %v", c.major, c.minor, got, c.want)
		}
	}
}

func TestHeaderLen(t *testing.T) {
	for flags, want := range map[byte]int{0: 2, FlagMore: 2, FlagCommand: 2, FlagLong: 9, FlagLong | FlagMore: 9} {
		if got := HeaderLen(flags); got != want {
			t.Errorf("HeaderLen(%#x) = %d, want %d", flags, got, want)
		}
	}
}

// TestSocketTypes checks the table against ZMTP's pairs and refuses
// unknown or miscased types (zmq4's own IsCompatible panics on them).
func TestSocketTypes(t *testing.T) {
	for _, c := range []struct {
		local, peer string
		want        bool
	}{
		{"PULL", "PUSH", true}, {"PUSH", "PULL", true}, {"PULL", "PULL", false},
		{"XPUB", "SUB", true}, {"XPUB", "XSUB", true}, {"ROUTER", "DEALER", true},
		{"REQ", "REP", true}, {"REQ", "REQ", false}, {"PAIR", "PAIR", true},
		{"pull", "PUSH", false}, {"", "PUSH", false}, {"PULL", "BOGUS", false},
	} {
		if got := Compatible(c.local, c.peer); got != c.want {
			t.Errorf("Compatible(%q, %q) = %v, want %v", c.local, c.peer, got, c.want)
		}
	}
	if !KnownSocketType(zmq4.XSub) || KnownSocketType(zmq4.SocketType("STREAM")) {
		t.Error("KnownSocketType disagrees with ZMTP's table")
	}
}
