package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// httpEndpoint is one of the CLI's own HTTP endpoints (--debug-addr,
// --metrics-addr): served in the background from start to Close. A nil
// *httpEndpoint is an endpoint that is off; every method is safe on it.
type httpEndpoint struct {
	srv     *http.Server
	addr    string        // the address listened on, with the actual port
	attr    string        // its log attribute, e.g. "debug_addr"
	timeout time.Duration // how long Close lets requests in flight finish
	done    chan struct{} // closed when Serve has returned
}

// serveEndpoint serves srv on ln in the background and logs the start line
// "<what> endpoint serving" with attr and the extra attributes, warning
// first when the address is not loopback (allowFlag made that legal).
// Close waits up to shutdown for requests in flight. Every limit srv leaves
// zero is set (see httpMaxHeaderBytes and the other http* limits), at
// most httpMaxConns connections are served at once, shared by source host
// (see limitListener), and the requests in flight are bounded by the
// memory they may cost (see httpRequestBudget).
func serveEndpoint(ln net.Listener, srv *http.Server, what, attr, allowFlag string, shutdown time.Duration,
	logger *slog.Logger, extra ...any) *httpEndpoint {
	return serveEndpointCapped(ln, srv, httpMaxConns, what, attr, allowFlag, shutdown, logger, extra...)
}

// serveEndpointCapped is serveEndpoint with a connection cap of maxConns.
func serveEndpointCapped(ln net.Listener, srv *http.Server, maxConns int, what, attr, allowFlag string, shutdown time.Duration,
	logger *slog.Logger, extra ...any) *httpEndpoint {
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = httpReadHeaderTimeout
	}
	if srv.ReadTimeout == 0 {
		srv.ReadTimeout = httpReadTimeout
	}
	if srv.WriteTimeout == 0 {
		srv.WriteTimeout = httpWriteTimeout
	}
	if srv.IdleTimeout == 0 {
		srv.IdleTimeout = httpIdleTimeout
	}
	if srv.MaxHeaderBytes == 0 {
		srv.MaxHeaderBytes = httpMaxHeaderBytes
	}
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	h := &httpEndpoint{srv: srv, addr: ln.Addr().String(), attr: attr, timeout: shutdown, done: make(chan struct{})}
	ll := newLimitListener(ln, maxConns, what, logger)
	ln = ll
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		ll.connState(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	if srv.Handler != nil {
		srv.Handler = (&inFlight{budget: httpRequestBudget, bodyCap: kvIndexMaxBody}).wrap(srv.Handler)
	}
	go func() {
		defer close(h.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(what+" endpoint stopped", attr, h.addr, "err", err)
		}
	}()
	if !isLoopbackHost(hostOf(h.addr)) {
		logger.Warn(what+" endpoint serving on a non-loopback address ("+allowFlag+")", attr, h.addr)
	}
	logger.Info(what+" endpoint serving", append([]any{attr, h.addr}, extra...)...)
	return h
}

// Addr returns the address the endpoint listens on ("" when off).
func (h *httpEndpoint) Addr() string {
	if h == nil {
		return ""
	}
	return h.addr
}

// logAttrs returns the endpoint's attribute for a start line, or nothing
// when it is off.
func (h *httpEndpoint) logAttrs() []any {
	if h == nil {
		return nil
	}
	return []any{h.attr, h.addr}
}

// Close stops the endpoint: it stops accepting, lets requests in flight
// finish for up to its shutdown timeout, then closes their connections,
// and waits for the server goroutine to end. It is idempotent.
func (h *httpEndpoint) Close() {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		h.srv.Close()
	}
	<-h.done
}
