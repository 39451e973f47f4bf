package zmtpguard

import (
	"net"
	"net/netip"
	"testing"

	"pgregory.net/rapid"
)

func hostAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// fataler is what checkPool needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// checkPool verifies the pool's invariants: counts, lists in arrival order,
// the heap order and indexes, and no empty host kept.
func checkPool(t fataler, p *pendingPool) {
	t.Helper()
	total := 0
	if len(p.hosts) != len(p.heap) {
		t.Fatalf("%d hosts in the map, %d in the heap", len(p.hosts), len(p.heap))
	}
	for i, h := range p.heap {
		if h.idx != i || p.hosts[h.key] != h {
			t.Fatalf("heap slot %d: host %v has idx %d (map entry %p, host %p)", i, h.key, h.idx, p.hosts[h.key], h)
		}
		if i > 0 && before(h, p.heap[(i-1)/2]) {
			t.Fatalf("heap order broken at %d", i)
		}
		if h.n == 0 {
			t.Fatalf("empty host %v kept", h.key)
		}
		n := 0
		var prev *pendingEntry
		for e := h.head; e != nil; e = e.next {
			if e.host != h || e.prev != prev || !e.in || e.evicted {
				t.Fatalf("host %v: entry %d badly linked", h.key, n)
			}
			if prev != nil && prev.seq >= e.seq {
				t.Fatalf("host %v: entries out of arrival order", h.key)
			}
			prev = e
			n++
		}
		if n != h.n || h.tail != prev {
			t.Fatalf("host %v: list of %d, count %d", h.key, n, h.n)
		}
		total += n
	}
	if total != p.n {
		t.Fatalf("pool counts %d, holds %d", p.n, total)
	}
}

func TestPendingPoolEviction(t *testing.T) {
	var p pendingPool
	a, b, c := hostAddr("10.0.0.1"), hostAddr("10.0.0.2"), hostAddr("10.0.0.3")
	admit := func(host netip.Addr) (*pendingEntry, *pendingEntry, int) {
		t.Helper()
		e := &pendingEntry{}
		v, n := p.admit(e, host, 4)
		checkPool(t, &p)
		return e, v, n
	}
	b1, v, _ := admit(b)
	a1, _, _ := admit(a)
	a2, _, _ := admit(a)
	_, v2, _ := admit(a)
	if v != nil || v2 != nil || p.n != 4 {
		t.Fatalf("evicted below the cap")
	}
	// A 3, B 1 + new B = 2: A has the most and loses its oldest.
	b2, v, n := admit(b)
	if v != a1 || n != 3 || !v.evicted || v.in {
		t.Fatalf("victim %p (host had %d), want a1 %p with 3", v, n, a1)
	}
	// A 2, B 2 + new B = 3: B loses b1.
	if _, v, n = admit(b); v != b1 || n != 3 {
		t.Fatalf("victim %p (host had %d), want b1 with 3", v, n)
	}
	// A 2, B 2, new C 1: tie between A and B, A's a2 is the oldest overall.
	if _, v, _ = admit(c); v != a2 {
		t.Fatalf("victim %p, want a2 (oldest overall on a tie)", v)
	}
	// An evicted entry cannot be removed again; a live one can, once.
	if p.remove(a1) || p.remove(b1) {
		t.Fatal("removed an evicted entry")
	}
	if !p.remove(b2) || p.remove(b2) {
		t.Fatal("remove of a live entry must succeed exactly once")
	}
	checkPool(t, &p)
	// Removing everything leaves no host behind.
	for len(p.heap) > 0 {
		if !p.remove(p.heap[0].tail) {
			t.Fatal("remove failed")
		}
		checkPool(t, &p)
	}
	if p.len() != 0 || p.hostCount() != 0 {
		t.Fatalf("pool not empty: %d entries, %d hosts", p.len(), p.hostCount())
	}
}

// TestPendingPoolModel compares the pool with a naive model on random
// sequences of admissions and removals.
func TestPendingPoolModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var p pendingPool
		max := rapid.IntRange(1, 6).Draw(rt, "max")
		hosts := []netip.Addr{hostAddr("10.0.0.1"), hostAddr("10.0.0.2"), hostAddr("10.0.0.3"), {}}
		type live struct {
			e    *pendingEntry
			host netip.Addr
			seq  int
		}
		var model []live // arrival order
		seq := 0
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			if len(model) > 0 && rapid.Bool().Draw(rt, "remove") {
				i := rapid.IntRange(0, len(model)-1).Draw(rt, "which")
				if !p.remove(model[i].e) {
					rt.Fatalf("remove of a live entry failed")
				}
				model = append(model[:i], model[i+1:]...)
			} else {
				h := rapid.SampledFrom(hosts).Draw(rt, "host")
				e := &pendingEntry{}
				seq++
				model = append(model, live{e, h, seq})
				// The model's victim: most entries per host (the new one
				// included), ties to the host with the oldest entry.
				var want *pendingEntry
				wantN := 0
				if len(model) > max {
					count := map[netip.Addr]int{}
					oldest := map[netip.Addr]live{}
					for _, l := range model {
						count[l.host]++
						if _, ok := oldest[l.host]; !ok {
							oldest[l.host] = l
						}
					}
					var best live
					for hk, n := range count {
						o := oldest[hk]
						if n > wantN || (n == wantN && o.seq < best.seq) {
							wantN, best = n, o
						}
					}
					want = best.e
				}
				got, n := p.admit(e, h, max)
				if got != want || (want != nil && n != wantN) {
					rt.Fatalf("victim %p (host had %d), model %p (%d)", got, n, want, wantN)
				}
				if got == e {
					rt.Fatalf("the new entry was evicted")
				}
				for i, l := range model {
					if l.e == want {
						model = append(model[:i], model[i+1:]...)
						break
					}
				}
			}
			checkPool(rt, &p)
			if p.n != len(model) || p.n > max {
				rt.Fatalf("pool holds %d, model %d, max %d", p.n, len(model), max)
			}
		}
	})
}

func TestSourceHost(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, c := range []struct {
		addr net.Addr
		want string
	}{
		{tcp("192.0.2.7:5555"), "192.0.2.7"},
		{tcp("[::ffff:192.0.2.7]:5555"), "192.0.2.7"},
		{tcp("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1"), "2001:db8:1:2::"},
		{tcp("[2001:db8:1:2::1]:2"), "2001:db8:1:2::"},
		{tcp("[2001:db8:1:3::1]:2"), "2001:db8:1:3::"},
		{tcp("[fe80::1%eth0]:2"), "fe80::"},
		{&net.UnixAddr{Name: "/tmp/a.sock", Net: "unix"}, "invalid IP"},
		{&net.UnixAddr{Name: "", Net: "unix"}, "invalid IP"},
		{nil, "invalid IP"},
	} {
		if got := sourceHost(c.addr).String(); got != c.want {
			t.Errorf("sourceHost(%v) = %s, want %s", c.addr, got, c.want)
		}
	}
}

// BenchmarkPendingAdmitEvict measures the accept path's bookkeeping with a
// full pool: one admission that evicts, plus the evicted entry's own
// (failing) remove, as the handshake goroutine does.
func BenchmarkPendingAdmitEvict(b *testing.B) {
	for _, bc := range []struct {
		name  string
		hosts int
	}{{"1host", 1}, {"16hosts", 16}, {"1024hosts", 1024}} {
		b.Run(bc.name, func(b *testing.B) {
			const max = defaultMaxPendingHandshakes
			keys := make([]netip.Addr, bc.hosts)
			for i := range keys {
				keys[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
			}
			var p pendingPool
			for i := range max {
				p.admit(&pendingEntry{}, keys[i%len(keys)], max)
			}
			entries := make([]pendingEntry, 1024)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e := &entries[i%len(entries)]
				*e = pendingEntry{}
				v, _ := p.admit(e, keys[i%len(keys)], max)
				if v != nil {
					p.remove(v)
				}
			}
		})
	}
}

// BenchmarkPendingAdmitRemove measures a handshake's bookkeeping below the
// cap: admission, then its own remove when it completes.
func BenchmarkPendingAdmitRemove(b *testing.B) {
	var p pendingPool
	key := hostAddr("10.0.0.1")
	for range 64 {
		p.admit(&pendingEntry{}, key, defaultMaxPendingHandshakes)
	}
	var e pendingEntry
	b.ReportAllocs()
	for b.Loop() {
		e = pendingEntry{}
		p.admit(&e, key, defaultMaxPendingHandshakes)
		p.remove(&e)
	}
}
