package hostile

import (
	"net"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/stack/zmtpwire"
)

// readyFrame is a well-formed READY command announcing typ.
func readyFrame(typ string) []byte {
	return command(zmtpwire.CmdReady, property("Socket-Type", typ))
}

// FuzzDiscover feeds arbitrary peer bytes to the READY reader behind
// Discover: it must never panic, never allocate what a header claims beyond
// the handshake limit, and only report a socket type zmtpguard knows.
func FuzzDiscover(f *testing.F) {
	g := zmtpwire.LocalGreeting()
	f.Add(append(g[:], readyFrame("ROUTER")...))
	f.Add(append(g[:], readyFrame("BOGUS")...))
	f.Add(append(g[:], 0x06, 0, 0, 0, 0, 0, 0, 0x40, 0)) // long command claiming 16 KiB + ...
	f.Add(append(g[:], 0x00, 0x01, 0x00))                // a data frame instead of READY
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(g[:20])
	f.Fuzz(func(t *testing.T, peer []byte) {
		a, b := net.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer b.Close()
			b.SetDeadline(time.Now().Add(2 * time.Second))
			go func() { // swallow our greeting
				var buf [64]byte
				for {
					if _, err := b.Read(buf[:]); err != nil {
						return
					}
				}
			}()
			b.Write(peer)
		}()
		a.SetDeadline(time.Now().Add(2 * time.Second))
		typ, err := discoverConn(a)
		a.Close()
		<-done
		if err == nil && !zmtpwire.KnownSocketType(typ) {
			t.Fatalf("discovered unknown type %q", typ)
		}
	})
}

// FuzzSplitEndpoint: endpoint parsing never panics and round-trips what it
// accepts into something net can split.
func FuzzSplitEndpoint(f *testing.F) {
	for _, s := range []string{"tcp://127.0.0.1:5600", "127.0.0.1:1", "ipc:///tmp/x", "tcp://[::1]:9", "tcp://:1", "udp://x:1", "tcp://h:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ep string) {
		network, addr, err := SplitEndpoint(ep)
		if err != nil {
			return
		}
		if network == "tcp" {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				t.Fatalf("SplitEndpoint(%q) = %q, which does not split: %v", ep, addr, err)
			}
		} else if network != "unix" || addr == "" {
			t.Fatalf("SplitEndpoint(%q) = %q %q", ep, network, addr)
		}
	})
}
