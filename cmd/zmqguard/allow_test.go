package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestAllowFlagParse: CIDRs and bare IPs, comma-separated and repeated;
// anything else is refused naming the value.
func TestAllowFlagParse(t *testing.T) {
	var a allowFlag
	for _, v := range []string{"10.0.0.0/8, 127.0.0.2", "fd00::/8,::ffff:192.0.2.1"} {
		if err := a.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.String(); got != "10.0.0.0/8,127.0.0.2/32,fd00::/8,192.0.2.1/32" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "1.2.3"} {
		var b allowFlag
		if err := b.Set(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Set(%q) = %v, want an error naming it", bad, err)
		}
	}
	if !a.allows(&net.TCPAddr{IP: net.ParseIP("10.1.2.3")}) || a.allows(&net.TCPAddr{IP: net.ParseIP("127.0.0.1")}) ||
		a.allows(&net.UnixAddr{Name: "/x", Net: "unix"}) {
		t.Error("allows() disagrees with the list")
	}
}

// greetingFrom dials addr from the loopback address src and reports whether
// the server sent its ZMTP greeting (true) or closed at once (false).
func greetingFrom(t *testing.T, src, addr string) bool {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	var g [10]byte
	_, err = io.ReadFull(nc, g[:])
	if err == nil {
		return g[0] == 0xff
	}
	if err == io.EOF || isReset(err) {
		return false
	}
	t.Fatalf("reading the greeting from %s: %v", src, err)
	return false
}

// TestAllowFlag: a listening command given --allow closes connections from
// other source addresses at accept and serves the listed ones. Every
// listening command takes the flag (handshake-listener, sink, coordinator,
// kv-publish, kv-events and kv-index with --bind, outputs).
func TestAllowFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--log-format", "json",
		"--allow", "127.0.0.2/32")
	ep := p.logField("handshake listener serving", "endpoint", 20*time.Second)
	addr := strings.TrimPrefix(ep, "tcp://")
	if greetingFrom(t, "127.0.0.1", addr) {
		t.Error("a source outside --allow was served")
	}
	if !greetingFrom(t, "127.0.0.2", addr) {
		t.Error("a source inside --allow was refused")
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.stderr)
	}
	for _, cmd := range []string{"handshake-listener", "sink", "coordinator", "kv-publish", "kv-events", "kv-index", "outputs"} {
		code, stdout, stderr := runBin(t, 20*time.Second, cmd, "--help")
		if !strings.Contains(stdout+stderr, "-allow CIDR") {
			t.Errorf("%s --help (exit %d) lists no --allow", cmd, code)
		}
	}
}

// FuzzAllowFlag: --allow never panics on any value, and a value it accepts
// prints as a list that parses back to itself.
func FuzzAllowFlag(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8,127.0.0.1", "::1", "fd00::/8, ::ffff:10.0.0.1/104", ",,", "1.2.3.4/0", "x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var a allowFlag
		if err := a.Set(v); err != nil {
			return
		}
		var b allowFlag
		if err := b.Set(a.String()); err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", v, a.String(), err)
		}
		if b.String() != a.String() {
			t.Fatalf("%q: String %q reparses as %q", v, a.String(), b.String())
		}
	})
}

// TestReserveFlag: --reserve takes CIDR=N and IP=N pairs, comma-separated
// and repeated (counts of one prefix add up), and apply hands them, with
// the allowlist and --ipv6-host-prefix, to the guard's Config; a bad pair
// is refused naming it.
func TestReserveFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	a := addAllowFlag(fs)
	if err := fs.Parse([]string{"--reserve", "10.1.0.0/16=32, 127.0.0.9=2", "--reserve", "10.1.0.0/16=8", "--ipv6-host-prefix", "48", "--allow", "10.0.0.0/8"}); err != nil {
		t.Fatal(err)
	}
	if got := a.reserve.String(); got != "10.1.0.0/16=40,127.0.0.9/32=2" {
		t.Errorf("--reserve = %q", got)
	}
	var c zmtpguard.Config
	a.apply(&c)
	if len(c.Allow) != 1 || c.Reserve[netip.MustParsePrefix("127.0.0.9/32")] != 2 || c.IPv6HostPrefix != 48 {
		t.Errorf("applied: Allow %v Reserve %v IPv6HostPrefix %d", c.Allow, c.Reserve, c.IPv6HostPrefix)
	}
	if err := c.Verify(); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"10.0.0.0/8", "10.0.0.0/8=0", "10.0.0.0/8=x", "nope=3"} {
		var r reserveFlag
		if err := r.Set(bad); err == nil || !strings.Contains(err.Error(), strings.Split(bad, "=")[0]) {
			t.Errorf("Set(%q) = %v, want an error naming it", bad, err)
		}
	}
}
