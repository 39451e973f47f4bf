package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
)

// metricsHelp is the paragraph the help texts of the long-running commands
// share about --metrics-addr.
const metricsHelp = `With --metrics-addr HOST:PORT (off by default; port 0 picks a free port) it
serves its counters in the Prometheus text format at /metrics on that
address: zmqguard_loop_messages_dropped_total{loop,reason},
zmqguard_socket_refused_total{socket,reason}, zmqguard_socket_peers and
the rest of package metrics' families, read from the same Stats snapshots as
the exit line, plus Go runtime and process metrics (go_*, process_*). The
address is logged (metrics_addr, also in the start line). HOST must be
loopback unless --metrics-allow-remote is given.`

// metricsShutdownTimeout bounds how long the metrics endpoint waits for
// scrapes in flight at exit.
const metricsShutdownTimeout = 2 * time.Second

// metricsScrapeTimeout bounds one scrape.
const metricsScrapeTimeout = 10 * time.Second

// metricsOptions are the --metrics-addr and --metrics-allow-remote flags.
type metricsOptions struct {
	addr        string
	allowRemote bool
}

// addMetricsFlags registers --metrics-addr and --metrics-allow-remote on fs.
func addMetricsFlags(fs *flag.FlagSet) *metricsOptions {
	o := &metricsOptions{}
	fs.StringVar(&o.addr, "metrics-addr", "",
		"serve Prometheus metrics at /metrics over HTTP on this `host:port` (default off; loopback only)")
	fs.BoolVar(&o.allowRemote, "metrics-allow-remote", false,
		"allow a --metrics-addr host that is not loopback")
	return o
}

// check validates the flags: a usage error unless --metrics-addr is empty
// (off) or host:port with a loopback host (or any host with
// --metrics-allow-remote).
func (o *metricsOptions) check() error {
	return checkLocalAddr("--metrics-addr", o.addr, "127.0.0.1:9100", "the metrics endpoint describes this process to anyone who reaches it", o.allowRemote)
}

// metricsServer is the HTTP endpoint --metrics-addr starts.
type metricsServer struct {
	col *zgprom.Collector
	ep  *httpEndpoint
}

// newMetricsHandler returns the /metrics handler for c plus the Go runtime
// and process collectors, on a registry and mux of their own.
func newMetricsHandler(c *zgprom.Collector, logger *slog.Logger) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, col := range []prometheus.Collector{
		c,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             metricsScrapeTimeout,
	}))
	return mux, nil
}

// startMetrics listens on o.addr and serves /metrics in the background; add
// registers the command's components on the collector. It returns nil, nil
// when --metrics-addr is off. Close stops it.
func startMetrics(o *metricsOptions, logger *slog.Logger, add func(*zgprom.Collector) error) (*metricsServer, error) {
	if o.addr == "" {
		return nil, nil
	}
	c := zgprom.NewCollector(nil)
	if err := add(c); err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	h, err := newMetricsHandler(c, logger)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: h, WriteTimeout: metricsScrapeTimeout + 5*time.Second}
	ep := serveEndpoint(ln, srv, "metrics", "metrics_addr", "--metrics-allow-remote", metricsShutdownTimeout, logger,
		"url", "http://"+ln.Addr().String()+"/metrics")
	return &metricsServer{col: c, ep: ep}, nil
}

// addLoop adds a loop created after the endpoint started; a no-op when the
// endpoint is off.
func (m *metricsServer) addLoop(name string, l interface{ Stats() loop.Stats }) error {
	if m == nil {
		return nil
	}
	return m.col.AddLoop(name, l)
}

// Addr returns the address the endpoint listens on ("" when off).
func (m *metricsServer) Addr() string {
	if m == nil {
		return ""
	}
	return m.ep.Addr()
}

// logAttrs returns the start line's metrics_addr attribute, or nothing when
// the endpoint is off.
func (m *metricsServer) logAttrs() []any {
	if m == nil {
		return nil
	}
	return m.ep.logAttrs()
}

// Close stops the endpoint (see httpEndpoint.Close). It is safe on a nil
// server and idempotent.
func (m *metricsServer) Close() {
	if m == nil {
		return
	}
	m.ep.Close()
}
