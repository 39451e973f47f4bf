package zgprom_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/socket"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a guarded PULL with a loop, after a fixed mix of valid and
// hostile input has been counted.
type fixture struct {
	c *zgprom.Collector
}

// junk is what the fixture's pusher sends: one valid 2-array, a bare int
// (validate), invalid UTF-8 (decode), an array32 length bomb (decode) and
// another valid 2-array.
var junk = [][]byte{{0x92, 0xc0, 0x07}, {0x45}, {0xa2, 0xff, 0xfe}, {0xdd, 0xff, 0xff, 0xff, 0xff}, {0x92, 0x02, 0x07}}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	pull, err := socket.New("PULL", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := pull.Bind("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	l, err := loop.New(pull, loop.Config[any]{
		Name:    "jobs",
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
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
		pull.Close()
	})

	push, err := socket.New("PUSH", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	if err := push.Dial(pull.Endpoint()); err != nil {
		t.Fatal(err)
	}
	for _, f := range junk {
		if err := push.Send(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	// A raw TCP peer that speaks HTTP: refused by the socket layer.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(pull.Endpoint(), "tcp://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	var b [64]byte
	conn.Read(b[:]) // until the guard closes it
	conn.Close()
	for l.Stats().Received < uint64(len(junk)) || violations(pull) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("fixture not counted within 20 s: loop %+v, socket %+v", l.Stats(), pull.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := zgprom.NewCollector(nil)
	if err := c.AddLoop("jobs", l); err != nil {
		t.Fatal(err)
	}
	if err := c.AddSocket("jobs", pull); err != nil {
		t.Fatal(err)
	}
	// A KV-cache index holding one block, for the zmqguard_kvindex_
	// families.
	x, err := kvindex.New(kvindex.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	if err := x.ApplyEvents("engine-0", []kvevents.Event{{Type: kvevents.BlockStored, BlockSize: 2, TokenIDs: []int64{1, 2},
		BlockHashes: []kvevents.Hash{kvevents.IntHash(7)}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.AddKVIndex("kv", x); err != nil {
		t.Fatal(err)
	}
	// The KV-event subscriber and guarded listener families (stubs: their
	// values do not matter to the linters, their exposition does).
	if err := c.AddKVEvents("kv", 0, kvEventsStub()); err != nil {
		t.Fatal(err)
	}
	if err := c.AddZMTPListener("jobs", &stubZMTP{ConnsEvicted: 1, EvictedIdle: 1}); err != nil {
		t.Fatal(err)
	}
	return &fixture{c: c}
}

func gather(t *testing.T, c prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry() // also checks Collect against Describe
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value returns the value of the sample of name whose labels include
// labels (name=value pairs).
func value(t *testing.T, mfs []*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for i := 0; i < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no sample %s%v", name, labels)
	return 0
}

func TestCollectorValuesAfterJunk(t *testing.T) {
	fx := newFixture(t)
	mfs := gather(t, fx.c)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"zmqguard_loop_messages_received_total", []string{"loop", "jobs"}, 5},
		{"zmqguard_loop_messages_delivered_total", []string{"loop", "jobs"}, 2},
		{"zmqguard_loop_messages_dropped_total", []string{"loop", "jobs", "reason", "validate"}, 1},
		{"zmqguard_loop_messages_dropped_total", []string{"loop", "jobs", "reason", "decode"}, 2},
		{"zmqguard_loop_messages_dropped_total", []string{"loop", "jobs", "reason", "policy"}, 0},
		{"zmqguard_socket_messages_received_total", []string{"socket", "jobs"}, 5},
	} {
		if got := value(t, mfs, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	viol := 0.0
	for _, r := range decodeguard.Reasons() {
		viol += value(t, mfs, "zmqguard_socket_refused_total", "socket", "jobs", "reason", r.String())
	}
	if viol < 1 {
		t.Errorf("socket violations = %v after an HTTP probe, want >= 1", viol)
	}
	if v := value(t, mfs, "zmqguard_loop_last_drop_timestamp_seconds", "loop", "jobs"); v < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last drop timestamp %v is not recent", v)
	}
}

func TestLint(t *testing.T) {
	fx := newFixture(t)
	problems, err := testutil.CollectAndLint(fx.c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("client_golang lint: %s: %s", p.Metric, p.Text)
	}
}

// TestPromtool runs the Prometheus project's own linter, `promtool check
// metrics` (Debian package prometheus), on the exposition of every family.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		missingpeer.Skip(t, "promtool not found ("+err.Error()+"); the client_golang lint still ran", "prometheus")
	}
	fx := newFixture(t)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range gather(t, fx.c) {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(buf.String(), "zmqguard_loop_messages_dropped_total{") ||
		!strings.Contains(buf.String(), "zmqguard_kvindex_entries{loop=\"kv\"} 1") ||
		!strings.Contains(buf.String(), "zmqguard_kvevents_resets_total{loop=\"kv\",reason=\"digest\"} 2") ||
		!strings.Contains(buf.String(), "zmqguard_zmtp_connection_evictions_total{reason=\"idle\",socket=\"jobs\"} 1") {
		t.Fatalf("exposition lacks the loop drops:\n%s", buf.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func violations(s *socket.Socket) uint64 {
	v := s.Stats().Refused
	return v.Total()
}
