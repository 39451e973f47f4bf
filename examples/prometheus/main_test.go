package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/socket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape GETs /metrics and parses it with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// value returns the sample of name whose labels are exactly labels.
func value(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
	for _, m := range mf.Metric {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && got[k] == v
		}
		if !match {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

// TestScrapeAfterJunk runs the example, sends it the demo's valid and
// hostile frames and a raw HTTP probe, and checks the counts a Prometheus
// server would scrape.
func TestScrapeAfterJunk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type addrs struct{ ep, metrics string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{bind: "tcp://127.0.0.1:0", http: "127.0.0.1:0",
			ready: func(ep, m string) { ready <- addrs{ep, m} }}, io.Discard)
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	push, err := socket.New("PUSH", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Dial(a.ep); err != nil {
		t.Fatal(err)
	}
	for _, f := range demoFrames {
		if err := push.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	host := a.ep[len("tcp://"):]
	if c, err := net.DialTimeout("tcp", host, 5*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
		io.Copy(io.Discard, c) // until the guard closes it
		c.Close()
	}

	loopFront := map[string]string{"loop": "front"}
	var mfs map[string]*dto.MetricFamily
	for {
		mfs = scrape(t, a.metrics)
		r, _ := value(mfs, "zmqguard_loop_messages_received_total", loopFront)
		viol := 0.0
		for _, m := range mfs["zmqguard_socket_refused_total"].GetMetric() {
			viol += m.GetCounter().GetValue()
		}
		if r == float64(len(demoFrames)) && viol >= 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("not counted in time: received %v, violations %v", r, viol)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"zmqguard_loop_messages_delivered_total", loopFront, 2},
		{"zmqguard_loop_messages_dropped_total", map[string]string{"loop": "front", "reason": "validate"}, 1},
		{"zmqguard_loop_messages_dropped_total", map[string]string{"loop": "front", "reason": "decode"}, 2},
		{"zmqguard_loop_messages_dropped_total", map[string]string{"loop": "front", "reason": "oversize"}, 0},
		{"zmqguard_socket_messages_received_total", map[string]string{"socket": "front"}, 5},
		{"zmqguard_source_messages_received_total", map[string]string{"loop": "front-peers", "source": "127.0.0.1"}, 5},
		{"zmqguard_source_messages_dropped_total", map[string]string{"loop": "front-peers", "source": "127.0.0.1", "reason": "decode"}, 2},
		{"zmqguard_sources", map[string]string{"loop": "front-peers"}, 1},
		{"zmqguard_sources_folded", map[string]string{"loop": "front-peers"}, 0},
	} {
		got, ok := value(mfs, tc.name, tc.labels)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	if _, ok := mfs["go_goroutines"]; !ok {
		t.Error("no go_goroutines in the scrape")
	}
}
