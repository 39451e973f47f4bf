package zmtpguard

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// pendingPool is the set of handshakes in progress on one listener, grouped
// by source host, for eviction when MaxPendingHandshakes is reached.
//
// Each host keeps its pending entries in an intrusive list in arrival order
// (oldest first); the hosts form a max-heap ordered by pending count, ties
// broken by the arrival of their oldest entry. Admission is O(log hosts),
// removal O(log hosts), and a host is dropped (map and heap) as soon as its
// count reaches zero, so the pool holds nothing for hosts with no handshake
// in progress.
//
// The accept goroutine adds (and evicts); each handshake goroutine removes
// its own entry when it ends: mu guards everything.
type pendingPool struct {
	mu    sync.Mutex
	hosts map[netip.Addr]*pendingHost
	heap  []*pendingHost // max-heap ordered by before
	n     int            // entries in the pool
	seq   uint64         // arrival counter
	free  []*pendingHost // dropped hosts kept for reuse (at most maxFreeHosts)
	// gauge, if set, follows n (it is Stats.Pending, which may sum
	// several pools); it changes under mu, so it never runs ahead of n.
	gauge *atomic.Int64
}

// maxFreeHosts bounds the dropped host records kept for reuse, so that
// connections from ever-new hosts do not allocate one each.
const maxFreeHosts = 64

// pendingHost is one source host's pending handshakes.
type pendingHost struct {
	key        netip.Addr
	head, tail *pendingEntry // oldest, newest
	n          int
	idx        int // position in pendingPool.heap
}

// pendingEntry is one pending handshake. Its fields other than nc belong to
// the pool (under its mutex).
type pendingEntry struct {
	nc net.Conn
	// conn is the connection's record for MaxConns (read-only).
	conn       *hostConn
	host       *pendingHost
	prev, next *pendingEntry
	seq        uint64
	// evicted is set when the pool removed the entry to make room; in is
	// true while the entry is in the pool.
	evicted, in bool
}

// before is the heap order: more pending handshakes first; on a tie, the
// host whose oldest pending handshake arrived first.
func before(a, b *pendingHost) bool {
	if a.n != b.n {
		return a.n > b.n
	}
	return a.head.seq < b.head.seq
}

// admit adds e as a handshake from host key and, when the pool then holds
// more than max entries, evicts one: the oldest entry of the host with the
// most entries (the new one counted), ties going to the host holding the
// oldest entry overall. The new entry itself is never the victim while the
// pool held anything before it. It returns the evicted entry (nil if none)
// and how many entries its host held before the eviction.
func (p *pendingPool) admit(e *pendingEntry, key netip.Addr, max int) (victim *pendingEntry, hostPending int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.add(e, key)
	if p.n <= max || len(p.heap) == 0 {
		return nil, 0
	}
	h := p.heap[0]
	victim, hostPending = h.head, h.n
	p.unlink(victim)
	victim.evicted = true
	return victim, hostPending
}

// remove takes e out of the pool. It reports false if e was evicted (or
// already removed): its end has been accounted for by the eviction.
func (p *pendingPool) remove(e *pendingEntry) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !e.in {
		return false
	}
	p.unlink(e)
	return true
}

// len returns the number of entries in the pool.
func (p *pendingPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// hostCount returns the number of hosts with pending entries.
func (p *pendingPool) hostCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.hosts)
}

func (p *pendingPool) add(e *pendingEntry, key netip.Addr) {
	h := p.hosts[key]
	if h == nil {
		if p.hosts == nil {
			p.hosts = make(map[netip.Addr]*pendingHost)
		}
		if k := len(p.free); k > 0 {
			h = p.free[k-1]
			p.free[k-1] = nil
			p.free = p.free[:k-1]
			*h = pendingHost{key: key, idx: len(p.heap)}
		} else {
			h = &pendingHost{key: key, idx: len(p.heap)}
		}
		p.hosts[key] = h
		p.heap = append(p.heap, h)
	}
	p.seq++
	e.seq = p.seq
	e.host = h
	e.prev, e.next = h.tail, nil
	e.in = true
	if h.tail != nil {
		h.tail.next = e
	} else {
		h.head = e
	}
	h.tail = e
	h.n++
	p.n++
	if p.gauge != nil {
		p.gauge.Add(1)
	}
	p.up(h.idx) // count grew (or a new host): it can only rise
}

func (p *pendingPool) unlink(e *pendingEntry) {
	h := e.host
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		h.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		h.tail = e.prev
	}
	e.prev, e.next, e.host = nil, nil, nil
	e.in = false
	h.n--
	p.n--
	if p.gauge != nil {
		p.gauge.Add(-1)
	}
	if h.n == 0 {
		p.dropHost(h)
		return
	}
	// Fewer entries, or a younger oldest entry: it can only sink.
	p.down(h.idx)
}

// dropHost removes an empty host from the map and the heap.
func (p *pendingPool) dropHost(h *pendingHost) {
	delete(p.hosts, h.key)
	i, last := h.idx, len(p.heap)-1
	if i != last {
		p.swap(i, last)
	}
	p.heap[last] = nil
	p.heap = p.heap[:last]
	if i != last {
		p.down(i)
		p.up(i)
	}
	h.idx = -1
	if len(p.free) < maxFreeHosts {
		p.free = append(p.free, h)
	}
}

func (p *pendingPool) swap(i, j int) {
	p.heap[i], p.heap[j] = p.heap[j], p.heap[i]
	p.heap[i].idx = i
	p.heap[j].idx = j
}

func (p *pendingPool) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !before(p.heap[i], p.heap[parent]) {
			return
		}
		p.swap(i, parent)
		i = parent
	}
}

func (p *pendingPool) down(i int) {
	n := len(p.heap)
	for {
		best := i
		if l := 2*i + 1; l < n && before(p.heap[l], p.heap[best]) {
			best = l
		}
		if r := 2*i + 2; r < n && before(p.heap[r], p.heap[best]) {
			best = r
		}
		if best == i {
			return
		}
		p.swap(i, best)
		i = best
	}
}

// addrIP returns the IP address of a network address, false when it has
// none (a unix socket peer, an unknown address type).
func addrIP(ra net.Addr) (netip.Addr, bool) {
	switch a := ra.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap(), true
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap(), true
	case *net.UnixAddr:
		return netip.Addr{}, false
	case nil:
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(ra.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// sourceHost returns the eviction key of a peer address with the default
// grouping: its IPv4 address (IPv4-mapped IPv6 unmapped), the /64 prefix of
// its IPv6 address (one subscriber usually holds a whole /64), or the zero
// Addr for every peer without an IP address (unix sockets), which thus
// count as one host.
func sourceHost(ra net.Addr) netip.Addr { return sourceHostBits(ra, 0) }

// sourceHostBits is sourceHost grouping IPv6 addresses by prefixes of
// bits6 bits (0 means 64; see Config.IPv6HostPrefix).
func sourceHostBits(ra net.Addr, bits6 int) netip.Addr {
	ip, ok := addrIP(ra)
	if !ok || !ip.IsValid() {
		return netip.Addr{}
	}
	ip = ip.WithZone("")
	if bits6 <= 0 || bits6 > 128 {
		bits6 = defaultIPv6HostPrefix
	}
	if ip.Is6() {
		if p, err := ip.Prefix(bits6); err == nil {
			ip = p.Addr()
		}
	}
	return ip
}
