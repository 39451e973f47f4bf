package zmtpguard

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// workRecent is how recently a connection must have carried a message for
// the MaxConns rule to count it as working (see [Config.MaxConns]).
const workRecent = time.Minute

// idleScan bounds the idle connections one admission examines and passes
// over (their host may not lose one to the newcomer's), and the host's own
// connections it samples: the accept goroutine's work per connection stays
// bounded whatever the listener holds. A connection found working moves to
// the working list instead (once per workRecent at most, so that costs
// nothing in the long run).
const idleScan = 64

// hostShares is a listener's open connections (pending and established),
// grouped by source host, with the state the MaxConns rule decides on (see
// [Config.MaxConns], which states the rule):
//
//   - idle and work: every connection not held by a reservation is in one
//     of two lists: idle (never seen working, or not within workRecent:
//     oldest first, new connections at the back) or work (seen working,
//     in the order it was last seen so; the front, once it is older than
//     workRecent and has not worked since, goes back to idle);
//   - each connection's work flag, set by its reader or writer when a
//     message passed (one atomic store, only when it was clear) and
//     sampled by the accept goroutine, which then stamps lastWork;
//   - the connections held by each Config.Reserve prefix.
//
// The accept goroutine adds (and evicts); each connection's release
// removes its own entry: mu guards everything but the work flags. A host
// is dropped as soon as it holds nothing.
type hostShares struct {
	mu       sync.Mutex
	hosts    map[netip.Addr]*shareHost
	idle     hostConn // sentinel of the idle list (idle.next is the front)
	work     hostConn // sentinel of the work list
	reserved map[netip.Prefix]int
}

type shareHost struct {
	conns    []*hostConn
	reserved int // how many of conns a reservation holds
}

// hostConn is one open connection counted in hostShares.
type hostConn struct {
	nc   net.Conn
	key  netip.Addr // source host
	ip   netip.Addr // source address (reservations match it)
	idx  int        // position in its host's conns; -1 once removed
	once sync.Once
	// evicted is set (under hostShares.mu) when the MaxConns rule closed
	// the connection; its handshake, if still running, then reports
	// nothing.
	evicted bool
	// work is set by the connection when a message passed since the
	// accept goroutine last looked (markWork).
	work atomic.Uint32
	// Under hostShares.mu:
	lastWork   time.Time    // when work was last seen set; zero: never
	reserve    netip.Prefix // the reservation holding it, if IsValid
	prev, next *hostConn    // list links (nil: in no list)
}

// markWork records that a message passed on the connection. It costs one
// atomic load when the flag is set already.
func markWork(w *atomic.Uint32) {
	if w != nil && w.Load() == 0 {
		w.Store(1)
	}
}

// evictReason says why the MaxConns rule closed a connection.
type evictReason int

const (
	evictIdle      evictReason = iota // idle or never productive
	evictOverShare                    // its host held more than its share
	evictReserve                      // a reserved network claimed its slot
)

// shareVerdict is hostShares.admit's answer.
type shareVerdict int

const (
	shareAdmit     shareVerdict = iota
	sharePerHost                // the host holds MaxConnsPerHost
	shareFull                   // the listener is full and nothing may be closed for it
	shareEvictedOK              // admitted; victim must be closed
)

// sharePolicy is the part of a Config the rule reads.
type sharePolicy struct {
	maxConns, perHost int
	reserve           map[netip.Prefix]int
}

// working reports whether hc carried a message within workRecent of now,
// sampling its flag first.
func (hc *hostConn) working(now time.Time) bool {
	if hc.work.Load() != 0 {
		hc.work.Store(0)
		hc.lastWork = now
	}
	return !hc.lastWork.IsZero() && now.Sub(hc.lastWork) < workRecent
}

// reservationOf returns the longest Reserve prefix holding ip and its count.
func reservationOf(reserve map[netip.Prefix]int, ip netip.Addr) (netip.Prefix, int, bool) {
	var best netip.Prefix
	n, found := 0, false
	if !ip.IsValid() {
		return best, 0, false
	}
	for p, c := range reserve {
		if p.Contains(ip) && (!found || p.Bits() > best.Bits()) {
			best, n, found = p, c, true
		}
	}
	return best, n, found
}

// admit decides on a new connection while open connections are open, and
// on admission records it. It returns the victim to close
// (shareEvictedOK) with why and how many connections its host held, or, on
// a refusal, how many the new connection's host holds.
func (s *hostShares) admit(hc *hostConn, open int64, p sharePolicy, now time.Time) (v shareVerdict, victim *hostConn, held int, why evictReason) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = make(map[netip.Addr]*shareHost)
		s.idle.next, s.idle.prev = &s.idle, &s.idle
		s.work.next, s.work.prev = &s.work, &s.work
	}
	h := s.hosts[hc.key]
	n := 0
	if h != nil {
		n = len(h.conns)
	}
	if n >= p.perHost {
		return sharePerHost, nil, n, 0
	}
	rp, rn, reserved := reservationOf(p.reserve, hc.ip)
	reserved = reserved && s.reserved[rp] < rn
	if open >= int64(p.maxConns) {
		s.expire(now)
		if reserved {
			why = evictReserve
			victim = s.scanIdle(now, func(*shareHost) bool { return true })
			if victim == nil {
				victim = s.leastWorkingOfTop(now, nil)
			}
		} else {
			why = evictIdle
			idleH := s.idleCount(h, now)
			// An idle connection goes first, whatever host it comes from,
			// provided its host holds more connections than the newcomer's
			// host holds idle ones: a host flooding idle connections never
			// closes a smaller host's.
			victim = s.scanIdle(now, func(g *shareHost) bool { return len(g.conns) > idleH })
			if victim == nil {
				why = evictOverShare
				victim = s.leastWorkingOfTop(now, func(top *shareHost) bool {
					nh := len(s.hosts)
					if h == nil {
						nh++
					}
					// The top host holds more than its share, and more than
					// the newcomer's host will, so that two hosts never take
					// turns evicting each other's work.
					return top != h && len(top.conns) > n+1 && len(top.conns) > p.maxConns/nh
				})
			}
		}
		if victim == nil {
			return shareFull, nil, n, 0
		}
		held = len(s.hosts[victim.key].conns)
		victim.evicted = true
		s.removeLocked(victim)
		v = shareEvictedOK
	}
	if h == nil {
		h = &shareHost{}
		s.hosts[hc.key] = h
	}
	hc.idx = len(h.conns)
	h.conns = append(h.conns, hc)
	if reserved {
		if s.reserved == nil {
			s.reserved = make(map[netip.Prefix]int)
		}
		hc.reserve = rp
		s.reserved[rp]++
		h.reserved++
	} else {
		s.pushBack(&s.idle, hc)
	}
	return v, victim, held, why
}

// idleCount returns how many of h's connections are not working, sampling
// at most idleScan of them (the rest count as idle).
func (s *hostShares) idleCount(h *shareHost, now time.Time) int {
	if h == nil {
		return 0
	}
	idle := 0
	for i, c := range h.conns {
		if i == idleScan {
			return idle + len(h.conns) - i
		}
		if !c.reserve.IsValid() && !c.working(now) {
			idle++
		}
	}
	return idle
}

// expire moves connections at the front of the work list that have not
// worked within workRecent back to the idle list (a few per call: each
// admission while full calls it).
func (s *hostShares) expire(now time.Time) {
	for range idleScan {
		c := s.work.next
		if c == &s.work || now.Sub(c.lastWork) < workRecent {
			return
		}
		s.unlink(c)
		if c.working(now) {
			s.pushBack(&s.work, c)
		} else {
			s.pushBack(&s.idle, c)
		}
	}
}

// scanIdle walks the idle list from the front and returns the first idle
// connection whose host ok accepts, passing over at most idleScan others.
// Connections found working move to the work list.
func (s *hostShares) scanIdle(now time.Time, ok func(*shareHost) bool) *hostConn {
	c := s.idle.next
	for passed := 0; c != &s.idle && passed < idleScan; {
		next := c.next
		if c.working(now) {
			s.unlink(c)
			s.pushBack(&s.work, c)
		} else if ok(s.hosts[c.key]) {
			return c
		} else {
			passed++
		}
		c = next
	}
	return nil
}

// leastWorkingOfTop returns the unreserved connection that worked least
// recently (never-working and pending ones first) of the host holding the
// most connections among those holding an unreserved one, if ok accepts
// that host (nil ok accepts any).
func (s *hostShares) leastWorkingOfTop(now time.Time, ok func(*shareHost) bool) *hostConn {
	var top *shareHost
	for _, x := range s.hosts {
		if len(x.conns) > x.reserved && (top == nil || len(x.conns) > len(top.conns)) {
			top = x
		}
	}
	if top == nil || (ok != nil && !ok(top)) {
		return nil
	}
	var best *hostConn
	for _, c := range top.conns {
		if c.reserve.IsValid() {
			continue
		}
		c.working(now)
		if best == nil || c.lastWork.Before(best.lastWork) {
			best = c
		}
	}
	return best
}

func (s *hostShares) pushBack(l, c *hostConn) {
	c.prev, c.next = l.prev, l
	l.prev.next = c
	l.prev = c
}

func (s *hostShares) unlink(c *hostConn) {
	if c.next == nil {
		return
	}
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
}

// remove takes hc out (a no-op if it is out already).
func (s *hostShares) remove(hc *hostConn) {
	s.mu.Lock()
	s.removeLocked(hc)
	s.mu.Unlock()
}

func (s *hostShares) removeLocked(hc *hostConn) {
	if hc.idx < 0 {
		return
	}
	h := s.hosts[hc.key]
	last := len(h.conns) - 1
	h.conns[hc.idx] = h.conns[last]
	h.conns[hc.idx].idx = hc.idx
	h.conns[last] = nil
	h.conns = h.conns[:last]
	hc.idx = -1
	if len(h.conns) == 0 {
		delete(s.hosts, hc.key)
	}
	if hc.reserve.IsValid() {
		h.reserved--
		if s.reserved[hc.reserve]--; s.reserved[hc.reserve] <= 0 {
			delete(s.reserved, hc.reserve)
		}
	} else {
		s.unlink(hc)
	}
}

// wasEvicted reports whether the MaxConns rule closed hc.
func (s *hostShares) wasEvicted(hc *hostConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hc.evicted
}
