package zmtpguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// stillOpen drains what the server sent (greeting, READY) and reports
// whether the connection is still open (a read that times out) rather than
// closed by the server.
func stillOpen(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer nc.SetReadDeadline(time.Time{})
	var b [512]byte
	for {
		if _, err := nc.Read(b[:]); err != nil {
			return isTimeout(err)
		}
	}
}

// attackAddr is the i-th hostile source address, 127.1.x.y: each is a
// distinct source host to the listener (Linux routes all of 127/8 to lo).
func attackAddr(i int) string { return fmt.Sprintf("127.1.%d.%d", i/250, 1+i%250) }

// TestWorkKeepsItsPlace (issue 37 row 3, scaled down: 300 addresses against
// MaxConns=64 instead of 4,200 against 4,096): an honest host's 16 working
// connections stay open while 300 source addresses each open one idle
// connection, and a new honest host gets all 4 of its connections in.
// Before, each hostile address was a host under its fair share and closed a
// connection of the host holding the most: the honest host went down to
// one connection, and the new host was refused (every host then held one,
// its share).
func TestWorkKeepsItsPlace(t *testing.T) {
	const maxConns, honest, attackers = 64, 16, 300
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	addr := l.Addr().String()
	var work []net.Conn
	for i := range honest {
		nc := dialHost(t, "127.0.0.2", addr)
		if !delivered(nc, s, fmt.Sprint("work ", i)) {
			t.Fatalf("honest connection %d not served", i)
		}
		work = append(work, nc)
	}
	for i := range attackers {
		dialHost(t, attackAddr(i), addr) // handshake, then idle
	}
	poll.WaitFor(t, 30*time.Second, "every connection taken from the OS listener", func() bool {
		return l.Stats().Accepted == honest+attackers
	})
	for i, nc := range work {
		if !stillOpen(nc) {
			t.Fatalf("honest working connection %d closed by %d idle connections from %d addresses", i, attackers, attackers)
		}
	}
	for i := range 4 {
		nc := dialHost(t, "127.0.0.3", addr)
		if !delivered(nc, s, fmt.Sprint("new ", i)) {
			t.Fatalf("connection %d of a new honest host not served (%+v)", i, l.Stats())
		}
		work = append(work, nc)
	}
	for i, nc := range work {
		if !delivered(nc, s, fmt.Sprint("again ", i)) {
			t.Fatalf("honest connection %d no longer served", i)
		}
	}
	st := l.Stats()
	if st.EvictedOverShare != 0 || st.EvictedForReserve != 0 {
		t.Errorf("evictions over share %d, for reserve %d: want only idle ones", st.EvictedOverShare, st.EvictedForReserve)
	}
	if st.EvictedIdle == 0 || st.EvictedIdle != st.ConnsEvicted {
		t.Errorf("EvictedIdle = %d, ConnsEvicted = %d: want every eviction an idle one", st.EvictedIdle, st.ConnsEvicted)
	}
	if st.Open > maxConns {
		t.Errorf("Open = %d over MaxConns=%d", st.Open, maxConns)
	}
}

// TestIdleFloodKeepsSmallHosts: a host flooding idle connections never
// closes a smaller host's: their idle connections stay open (they are
// older, so a clock order alone would close them first).
func TestIdleFloodKeepsSmallHosts(t *testing.T) {
	const maxConns = 16
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: maxConns})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	addr := l.Addr().String()
	quiet := []net.Conn{dialHost(t, "127.0.0.2", addr), dialHost(t, "127.0.0.3", addr)}
	poll.WaitFor(t, 10*time.Second, "the quiet hosts' handshakes", func() bool { return l.Stats().Handshakes == 2 })
	for range 3 * maxConns {
		dialHost(t, "127.0.0.4", addr)
	}
	poll.WaitFor(t, 30*time.Second, "the flood taken from the OS listener", func() bool {
		return l.Stats().Accepted == 2+3*maxConns
	})
	for i, nc := range quiet {
		if !stillOpen(nc) {
			t.Fatalf("quiet host %d's idle connection closed by one host's idle flood", i)
		}
	}
	if st := l.Stats(); st.ConnsEvicted != st.EvictedIdle || st.Open > maxConns {
		t.Errorf("stats %+v", st)
	}
}

// TestReserve: connections from a reserved network get in when the
// listener is full of working connections within their shares (which
// nothing else may close), up to the reserved count; beyond it they are
// refused like anyone.
func TestReserve(t *testing.T) {
	const maxConns = 6
	trusted := netip.MustParsePrefix("127.0.0.9/32")
	l, err := Listen(context.Background(), "tcp", "127.0.0.1:0", "PULL", &Config{MaxConns: maxConns,
		Reserve: map[netip.Prefix]int{trusted: 2}})
	if err != nil {
		t.Fatal(err)
	}
	s := startSink(t, l)
	defer s.close()
	addr := l.Addr().String()
	for i := range maxConns {
		nc := dialHost(t, attackAddr(i), addr)
		if !delivered(nc, s, fmt.Sprint("busy ", i)) {
			t.Fatalf("connection %d not served", i)
		}
	}
	outsider := dialHost(t, "127.0.0.8", addr)
	if err := waitClosed(outsider, 10*time.Second); err != nil {
		t.Fatalf("a new host closed no working connection within its share, so it is refused: %v", err)
	}
	for i := range 2 {
		nc := dialHost(t, trusted.Addr().String(), addr)
		if !delivered(nc, s, fmt.Sprint("trusted ", i)) {
			t.Fatalf("reserved connection %d not served", i)
		}
	}
	third := dialHost(t, trusted.Addr().String(), addr)
	if err := waitClosed(third, 10*time.Second); err != nil {
		t.Fatalf("a third connection of a reservation of 2 is an ordinary newcomer, refused: %v", err)
	}
	st := l.Stats()
	if st.EvictedForReserve != 2 || st.ConnsEvicted != 2 {
		t.Errorf("EvictedForReserve = %d, ConnsEvicted = %d, want 2 and 2", st.EvictedForReserve, st.ConnsEvicted)
	}
}

func TestReserveAndPrefixVerify(t *testing.T) {
	p := netip.MustParsePrefix("10.0.0.0/8")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Reserve: map[netip.Prefix]int{p: 0}}, "Config.Reserve 10.0.0.0/8=0 is not a positive count"},
		{Config{MaxConns: 4, Reserve: map[netip.Prefix]int{p: 5}}, "Config.Reserve 5 connections in all are more than MaxConns=4"},
		{Config{Reserve: map[netip.Prefix]int{{}: 1}}, "Config.Reserve invalid Prefix is not a valid prefix"},
		{Config{IPv6HostPrefix: 129}, "Config.IPv6HostPrefix 129 is over 128 bits"},
		{Config{IPv6HostPrefix: -1}, "Config.IPv6HostPrefix -1 is negative"},
	} {
		err := c.cfg.Verify()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Verify(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
	ok := Config{MaxConns: 4, Reserve: map[netip.Prefix]int{p: 4}, IPv6HostPrefix: 48}
	if err := ok.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestSourceHostPrefix(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		addr string
		bits int
		want string
	}{
		{"[2001:db8:1:2::1]:1", 0, "2001:db8:1:2::"},
		{"[2001:db8:1:2::1]:1", 52, "2001:db8:1::"},
		{"[2001:db8:1:fff::1]:1", 52, "2001:db8:1::"},
		{"[2001:db8:1:1fff::1]:1", 52, "2001:db8:1:1000::"},
		{"[2001:db8:1:2::1]:1", 128, "2001:db8:1:2::1"},
		{"192.0.2.7:1", 48, "192.0.2.7"},
	} {
		if got := sourceHostBits(tcp(c.addr), c.bits).String(); got != c.want {
			t.Errorf("sourceHostBits(%s, %d) = %s, want %s", c.addr, c.bits, got, c.want)
		}
	}
}
