package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

// scrapeMetrics GETs /metrics at addr and parses the exposition with the
// Prometheus text parser.
func scrapeMetrics(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d: %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	return mfs
}

// sample returns the value of name's sample whose labels include the
// name=value pairs in labels, and whether there is one.
func sample(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

func TestMetricsOptionsCheck(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:0", "[::1]:9100", "localhost:9100"} {
		if err := (&metricsOptions{addr: ok}).check(); err != nil {
			t.Errorf("--metrics-addr %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{":9100", "0.0.0.0:0", "[::]:0", "192.0.2.1:9100", "example.com:80"} {
		err := (&metricsOptions{addr: bad}).check()
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--metrics-allow-remote") {
			t.Errorf("--metrics-addr %q: %v, want a usage error naming --metrics-allow-remote", bad, err)
		}
		if err := (&metricsOptions{addr: bad, allowRemote: true}).check(); err != nil {
			t.Errorf("--metrics-addr %q --metrics-allow-remote refused: %v", bad, err)
		}
	}
	for _, malformed := range []string{"127.0.0.1", "127.0.0.1:nope", "127.0.0.1:99999"} {
		var ue *usageError
		if err := (&metricsOptions{addr: malformed, allowRemote: true}).check(); !errors.As(err, &ue) {
			t.Errorf("--metrics-addr %q: %v, want a usage error", malformed, err)
		}
	}
}

// TestMetricsServer runs the endpoint in this process: /metrics serves the
// components' families and the Go runtime's, nothing else is served, and
// Close ends its goroutines and stops listening.
func TestMetricsServer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s, err := socket.New("PULL", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := startMetrics(&metricsOptions{addr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler),
		func(c *zgprom.Collector) error { return c.AddSocket("sink", s) })
	if err != nil {
		t.Fatal(err)
	}
	addr := ms.Addr()
	mfs := scrapeMetrics(t, addr)
	if v, ok := sample(mfs, "zmqguard_socket_peers", "socket", "sink"); !ok || v != 0 {
		t.Errorf("zmqguard_socket_peers{socket=sink} = %v, %v", v, ok)
	}
	if _, ok := mfs["go_goroutines"]; !ok {
		t.Error("no go_goroutines: the Go collector is not registered")
	}
	if code, _ := httpGet(t, "http://"+addr+"/"); code != http.StatusNotFound {
		t.Errorf("GET /: status %d, want 404", code)
	}
	ms.Close()
	ms.Close()
	if !refused(addr) {
		t.Errorf("%s still accepts connections after Close", addr)
	}
	var off *metricsServer
	off.Close()
	if off.Addr() != "" || off.logAttrs() != nil || off.addLoop("x", nil) != nil {
		t.Error("a nil metrics server is not inert")
	}
	if _, err := startMetrics(&metricsOptions{addr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler),
		func(c *zgprom.Collector) error { return c.AddSocket("", s) }); err == nil {
		t.Error("a collector error did not fail startMetrics")
	}
}

// TestListenerMetrics runs handshake-listener with --metrics-addr, sends it
// a valid request and junk, and reads the counts from a scrape: the same
// numbers as the exit line.
func TestListenerMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "m",
		"--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	ep := p.logField("handshake listener serving", "endpoint", 20*time.Second)
	addr := p.logField("handshake listener serving", "metrics_addr", time.Second)
	if own := p.logField("metrics endpoint serving", "metrics_addr", time.Second); own != addr {
		t.Fatalf("metrics_addr %q in the start line, %q in its own line", addr, own)
	}
	opts := handshake.ClientOptions{ExpectedHash: demoHash(), ExpectedEngineID: "m", Socket: quietSocket()}
	if _, err := handshake.Fetch(ctx, ep, handshake.Request{Variant: handshake.V3}, opts); err != nil {
		t.Fatalf("Fetch: %v\nstderr:\n%s", err, p.stderr)
	}
	// Junk: two well-enveloped DEALER requests whose payload is 0xc1, a
	// byte msgpack never uses (decode).
	d, err := socket.New("DEALER", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Dial(ep); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Send(ctx, []byte{}, []byte{0xc1}); err != nil {
			t.Fatal(err)
		}
	}
	var mfs map[string]*dto.MetricFamily
	for {
		mfs = scrapeMetrics(t, addr)
		if v, _ := sample(mfs, "zmqguard_loop_messages_dropped_total", "loop", "handshake", "reason", "decode"); v >= 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("2 decode drops not scraped in time\nstderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, _ := sample(mfs, "zmqguard_handshake_requests_served_total", "socket", "handshake"); v != 1 {
		t.Errorf("served = %v, want 1", v)
	}
	if v, _ := sample(mfs, "zmqguard_loop_messages_received_total", "loop", "handshake"); v != 3 {
		t.Errorf("received = %v, want 3", v)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("listener exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	r := p.jsonLine()
	if num(r, "served.V3") != 1 || num(r, "drops.decode") != 2 {
		t.Errorf("exit line disagrees with the scrape: %s", p.stdout)
	}
	checkExitGoroutines(t, r, p.stdout.String())
	if !refused(addr) {
		t.Errorf("metrics endpoint %s still accepts connections after the exit", addr)
	}
}

// TestCoordinatorMetrics runs coordinator with --metrics-addr: a bare int on
// the back output is scraped as a decode drop of its loop, beside the
// coordinator's own gauges.
func TestCoordinatorMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p := start(t, ctx, "coordinator", "--engines", "2", "--log-format", "json",
		"--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0",
		"--metrics-addr", "127.0.0.1:0")
	backOut := p.logField("coordinator running", "back_output", 20*time.Second)
	addr := p.logField("coordinator running", "metrics_addr", time.Second)
	junk, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if err := junk.Dial(backOut); err != nil {
		t.Fatal(err)
	}
	if err := junk.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	for {
		mfs := scrapeMetrics(t, addr)
		v, _ := sample(mfs, "zmqguard_loop_messages_dropped_total", "loop", "coordinator-back-output", "reason", "decode")
		if v == 1 {
			if e, ok := sample(mfs, "zmqguard_coordinator_engines"); !ok || e != 2 {
				t.Errorf("zmqguard_coordinator_engines = %v, %v; want 2", e, ok)
			}
			if _, ok := sample(mfs, "zmqguard_socket_peers", "socket", "coordinator-back-output"); !ok {
				t.Error("no zmqguard_socket_peers for the back output")
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the decode drop was not scraped in time (last %v)\nstderr:\n%s", v, p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("coordinator exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	if m := p.jsonLine(); num(m, "back_output.drops.decode") != 1 {
		t.Errorf("exit line: %s", p.stdout)
	}
}

// TestMetricsAddrUsage: a non-loopback --metrics-addr is a usage error (exit
// 2) on every command that has the flag.
func TestMetricsAddrUsage(t *testing.T) {
	for _, args := range [][]string{
		{"coordinator", "--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0", "--engines", "1"},
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "x"},
		{"sink", "--bind", "tcp://127.0.0.1:0"},
		{"demo"},
	} {
		code, _, stderr := runBin(t, 20*time.Second, append(args, "--metrics-addr", "0.0.0.0:0")...)
		if code != 2 || !strings.Contains(stderr, "--metrics-allow-remote") {
			t.Errorf("%s --metrics-addr 0.0.0.0:0: exit %d, stderr %q", args[0], code, stderr)
		}
	}
}

// FuzzMetricsOptionsCheck: a --metrics-addr value never panics the check;
// one accepted without --metrics-allow-remote is host:port with a loopback
// host, and is accepted with it too.
func FuzzMetricsOptionsCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9100", "[::1]:0", "localhost:http", ":9100", "0.0.0.0:1", "127.0.0.1", "\x1b[31m:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		checkLoopbackProperty(t, addr, "--metrics-allow-remote", func(remote bool) error {
			return (&metricsOptions{addr: addr, allowRemote: remote}).check()
		})
	})
}

// TestSinkMetrics runs sink with --metrics-addr: messages pushed to it are
// scraped as received by socket "sink" and delivered by loop "sink", and
// agree with the exit line.
func TestSinkMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p := start(t, ctx, "sink", "--bind", "tcp://127.0.0.1:0", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	ep := p.logField("sink receiving", "endpoint", 20*time.Second)
	addr := p.logField("sink receiving", "metrics_addr", time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Dial(ep); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := push.Send(ctx, []byte("any bytes are valid with --decode none")); err != nil {
			t.Fatal(err)
		}
	}
	for {
		mfs := scrapeMetrics(t, addr)
		if v, _ := sample(mfs, "zmqguard_loop_messages_delivered_total", "loop", "sink"); v == 3 {
			if r, _ := sample(mfs, "zmqguard_socket_messages_received_total", "socket", "sink"); r != 3 {
				t.Errorf("socket received %v, want 3", r)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("3 deliveries not scraped in time\nstderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("sink exit %d\n%s", code, p.stderr)
	}
	if r := p.jsonLine(); num(r, "messages") != 3 {
		t.Errorf("sink report: %s", p.stdout)
	}
}

// TestDemoMetrics runs demo with --metrics-addr: while the scanner attacks,
// a scrape shows handshakes served and connections refused, and the demo
// still ends with exit 0.
func TestDemoMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p := start(t, ctx, "demo", "--duration", "5s", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	addr := p.logField("demo started", "metrics_addr", 20*time.Second)
	for {
		mfs := scrapeMetrics(t, addr)
		served, _ := sample(mfs, "zmqguard_handshake_requests_served_total", "socket", "handshake")
		refusedConns := 0.0
		for _, m := range mfs["zmqguard_socket_refused_total"].GetMetric() {
			refusedConns += m.GetCounter().GetValue()
		}
		if served > 0 && refusedConns > 0 {
			if e, _ := sample(mfs, "zmqguard_coordinator_engines"); e != 2 {
				t.Errorf("zmqguard_coordinator_engines = %v, want 2", e)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no handshakes or refusals scraped (served %v, refused %v)\nstderr:\n%s", served, refusedConns, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := p.wait(40 * time.Second); code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	if !refused(addr) {
		t.Errorf("metrics endpoint %s still accepts connections after the demo", addr)
	}
}
