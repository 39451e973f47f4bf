package discovery

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

const testHost = "engines.zmqguard.test."

// nextSet waits (at most 20 s) for Discover's next set.
func nextSet(t *testing.T, sets <-chan []kvevents.Source) []kvevents.Source {
	t.Helper()
	select {
	case s := <-sets:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no set from Discover within 20 s")
		return nil
	}
}

func liveNames(set []kvevents.Source) []string {
	var out []string
	for _, s := range set {
		out = append(out, s.Name)
	}
	return out
}

// waitCount waits (at most 20 s) until cond holds.
func waitCount(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDNSRules: A and AAAA become sources named by their live endpoint
// (with the replay port); a failing server changes nothing however long
// it fails; NXDOMAIN retires everyone only after EmptyRounds lookups in a
// row answered so.
func TestDNSRules(t *testing.T) {
	srv := startDNS(t)
	srv.set(testHost, netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.2"))
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan []kvevents.Source)
	done := make(chan error, 1)
	d := DNS{Host: testHost, Port: 5557, ReplayPort: 5558, Interval: 10 * time.Millisecond, EmptyRounds: 3,
		Resolver: srv.resolver(), Logger: quiet, Engine: "sglang"}
	go func() { done <- d.Discover(ctx, sets) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Discover: %v", err)
		}
	}()
	got := nextSet(t, sets)
	want := []kvevents.Source{
		{Name: "tcp://127.0.0.2:5557", Live: "tcp://127.0.0.2:5557", Replay: "tcp://127.0.0.2:5558", Engine: "sglang"},
		{Name: "tcp://127.0.0.3:5557", Live: "tcp://127.0.0.3:5557", Replay: "tcp://127.0.0.3:5558", Engine: "sglang"},
		{Name: "tcp://[::1]:5557", Live: "tcp://[::1]:5557", Replay: "tcp://[::1]:5558", Engine: "sglang"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("first set\n%v\nwant\n%v", got, want)
	}
	// SERVFAIL for 10 answers (5 lookups): nothing is sent; the next set
	// is the next real answer.
	srv.fail(true)
	waitCount(t, "10 SERVFAIL answers", func() bool { _, f := srv.counts(); return f >= 10 })
	srv.set(testHost, netip.MustParseAddr("127.0.0.2"))
	srv.fail(false)
	if got := liveNames(nextSet(t, sets)); fmt.Sprint(got) != "[tcp://127.0.0.2:5557]" {
		t.Fatalf("after the failures: %v, want 127.0.0.2 only", got)
	}
	// NXDOMAIN: the empty set comes only after 3 lookups (6 answers) said so.
	srv.unset(testHost)
	got = nextSet(t, sets)
	if e, _ := srv.counts(); len(got) != 0 || e < 6 {
		t.Fatalf("after NXDOMAIN: %v after %d empty answers, want an empty set after at least 6", liveNames(got), e)
	}
	// Back with an address of each family.
	srv.set(testHost, netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.9"))
	if got := liveNames(nextSet(t, sets)); fmt.Sprint(got) != "[tcp://127.0.0.9:5557 tcp://[::1]:5557]" {
		t.Fatalf("back: %v", got)
	}
}

// TestDNSBadConfig: a bad field is an error naming it, at once.
func TestDNSBadConfig(t *testing.T) {
	for _, d := range []DNS{{Port: 1}, {Host: "h", Port: 0}, {Host: "h", Port: 70000}, {Host: "h", Port: 1, ReplayPort: -1},
		{Host: "h", Port: 1, Interval: -1}, {Host: "h", Port: 1, EmptyRounds: -1}} {
		if err := d.Discover(context.Background(), nil); err == nil {
			t.Errorf("%+v accepted", d)
		}
	}
}

// bindFleet binds a publisher on each address, all on one live port and
// one replay port the kernel chose for the first address (DNS answers carry
// addresses only). It tries again from scratch if another address has that
// port taken.
func bindFleet(t *testing.T, f *fleet, addrs []netip.Addr) map[netip.Addr]*engine {
	t.Helper()
	for try := 0; try < 10; try++ {
		out := map[netip.Addr]*engine{}
		first, err := startEngine(t, "tcp://"+net.JoinHostPort(addrs[0].String(), "0"), "tcp://"+net.JoinHostPort(addrs[0].String(), "0"), 1)
		if err != nil {
			t.Fatal(err)
		}
		_, lport, _ := net.SplitHostPort(first.name[len("tcp://"):])
		_, rport, _ := net.SplitHostPort(first.pub.ReplayEndpoint()[len("tcp://"):])
		out[addrs[0]] = first
		ok := true
		for i, a := range addrs[1:] {
			e, err := startEngine(t, "tcp://"+net.JoinHostPort(a.String(), lport), "tcp://"+net.JoinHostPort(a.String(), rport), i+2)
			if err != nil {
				ok = false
				break
			}
			out[a] = e
		}
		if !ok {
			for _, e := range out {
				e.pub.Close()
			}
			continue
		}
		for a, e := range out {
			e.name = "tcp://" + net.JoinHostPort(a.String(), lport)
			f.add(e)
		}
		return out
	}
	t.Fatal("could not bind one port on every address in 10 tries")
	return nil
}

// TestDNSFollowsFleet: kv-index's path end to end: engines (real
// publishers on 127.0.0.2-5 and ::1, one port) found through a DNS server
// whose answer changes; the index holds exactly what the engines listed
// hold at each step, the ones that left the answer retired and counted.
func TestDNSFollowsFleet(t *testing.T) {
	f := newFleet(t)
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3"),
		netip.MustParseAddr("127.0.0.4"), netip.MustParseAddr("127.0.0.5"), netip.MustParseAddr("::1")}
	eng := bindFleet(t, f, addrs)
	srv := startDNS(t)
	srv.set(testHost, addrs[0], addrs[1], addrs[4])
	_, lport, _ := net.SplitHostPort(hostOf(eng[addrs[0]]))
	_, rport, _ := net.SplitHostPort(eng[addrs[0]].pub.ReplayEndpoint()[len("tcp://"):])
	port, _ := strconv.Atoi(lport)
	replay, _ := strconv.Atoi(rport)
	f.follow(DNS{Host: testHost, Port: port, ReplayPort: replay, Interval: 20 * time.Millisecond, EmptyRounds: 2,
		Resolver: srv.resolver(), Logger: quiet})
	f.waitExact("first answer", []*engine{eng[addrs[0]], eng[addrs[1]], eng[addrs[4]]}, 0)

	// 127.0.0.2 leaves (its publisher still runs and publishes), .4 and .5 join.
	srv.set(testHost, addrs[1], addrs[2], addrs[3], addrs[4])
	f.waitExact("second answer", []*engine{eng[addrs[1]], eng[addrs[2]], eng[addrs[3]], eng[addrs[4]]}, 1)

	// The server fails for a while: nobody is retired.
	srv.fail(true)
	waitCount(t, "SERVFAIL answers", func() bool { _, n := srv.counts(); return n >= 10 })
	f.waitExact("while DNS fails", []*engine{eng[addrs[1]], eng[addrs[2]], eng[addrs[3]], eng[addrs[4]]}, 1)
	srv.fail(false)

	// The name goes away (no ready pod): after EmptyRounds lookups everyone is retired.
	srv.unset(testHost)
	f.waitExact("NXDOMAIN", nil, 5)
	if e, _ := srv.counts(); e < 4 {
		t.Fatalf("retired after %d empty answers, want at least 4 (2 lookups)", e)
	}
	// And back.
	srv.set(testHost, addrs[0])
	f.waitExact("back", []*engine{eng[addrs[0]]}, 5)
}

// TestDNSHostsFile: a name the hosts file answers for one family only
// (localhost: 127.0.0.1) is that family's addresses, not a failed lookup.
func TestDNSHostsFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sets := make(chan []kvevents.Source)
	done := make(chan error, 1)
	go func() {
		done <- DNS{Host: "localhost", Port: 5557, Interval: time.Hour, Logger: quiet}.Discover(ctx, sets)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Discover: %v", err)
		}
	}()
	got := liveNames(nextSet(t, sets))
	if !slices.Contains(got, "tcp://127.0.0.1:5557") {
		t.Fatalf("localhost: %v, want tcp://127.0.0.1:5557 among them", got)
	}
}
