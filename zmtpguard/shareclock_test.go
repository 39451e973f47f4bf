package zmtpguard

import (
	"net/netip"
	"testing"
	"time"
)

// TestShareRuleClock drives hostShares directly through time: a working
// connection is protected only while it worked within workRecent; after
// that, not having worked since, it is idle and the first to go, and one
// that works again is protected again.
func TestShareRuleClock(t *testing.T) {
	var s hostShares
	pol := sharePolicy{maxConns: 3, perHost: 3}
	now := time.Unix(1000, 0)
	addr := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	conn := func(a string) *hostConn { return &hostConn{key: addr(a), ip: addr(a)} }
	w1, w2, w3 := conn("10.0.0.1"), conn("10.0.0.2"), conn("10.0.0.3")
	for i, c := range []*hostConn{w1, w2, w3} {
		if v, _, _, _ := s.admit(c, int64(i), pol, now); v != shareAdmit {
			t.Fatalf("connection %d: verdict %d", i, v)
		}
		markWork(&c.work)
	}
	// Full, all working within their shares: a newcomer is refused.
	if v, _, _, _ := s.admit(conn("10.0.0.9"), 3, pol, now.Add(time.Second)); v != shareFull {
		t.Fatalf("newcomer against three working connections: verdict %d, want refused", v)
	}
	// Past workRecent, w2 works again, w1 and w3 did not: w1, the longest
	// idle, goes for a newcomer; then w3; w2 stays.
	later := now.Add(workRecent + time.Second)
	markWork(&w2.work)
	v, victim, _, why := s.admit(conn("10.0.0.10"), 3, pol, later)
	if v != shareEvictedOK || victim != w1 || why != evictIdle {
		t.Fatalf("after workRecent: verdict %d, victim %+v, reason %d; want w1 closed as idle", v, victim, why)
	}
	v, victim, _, _ = s.admit(conn("10.0.0.11"), 3, pol, later)
	if v != shareEvictedOK || victim != w3 {
		t.Fatalf("second newcomer: verdict %d, victim %+v; want w3", v, victim)
	}
	// Left: w2 (working) and the two newcomers (idle, never worked): the
	// next newcomer closes the older newcomer, never w2.
	v, victim, _, _ = s.admit(conn("10.0.0.12"), 3, pol, later)
	if v != shareEvictedOK || victim == w2 || victim.key != addr("10.0.0.10") {
		t.Fatalf("third newcomer: verdict %d, victim %+v; want the oldest newcomer", v, victim)
	}
}
