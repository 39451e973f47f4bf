package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the CLI's own HTTP endpoints (--metrics-addr, --debug-addr),
// set by serveEndpoint on every server that does not set its own. They
// bound what one client can hold: a request header of at most
// httpMaxHeaderBytes that must arrive within httpReadHeaderTimeout,
// httpMaxConns connections at once (a connection beyond it is closed at
// accept), and a profile of at most maxProfileSeconds.
const (
	httpMaxHeaderBytes = 32 << 10
	httpMaxConns       = 64
	// kvIndexMaxConns is kv-index's --http cap: a query service for
	// routers, which may hold many keep-alive connections.
	kvIndexMaxConns       = 1024
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 10 * time.Second
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 30 * time.Second
	// maxProfileSeconds bounds ?seconds= of /debug/pprof/profile, trace
	// and the delta profiles (heap?seconds=N, ...): a longer request is
	// refused (400) naming the value. The debug server's WriteTimeout is
	// above it, so an accepted profile is always written out.
	maxProfileSeconds = 30
)

// limitListener is a net.Listener that holds at most max accepted
// connections open at once, shared by source host as zmtpguard shares a
// listener's MaxConns (a host is an IPv4 address or an IPv6 /64). When a
// connection arrives while max are open, one is closed for it, or else it
// is closed at once (so descriptors stay bounded and Accept never blocks;
// the client sees its connection reset or closed):
//
//  1. Idle first: a connection waiting for its next request (an idle
//     keep-alive one, or one that has sent nothing yet), the one idle the
//     longest, provided its host holds more connections than the new
//     connection's host holds idle ones (so a host holding idle
//     connections without end never closes a smaller host's).
//  2. Fair share: otherwise, if the host holding the most holds more than
//     max divided by the hosts (the new one's included) and more than the
//     new connection's host will, its connection longest in its present
//     state (serving or waiting), even one serving a request.
//
// A request that arrives on an idle connection at the instant it is
// closed is lost with it (a keep-alive client retries an idempotent one).
// Refusals and evictions are counted and logged at most once per
// refusalLogEvery. The server must report connection states to connState
// (serveEndpointCapped sets http.Server.ConnState).
type limitListener struct {
	net.Listener
	max     int
	what    string
	logger  *slog.Logger
	refused atomic.Uint64
	evictedIdle,
	evictedShare atomic.Uint64

	mu    sync.Mutex
	open  int
	hosts map[netip.Addr]*httpHost
	idle  limitConn // sentinel of the idle list, longest idle first

	logMu   sync.Mutex
	lastLog time.Time
	logged  uint64 // refused and evicted at the last log line
}

type httpHost struct {
	conns map[*limitConn]struct{}
	idle  int // how many of conns are in the idle list
}

const refusalLogEvery = 10 * time.Second

// httpIdleScan bounds the idle connections one admission passes over.
const httpIdleScan = 64

func newLimitListener(ln net.Listener, max int, what string, logger *slog.Logger) *limitListener {
	l := &limitListener{Listener: ln, max: max, what: what, logger: logger, hosts: make(map[netip.Addr]*httpHost)}
	l.idle.next, l.idle.prev = &l.idle, &l.idle
	return l
}

// httpHostKey is the share key of a remote address: the IPv4 address, the
// IPv6 /64, or the zero Addr for anything else.
func httpHostKey(a net.Addr) netip.Addr {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := ta.AddrPort().Addr().Unmap().WithZone("")
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			ip = p.Addr()
		}
	}
	return ip
}

// Accept returns the next connection admitted.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l, key: httpHostKey(c.RemoteAddr()), since: time.Now()}
		l.mu.Lock()
		var victim *limitConn
		idleVictim := false
		if l.open >= l.max {
			victim, idleVictim = l.pickVictimLocked(lc.key)
			if victim == nil {
				l.mu.Unlock()
				l.refused.Add(1) // counted before the peer can see the close
				c.Close()
				l.logNow()
				continue
			}
			l.removeLocked(victim)
		}
		h := l.hosts[lc.key]
		if h == nil {
			h = &httpHost{conns: make(map[*limitConn]struct{})}
			l.hosts[lc.key] = h
		}
		h.conns[lc] = struct{}{}
		l.open++
		l.setIdleLocked(lc, h, true) // nothing sent yet
		l.mu.Unlock()
		if victim != nil {
			if idleVictim {
				l.evictedIdle.Add(1)
			} else {
				l.evictedShare.Add(1)
			}
			victim.Conn.Close()
			l.logNow()
		}
		return lc, nil
	}
}

// pickVictimLocked chooses the connection to close for a new one from key
// (see limitListener), nil if none may be.
func (l *limitListener) pickVictimLocked(key netip.Addr) (*limitConn, bool) {
	h := l.hosts[key]
	n, idleH := 0, 0
	if h != nil {
		n, idleH = len(h.conns), h.idle
	}
	c := l.idle.next
	for passed := 0; c != &l.idle && passed < httpIdleScan; passed++ {
		if len(l.hosts[c.key].conns) > idleH {
			return c, true
		}
		c = c.next
	}
	var top *httpHost
	for _, x := range l.hosts {
		if top == nil || len(x.conns) > len(top.conns) {
			top = x
		}
	}
	nh := len(l.hosts)
	if h == nil {
		nh++
	}
	if top == nil || top == h || len(top.conns) <= n+1 || len(top.conns) <= l.max/nh {
		return nil, false
	}
	var oldest *limitConn
	for x := range top.conns {
		if oldest == nil || x.since.Before(oldest.since) {
			oldest = x
		}
	}
	return oldest, false
}

// setIdleLocked puts c in the idle list (at the back) or takes it out.
func (l *limitListener) setIdleLocked(c *limitConn, h *httpHost, idle bool) {
	if idle == (c.next != nil) {
		return
	}
	if idle {
		c.prev, c.next = l.idle.prev, &l.idle
		l.idle.prev.next = c
		l.idle.prev = c
		h.idle++
		return
	}
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
	h.idle--
}

// removeLocked takes c out (a no-op if it is out already).
func (l *limitListener) removeLocked(c *limitConn) {
	if c.removed {
		return
	}
	c.removed = true
	h := l.hosts[c.key]
	l.setIdleLocked(c, h, false)
	delete(h.conns, c)
	if len(h.conns) == 0 {
		delete(l.hosts, c.key)
	}
	l.open--
}

// connState is the server's http.Server.ConnState hook: a connection
// serving a request leaves the idle list, one waiting for its next request
// joins it at the back.
func (l *limitListener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok || (st != http.StateActive && st != http.StateIdle) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.removed {
		return
	}
	c.since = time.Now()
	l.setIdleLocked(c, l.hosts[c.key], st == http.StateIdle)
}

// logNow logs the refusal and eviction counts now and then.
func (l *limitListener) logNow() {
	r, ei, es := l.refused.Load(), l.evictedIdle.Load(), l.evictedShare.Load()
	n := r + ei + es
	l.logMu.Lock()
	defer l.logMu.Unlock()
	if now := time.Now(); l.lastLog.IsZero() || now.Sub(l.lastLog) >= refusalLogEvery {
		l.logger.Warn(l.what+" endpoint connection cap reached: idle connections closed first, then over-share hosts', else the new one refused",
			"max_conns", l.max, "refused", r, "evicted_idle", ei, "evicted_over_share", es, "since_last_log", n-l.logged)
		l.lastLog, l.logged = now, n
	}
}

// Refused returns how many connections the cap refused.
func (l *limitListener) Refused() uint64 { return l.refused.Load() }

type limitConn struct {
	net.Conn
	l    *limitListener
	key  netip.Addr
	once sync.Once
	// Under l.mu:
	since      time.Time // accepted, or last state change
	removed    bool
	prev, next *limitConn // idle list links (nil: not idle)
}

// CloseWrite closes the sending side of the connection when it has one.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.removeLocked(c)
		c.l.mu.Unlock()
	})
	return err
}

// Requests in flight are bounded by the memory they may cost: a request
// costs httpRequestBase plus httpBodyFactor times its body (Content-Length,
// or the endpoint's body cap when it is not given), and the requests being
// served may cost httpRequestBudget in all. Requests costing more than
// httpSmallRequest ("big") may take only three quarters of it, and at most
// half the CPUs (GOMAXPROCS, at least one) serve big requests at once, so
// small requests (a router's /score, GET /stats) always find room and a
// CPU beside big bodies. A
// request past the budget is answered 503 with Retry-After before its
// body is read (refuseEarly): the answer is written first, then what the
// client still sends is discarded for two refusals at a time, and the
// others' connections are left unread and closed a second later (reading
// the bodies of a big-body flood cost the honest requests their CPU).
//
// httpBodyFactor is what decoding a body holds per body byte: kv-index's
// /score decodes as it reads (kvindex_body.go), and BenchmarkScoreBodyDecode
// measured 2.0 bytes per body byte at the peak for an 8 MiB body of a
// million 7-digit tokens (the pooled token chunks and the tokens; 1.0
// allocated per op), where encoding/json allocated 9.0 (75 MB) and the
// factor was 4 (issue 37). An 8 MiB LoRA name holds 2.0 too (encoding/json
// allocated 5.0). More per byte: 1-digit tokens 8.0 (but at most 16 MiB:
// the million tokens a body may hold; encoding/json allocated 23.9), 8 MiB
// of 20-byte engine names 3.9 (encoding/json 9.3).
const (
	httpRequestBudget = 256 << 20
	httpRequestBase   = 64 << 10
	httpBodyFactor    = 2
	httpSmallRequest  = 1 << 20
)

// inFlight is the memory bound on requests in flight (see httpRequestBudget).
type inFlight struct {
	budget, bodyCap int64
	bigMax          int // big requests at once; 0 means half of GOMAXPROCS, at least 1
	mu              sync.Mutex
	used            int64
	big             int
	refused         atomic.Uint64
	draining        atomic.Int32  // refusals discarding their body now
	parked          atomic.Int32  // refused connections parked now
	parks           atomic.Uint64 // refused connections parked in all
}

func (f *inFlight) cost(r *http.Request) int64 {
	n := r.ContentLength
	if n < 0 || n > f.bodyCap {
		n = f.bodyCap
	}
	return httpRequestBase + httpBodyFactor*n
}

func (f *inFlight) take(c int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	limit := f.budget
	if c > httpSmallRequest {
		limit = f.budget / 4 * 3
		bigMax := f.bigMax
		if bigMax <= 0 {
			bigMax = max(1, runtime.GOMAXPROCS(0)/2)
		}
		if f.big >= bigMax {
			return false
		}
	}
	if f.used+c > limit {
		return false
	}
	f.used += c
	if c > httpSmallRequest {
		f.big++
	}
	return true
}

func (f *inFlight) give(c int64) {
	f.mu.Lock()
	f.used -= c
	if c > httpSmallRequest {
		f.big--
	}
	f.mu.Unlock()
}

// wrap bounds h's requests in flight.
func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := f.cost(r)
		if !f.take(c) {
			f.refused.Add(1)
			if f.refuseEarly(w, r) {
				return
			}
			if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
				io.Copy(io.Discard, io.LimitReader(r.Body, f.bodyCap+1))
			}
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			http.Error(w, httpBusy, http.StatusServiceUnavailable)
			return
		}
		defer f.give(c)
		h.ServeHTTP(w, r)
	})
}

const httpBusy = "busy: requests in flight would pass the endpoint's memory bound; retry after 1 s"

// httpDrainTimeout bounds how long a refused request's body is discarded
// after its 503 was sent, httpFullDrains how many refusals do so at once.
// The others are parked: their connection is left unread (the client's
// sending stops once the small window of an unread connection is full)
// and closed httpParkTime later, httpMaxParked at most at once (beyond,
// closed at once).
const (
	httpDrainTimeout = 10 * time.Second
	httpFullDrains   = 2
	httpParkTime     = time.Second
	httpMaxParked    = 512
)

// refuseEarly answers an HTTP/1.x request 503 before reading its body: it
// takes the connection over, writes the answer and closes its sending
// side. Then, while at most httpFullDrains refusals do so at once, it
// discards what the client still sends (the whole body, up to the cap,
// within httpDrainTimeout), so that a client that reads only after it has
// sent everything receives the status too. Beyond, the connection is
// parked: nothing more is read, and it is closed httpParkTime later. A
// client that reads while it sends (Go's net/http, curl) has its status by
// then; one that sends a big body before it reads may see the connection
// reset. Reading refused bodies is what a big-body flood costs the server
// (issue 37: 200 clients posting 8 MiB bodies, each refused one read for up
// to 1 MiB, took a whole CPU in the kernel and the honest requests' p50 to
// 77 ms). False when the connection cannot be taken over (the caller
// answers the ordinary way).
func (f *inFlight) refuseEarly(w http.ResponseWriter, r *http.Request) bool {
	hj, ok := w.(http.Hijacker)
	if !ok || r.ProtoMajor != 1 {
		return false
	}
	nc, rw, err := hj.Hijack()
	if err != nil {
		return false
	}
	nc.SetDeadline(time.Now().Add(httpDrainTimeout))
	fmt.Fprintf(rw, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"+
		"Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s\n", len(httpBusy)+1, httpBusy)
	if rw.Flush() != nil {
		nc.Close()
		return true
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	if f.draining.Add(1) <= httpFullDrains {
		defer f.draining.Add(-1)
		defer nc.Close()
		io.Copy(io.Discard, io.LimitReader(rw, f.bodyCap+1))
		return true
	}
	f.draining.Add(-1)
	if f.parked.Add(1) > httpMaxParked {
		f.parked.Add(-1)
		nc.Close()
		return true
	}
	f.parks.Add(1)
	time.AfterFunc(httpParkTime, func() {
		nc.Close()
		f.parked.Add(-1)
	})
	return true
}

// boundProfiles wraps the pprof handlers: a ?seconds= over max (or not a
// number) is refused with 400 naming the value, before any profiling
// starts.
func boundProfiles(h http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.URL.Query().Get("seconds"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 || n > int64(max) {
				http.Error(w, "seconds="+strconv.Quote(s)+" refused: profile durations are limited to 0.."+strconv.Itoa(max)+" s", http.StatusBadRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
