// Command prometheus runs a SafeLoop on a PULL socket and serves its counters
// in the Prometheus text format without the client library: Loop.Stats()
// gives the totals at scrape time, the OnDrop hook counts drops by peer host.
//
// As a prometheus.Collector: Describe sends one *prometheus.Desc per metric
// below; Collect sends prometheus.MustNewConstMetric(desc,
// prometheus.CounterValue, v, labels...) for each Stats() field (GaugeValue
// for the last-drop time); the per-peer drops become a CounterVec that OnDrop
// increments with WithLabelValues(host).Inc().
//
//	go run ./examples/prometheus -demo & sleep 3; curl -s 127.0.0.1:9100/metrics
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// maxPeers bounds the per-peer drop series; later hosts count as "other".
const maxPeers = 256

// peerDrops is the OnDrop-fed count of drops by peer host.
type peerDrops struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (p *peerDrops) observe(d loop.Drop) {
	host, _, _ := net.SplitHostPort(d.Peer.Addr()) // "" if unknown
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.n[host]; !ok && len(p.n) >= maxPeers {
		host = "other"
	}
	p.n[host]++
}

// metrics writes the text exposition for one loop.
func metrics(l *loop.Loop[any], peers *peerDrops) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		st, name := l.Stats(), l.Name()
		head := func(metric, typ, help string) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, typ)
		}
		head("zmqguard_loop_received_total", "counter", "Messages received.")
		fmt.Fprintf(w, "zmqguard_loop_received_total{loop=%q} %d\n", name, st.Received)
		head("zmqguard_loop_delivered_total", "counter", "Messages handed to the handler.")
		fmt.Fprintf(w, "zmqguard_loop_delivered_total{loop=%q} %d\n", name, st.Delivered)
		head("zmqguard_loop_handler_errors_total", "counter", "Handler errors and panics.")
		fmt.Fprintf(w, "zmqguard_loop_handler_errors_total{loop=%q} %d\n", name, st.HandlerErrors)
		head("zmqguard_loop_dropped_total", "counter", "Messages dropped, by reason.")
		for _, r := range decodeguard.Reasons() {
			fmt.Fprintf(w, "zmqguard_loop_dropped_total{loop=%q,reason=%q} %d\n", name, r, st.Dropped[r])
		}
		last := 0.0
		if !st.LastDrop.IsZero() {
			last = float64(st.LastDrop.UnixNano()) / 1e9
		}
		head("zmqguard_loop_last_drop_timestamp_seconds", "gauge", "Time of the latest drop (0: none).")
		fmt.Fprintf(w, "zmqguard_loop_last_drop_timestamp_seconds{loop=%q} %g\n", name, last)
		head("zmqguard_loop_peer_dropped_total", "counter", "Messages dropped, by peer host.")
		peers.mu.Lock()
		defer peers.mu.Unlock()
		for host, n := range peers.n {
			fmt.Fprintf(w, "zmqguard_loop_peer_dropped_total{loop=%q,peer=%q} %d\n", name, host, n)
		}
	}
}

// demo pushes valid (nil, 7), a bare int, invalid UTF-8, an array32 length
// bomb and valid (2, 7) to ep once a second.
func demo(ctx context.Context, ep string) {
	push, err := socket.NewPush(socket.DefaultOptions())
	if err != nil || push.Dial(ep) != nil {
		log.Fatal("demo: cannot dial ", ep)
	}
	defer push.Close()
	frames := [][]byte{{0x92, 0xc0, 0x07}, {0x45}, {0xa2, 0xff, 0xfe}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0x92, 0x02, 0x07}}
	for ctx.Err() == nil {
		for _, f := range frames {
			_ = push.Send(ctx, f)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func main() {
	bind := flag.String("bind", "tcp://127.0.0.1:5557", "PULL endpoint to bind")
	addr := flag.String("http", "127.0.0.1:9100", "address of the /metrics endpoint")
	withDemo := flag.Bool("demo", false, "also push sample valid and hostile messages to -bind")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pull, err := socket.NewPull(socket.DefaultOptions())
	if err == nil {
		defer pull.Close()
		err = pull.Bind(*bind)
	}
	if err != nil {
		log.Fatal(err)
	}
	peers := &peerDrops{n: map[string]uint64{}}
	l, err := loop.New(pull, loop.Config[any]{
		Name: "front", Logger: slog.Default(), OnDrop: peers.observe,
		Decode:  loop.UntypedDecoder(decodeguard.Limits{}),
		Handler: func(context.Context, loop.Delivery[any]) error { return nil },
		Validate: func(v *any) error {
			if a, ok := (*v).([]any); !ok || len(a) != 2 {
				return errors.New("want a 2-element array")
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: metrics(l, peers), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	if *withDemo {
		go demo(ctx, pull.Endpoint())
	}
	log.Printf("PULL on %s, metrics on http://%s/metrics", pull.Endpoint(), *addr)
	err = l.Run(ctx)
	_ = srv.Shutdown(context.Background())
	if err != nil {
		log.Fatal(err)
	}
}
