package zmtpguard

import (
	"net"
	"net/netip"
	"sync"
)

// hostShares is a listener's open connections (pending and established)
// grouped by source host, for MaxConnsPerHost and the fair share of
// MaxConns: when the listener is full, a connection from a host holding
// less than its share (MaxConns divided by the hosts holding connections,
// the new one's included) closes a connection of the host holding the most,
// and a connection from a host at or over its share is refused.
//
// The accept goroutine adds (and evicts); each connection's release
// removes its own entry: mu guards everything. A host is dropped as soon as
// it holds nothing.
type hostShares struct {
	mu    sync.Mutex
	hosts map[netip.Addr]*shareHost
}

type shareHost struct {
	conns []*hostConn
}

// hostConn is one open connection counted in hostShares.
type hostConn struct {
	nc   net.Conn
	key  netip.Addr
	idx  int // position in its host's conns; -1 once removed
	once sync.Once
	// evicted is set (under hostShares.mu) when the fair share closed the
	// connection; its handshake, if still running, then reports nothing.
	evicted bool
}

// shareVerdict is hostShares.admit's answer.
type shareVerdict int

const (
	shareAdmit     shareVerdict = iota
	sharePerHost                // the host holds MaxConnsPerHost
	shareFull                   // the listener is full and the host holds its share or more
	shareEvictedOK              // admitted; victim must be closed
)

// admit decides on a new connection from key while open connections are
// open, and on admission records it. It returns the victim to close
// (shareEvictedOK), with how many connections its host held, or, on a
// refusal, how many the new connection's host holds.
func (s *hostShares) admit(hc *hostConn, open int64, maxConns, perHost int) (v shareVerdict, victim *hostConn, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts == nil {
		s.hosts = make(map[netip.Addr]*shareHost)
	}
	h := s.hosts[hc.key]
	n := 0
	if h != nil {
		n = len(h.conns)
	}
	if n >= perHost {
		return sharePerHost, nil, n
	}
	if open >= int64(maxConns) {
		nh := len(s.hosts)
		if h == nil {
			nh++
		}
		share := maxConns / nh
		if n >= share {
			return shareFull, nil, n
		}
		var top *shareHost
		for _, x := range s.hosts {
			if top == nil || len(x.conns) > len(top.conns) {
				top = x
			}
		}
		// The top host holds at least the average, which is at least the
		// share; it must hold more than the newcomer will, so that two
		// hosts never take turns evicting each other.
		if top == nil || len(top.conns) <= n+1 {
			return shareFull, nil, n
		}
		victim = top.conns[len(top.conns)-1]
		held = len(top.conns)
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
	return v, victim, held
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
}

// wasEvicted reports whether the fair share closed hc.
func (s *hostShares) wasEvicted(hc *hostConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hc.evicted
}
