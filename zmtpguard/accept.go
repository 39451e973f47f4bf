package zmtpguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// Accept back-off bounds: after a failed accept the loop waits minBackoff,
// doubling on each further failure up to maxBackoff, and starts over after a
// success (the net/http scheme).
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
)

// Stats is a snapshot of a Listener's (or a Transport's) counters.
type Stats struct {
	// Accepted counts TCP (or unix) connections taken from the OS listener,
	// refused ones included.
	Accepted uint64 `json:"accepted"`
	// Handshakes counts connections whose guarded handshake completed.
	Handshakes uint64 `json:"handshakes"`
	// AcceptErrors counts failed accepts (each followed by a back-off).
	AcceptErrors uint64 `json:"accept_errors"`
	// Refused counts peer input refused, by reason: refusals at accept and
	// evictions (policy), handshake failures and violations on established
	// connections. Each connection's handshake ends in at most one.
	Refused decodeguard.Counts `json:"refused"`
	// Evicted counts pending handshakes aborted to admit a newer connection
	// when MaxPendingHandshakes was reached (see [Config]); each is also one
	// policy refusal in Refused.
	Evicted uint64 `json:"evicted"`
	// ConnsEvicted counts open connections (pending or established)
	// closed by the MaxConns rule to admit another (see
	// [Config.MaxConns]); each is also one policy refusal in Refused.
	// EvictedIdle, EvictedOverShare and EvictedForReserve divide it by
	// reason: an idle or never-productive connection closed first; a
	// connection of a host holding more than its fair share, when no idle
	// one could go; a connection closed so that a Config.Reserve network
	// gets its reserved slot.
	ConnsEvicted      uint64 `json:"conns_evicted"`
	EvictedIdle       uint64 `json:"evicted_idle"`
	EvictedOverShare  uint64 `json:"evicted_over_share"`
	EvictedForReserve uint64 `json:"evicted_for_reserve"`
	// Open is the number of connections counted against MaxConns: pending
	// handshakes plus established connections not yet closed.
	Open int64 `json:"open"`
	// Pending is the number of handshakes in progress (evicted ones no
	// longer count): at most MaxPendingHandshakes per listener.
	Pending int64 `json:"pending"`
}

// counters are the live values behind Stats.
type counters struct {
	accepted     atomic.Uint64
	handshakes   atomic.Uint64
	acceptErrors atomic.Uint64
	evicted      atomic.Uint64
	connsEvicted atomic.Uint64
	evictedWhy   [3]atomic.Uint64 // by evictReason
	violations   [len(decodeguard.Counts{})]atomic.Uint64
	open         atomic.Int64
	pending      atomic.Int64
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Accepted:          c.accepted.Load(),
		Handshakes:        c.handshakes.Load(),
		AcceptErrors:      c.acceptErrors.Load(),
		Evicted:           c.evicted.Load(),
		ConnsEvicted:      c.connsEvicted.Load(),
		EvictedIdle:       c.evictedWhy[evictIdle].Load(),
		EvictedOverShare:  c.evictedWhy[evictOverShare].Load(),
		EvictedForReserve: c.evictedWhy[evictReserve].Load(),
		Open:              c.open.Load(),
		Pending:           c.pending.Load(),
	}
	for i := range s.Refused {
		s.Refused[i] = c.violations[i].Load()
	}
	return s
}

// countingConfig returns cfg with defaults filled in and OnViolation
// replaced by a hook that counts each violation once in ctr and then calls
// cfg's own hook.
func countingConfig(cfg *Config, ctr *counters) Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.withDefaults()
	user := c.OnViolation
	c.OnViolation = func(v Violation) {
		r := v.Reason
		if int(r) >= len(ctr.violations) {
			r = decodeguard.ReasonNone
		}
		ctr.violations[r].Add(1)
		if user != nil {
			user(v)
		}
	}
	return c
}

// allowed reports whether a connection from ra passes the allowlist. An
// empty list allows everyone; a non-IP address (a unix socket peer) never
// matches a non-empty list.
func allowed(allow []netip.Prefix, ra net.Addr) bool {
	if len(allow) == 0 {
		return true
	}
	ip, ok := addrIP(ra)
	if !ok {
		return false
	}
	for _, p := range allow {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// acceptLoop is the accept machinery shared by Listener and the zmq4
// transport: one goroutine accepts with back-off, checks the allowlist and
// MaxConns, admits the connection to the pending pool (evicting one pending
// handshake when the pool is full), and starts one goroutine per connection
// that runs hs under the handshake deadline; finished handshakes are handed
// out through ready.
type acceptLoop[T any] struct {
	ln  net.Listener
	cfg *Config // defaults filled, counting OnViolation
	ctr *counters
	// hs runs the guarded handshake on nc (which it closes on failure) and
	// attaches release to the result, to be called once when it is closed,
	// and work, to be marked (markWork) whenever a message passes.
	// It does not report its violation: the loop does, unless the
	// handshake was evicted (which is reported as such), so that every
	// handshake ends in at most one violation.
	hs func(ctx context.Context, nc net.Conn, release func(), work *atomic.Uint32) (T, error)
	// discard closes a finished T nobody accepted.
	discard func(T)
	// wait sleeps d or until done; tests replace it to record back-offs.
	wait func(d time.Duration, done <-chan struct{})

	pending pendingPool
	shares  hostShares

	ready   chan T
	done    chan struct{} // closed by close
	stopped chan struct{} // closed when the accept goroutine ends
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	closeOnce sync.Once
	errMu     sync.Mutex
	err       error // why the accept goroutine stopped, when not closed
}

func newAcceptLoop[T any](ln net.Listener, cfg *Config, ctr *counters,
	hs func(context.Context, net.Conn, func(), *atomic.Uint32) (T, error), discard func(T)) *acceptLoop[T] {
	ctx, cancel := context.WithCancel(context.Background())
	return &acceptLoop[T]{
		ln: ln, cfg: cfg, ctr: ctr, hs: hs, discard: discard, wait: sleepOrDone,
		pending: pendingPool{gauge: &ctr.pending},
		ready:   make(chan T),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		ctx:     ctx, cancel: cancel,
	}
}

func sleepOrDone(d time.Duration, done <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	}
}

func (a *acceptLoop[T]) start() {
	a.wg.Add(1)
	go a.run()
}

func (a *acceptLoop[T]) isClosed() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// run is the accept goroutine.
func (a *acceptLoop[T]) run() {
	defer a.wg.Done()
	defer close(a.stopped)
	var delay time.Duration
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			if a.isClosed() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				a.errMu.Lock()
				a.err = err
				a.errMu.Unlock()
				return
			}
			// Every other failure (EMFILE, ECONNABORTED, ...) is waited
			// out: the loop never spins and never gives up.
			a.ctr.acceptErrors.Add(1)
			if delay == 0 {
				delay = minBackoff
			} else {
				delay = min(2*delay, maxBackoff)
			}
			a.wait(delay, a.done)
			continue
		}
		delay = 0
		a.ctr.accepted.Add(1)
		if a.isClosed() {
			nc.Close()
			return
		}
		a.admit(nc)
	}
}

// refuse closes nc at once and reports a policy violation.
func (a *acceptLoop[T]) refuse(nc net.Conn, detail string, length int64) {
	remote := remoteString(nc)
	nc.Close()
	v := violation(decodeguard.ReasonPolicy, detail, length, nil)
	v.Remote = remote
	a.cfg.OnViolation(*v)
}

// admit applies the allowlist, MaxConnsPerHost and the MaxConns rule
// (see [Config.MaxConns]), then starts nc's handshake, evicting a pending
// one if MaxPendingHandshakes is reached. Only the accept goroutine
// increments the counters it checks, so a check cannot be raced past.
func (a *acceptLoop[T]) admit(nc net.Conn) {
	ra := nc.RemoteAddr()
	if !allowed(a.cfg.Allow, ra) {
		a.refuse(nc, "source address not in the allowlist", -1)
		return
	}
	key := sourceHostBits(ra, a.cfg.IPv6HostPrefix)
	ip, _ := addrIP(ra)
	hc := &hostConn{nc: nc, key: key, ip: ip.WithZone("")}
	perHost := a.cfg.MaxConnsPerHost
	if perHost <= 0 {
		perHost = a.cfg.MaxConns
	}
	open := a.ctr.open.Load()
	pol := sharePolicy{maxConns: a.cfg.MaxConns, perHost: perHost, reserve: a.cfg.Reserve}
	verdict, victim, held, why := a.shares.admit(hc, open, pol, time.Now())
	switch verdict {
	case sharePerHost:
		if perHost == a.cfg.MaxConns {
			a.refuse(nc, "connection cap MaxConns="+itoa(a.cfg.MaxConns)+" reached by its source host alone", int64(held))
		} else {
			a.refuse(nc, "per-host connection cap MaxConnsPerHost="+itoa(perHost)+" reached by its source host", int64(held))
		}
		return
	case shareFull:
		a.refuse(nc, "connection cap MaxConns="+itoa(a.cfg.MaxConns)+" reached; its source host holds "+itoa(held)+
			", no idle connection may be closed for it and no host holds more than its fair share", open)
		return
	}
	e := &pendingEntry{nc: nc, conn: hc}
	victimPending, hostPending := a.pending.admit(e, key, a.cfg.MaxPendingHandshakes)
	a.ctr.open.Add(1)
	a.wg.Add(1)
	go a.handshake(e)
	if victim != nil {
		a.evictConn(victim, held, why)
	}
	if victimPending != nil {
		a.evict(victimPending, hostPending)
	}
}

// release gives back hc's MaxConns slot, once.
func (a *acceptLoop[T]) release(hc *hostConn) {
	hc.once.Do(func() {
		a.shares.remove(hc)
		a.ctr.open.Add(-1)
	})
}

// evictConn closes an open connection the MaxConns rule chose, and
// reports it (the connection's own handshake, if still running, reports
// nothing more; an established connection's reader sees it closed).
func (a *acceptLoop[T]) evictConn(hc *hostConn, held int, why evictReason) {
	// Count and report before closing: a peer that sees the close may look
	// at the counters at once.
	a.ctr.connsEvicted.Add(1)
	a.ctr.evictedWhy[why].Add(1)
	detail := "evicted: connection cap MaxConns=" + itoa(a.cfg.MaxConns) + " reached; "
	switch why {
	case evictIdle:
		detail += "idle connection (no message within " + workRecent.String() + ") closed for a new one; its source host held " + itoa(held)
	case evictOverShare:
		detail += "its source host held " + itoa(held) + " connections, the most, over its fair share"
	case evictReserve:
		detail += "closed for a connection from a reserved network (Config.Reserve); its source host held " + itoa(held)
	}
	v := violation(decodeguard.ReasonPolicy, detail, int64(held), nil)
	v.Remote = remoteString(hc.nc)
	a.cfg.OnViolation(*v)
	hc.nc.Close()
	a.release(hc)
}

// evict aborts the handshake of an entry the pool evicted, and reports it as
// the one violation of that handshake. Its goroutine sees the closed
// connection, finds the entry evicted, and reports nothing more.
func (a *acceptLoop[T]) evict(e *pendingEntry, hostPending int) {
	// Count and report before closing: a peer that sees the close may look
	// at the counters at once.
	a.ctr.evicted.Add(1)
	v := violation(decodeguard.ReasonPolicy,
		"evicted: MaxPendingHandshakes="+itoa(a.cfg.MaxPendingHandshakes)+" reached; its source host had "+
			itoa(hostPending)+" pending, the most", int64(hostPending), nil)
	v.Remote = remoteString(e.nc)
	a.cfg.OnViolation(*v)
	e.nc.Close()
}

func (a *acceptLoop[T]) handshake(e *pendingEntry) {
	defer a.wg.Done()
	hc := e.conn
	release := func() { a.release(hc) }
	t, err := a.hs(a.ctx, e.nc, release, &hc.work)
	// Exactly one of remove and the eviction takes e out of the pool: the
	// loser's end is the winner's to account for. A connection the fair
	// share of MaxConns closed was reported as such.
	evicted := !a.pending.remove(e) || a.shares.wasEvicted(hc)
	if err != nil {
		release()
		var v *Violation
		if !evicted && errors.As(err, &v) {
			a.cfg.OnViolation(*v)
		}
		return
	}
	if evicted {
		// The handshake completed as it was evicted: the eviction stands.
		a.discard(t)
		return
	}
	a.ctr.handshakes.Add(1)
	select {
	case a.ready <- t:
	case <-a.done:
		a.discard(t)
	}
}

// close stops accepting, cancels pending handshakes, closes finished ones
// nobody accepted, and waits for every goroutine of the loop.
func (a *acceptLoop[T]) close() error {
	var err error
	a.closeOnce.Do(func() {
		close(a.done)
		err = a.ln.Close()
		a.cancel()
		a.wg.Wait()
	})
	return err
}

// stopErr returns why the accept goroutine stopped on its own.
func (a *acceptLoop[T]) stopErr() error {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}
