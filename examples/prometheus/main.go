// Command prometheus runs a SafeLoop on a PULL socket and serves its counters
// at /metrics with the Prometheus client library, through zmqguard's
// collector (package metrics/zgprom): the loop and the socket are read at
// scrape time from their Stats snapshots, and the OnDrop and handler hooks
// feed a per-peer source set whose label cardinality is capped (peers beyond
// the cap count as source="other").
//
//	go run ./examples/prometheus -demo & sleep 3; curl -s 127.0.0.1:9100/metrics | grep zmqguard_
//
// The same Set can feed OpenTelemetry instead: see package metrics/zgotel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

// maxPeers caps the per-peer series; the collector folds later hosts into
// source="other". It also bounds the map below.
const maxPeers = 256

// peers counts messages and drops by peer host, from the loop's hooks.
type peers struct {
	mu sync.Mutex
	n  map[string]*metrics.Source
}

// source returns host's entry; hosts beyond 4×maxPeers share one, so a
// scanner cycling through addresses cannot grow the map without bound.
func (p *peers) source(peer *socket.Peer) *metrics.Source {
	host, _, err := net.SplitHostPort(peer.String())
	if err != nil {
		host = "unknown"
	}
	s, ok := p.n[host]
	if !ok {
		if len(p.n) >= 4*maxPeers {
			host = "overflow"
			if s, ok = p.n[host]; ok {
				return s
			}
		}
		s = &metrics.Source{Name: host, Connected: true}
		p.n[host] = s
	}
	return s
}

func (p *peers) delivered(peer *socket.Peer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.source(peer).Received++
}

func (p *peers) dropped(d loop.Drop) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.source(d.Peer)
	s.Received++
	s.Dropped[d.Reason]++
}

// list returns the peers sorted by name, for the collector.
func (p *peers) list() []metrics.Source {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]metrics.Source, 0, len(p.n))
	for _, s := range p.n {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// demoFrames are what -demo pushes once a second: valid (nil, 7), a bare
// int (validate), invalid UTF-8 (decode), an array32 length bomb (decode)
// and valid (2, 7).
var demoFrames = [][]byte{{0x92, 0xc0, 0x07}, {0x45}, {0xa2, 0xff, 0xfe}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0x92, 0x02, 0x07}}

// demo pushes demoFrames to ep once a second until ctx ends.
func demo(ctx context.Context, ep string) error {
	push, err := socket.New("PUSH", socket.DefaultOptions())
	if err != nil {
		return err
	}
	defer push.Close()
	if err := push.Dial(ep); err != nil {
		return err
	}
	for ctx.Err() == nil {
		for _, f := range demoFrames {
			_ = push.Send(ctx, f)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// config is what main's flags set.
type config struct {
	bind, http string
	demo       bool
	// ready, if set, is called with the PULL endpoint and the metrics
	// address once both are listening.
	ready func(endpoint, metricsAddr string)
}

// run serves until ctx ends.
func run(ctx context.Context, cfg config, logw io.Writer) error {
	logger := slog.New(slog.NewTextHandler(logw, nil))
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		return err
	}
	defer pull.Close()
	if err := pull.Bind(cfg.bind); err != nil {
		return err
	}
	ps := &peers{n: map[string]*metrics.Source{}}
	l, err := loop.New(pull, loop.Config[any]{
		Name: "front", Logger: logger, OnDrop: ps.dropped,
		Decode: loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(_ context.Context, d loop.Delivery[any]) error {
			ps.delivered(d.Msg.Peer)
			return nil
		},
		Validate: func(v *any) error {
			if a, ok := (*v).([]any); !ok || len(a) != 2 {
				return errors.New("want a 2-element array")
			}
			return nil
		},
	})
	if err != nil {
		return err
	}

	col := zgprom.NewCollector(nil)
	for _, err := range []error{
		col.AddLoop("front", l),
		col.AddSocket("front", pull),
		col.AddSources("front-peers", maxPeers, ps.list),
	} {
		if err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col, collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 10 * time.Second}))
	ln, err := net.Listen("tcp", cfg.http)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		<-served
	}()

	var wg sync.WaitGroup
	defer wg.Wait()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.demo {
		wg.Go(func() {
			if err := demo(lctx, pull.Endpoint()); err != nil {
				logger.Error("demo pusher", "err", err)
			}
		})
	}
	logger.Info("serving", "pull", pull.Endpoint(), "metrics", "http://"+ln.Addr().String()+"/metrics")
	if cfg.ready != nil {
		cfg.ready(pull.Endpoint(), ln.Addr().String())
	}
	if err := l.Run(lctx); err != nil {
		return fmt.Errorf("loop: %w", err)
	}
	return nil
}

func main() {
	var cfg config
	flag.StringVar(&cfg.bind, "bind", "tcp://127.0.0.1:5557", "PULL endpoint to bind")
	flag.StringVar(&cfg.http, "http", "127.0.0.1:9100", "address of the /metrics endpoint")
	flag.BoolVar(&cfg.demo, "demo", false, "also push sample valid and hostile messages to -bind once a second")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stderr); err != nil {
		log.Fatal(err)
	}
}
