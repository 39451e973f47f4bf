package main

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
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
// connections open at once: a connection accepted beyond it is closed at
// once (so descriptors stay bounded and Accept never blocks; the client
// sees its connection reset or closed), counted and logged at most once per
// refusalLogEvery.
type limitListener struct {
	net.Listener
	max     int64
	what    string
	logger  *slog.Logger
	open    atomic.Int64
	refused atomic.Uint64

	logMu   sync.Mutex
	lastLog time.Time
	logged  uint64 // refused at the last log line
}

const refusalLogEvery = 10 * time.Second

func newLimitListener(ln net.Listener, max int, what string, logger *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), what: what, logger: logger}
}

// Accept returns the next connection within the cap.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse() // counted before the peer can see the close
			c.Close()
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// refuse counts a refused connection and logs the count now and then.
func (l *limitListener) refuse() {
	n := l.refused.Add(1)
	l.logMu.Lock()
	defer l.logMu.Unlock()
	if now := time.Now(); l.lastLog.IsZero() || now.Sub(l.lastLog) >= refusalLogEvery {
		l.logger.Warn(l.what+" endpoint connection refused: connection cap reached", "max_conns", l.max,
			"refused", n, "refused_since_last_log", n-l.logged)
		l.lastLog, l.logged = now, n
	}
}

// Refused returns how many connections the cap refused.
func (l *limitListener) Refused() uint64 { return l.refused.Load() }

type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
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
