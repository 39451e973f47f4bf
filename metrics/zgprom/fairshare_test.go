package zgprom_test

import (
	"testing"

	"github.com/zmqguard/zmqguard/metrics/zgprom"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

type stubSocket socket.Stats

func (s *stubSocket) Stats() socket.Stats { return socket.Stats(*s) }

type stubZMTP zmtpguard.Stats

func (s *stubZMTP) Stats() zmtpguard.Stats { return zmtpguard.Stats(*s) }

type stubOutputs outputs.Stats

func (s *stubOutputs) Stats() outputs.Stats { return outputs.Stats(*s) }

// TestCollectorFairShareFamilies reads the fair-share, budget, eviction
// and queue counters through a Prometheus registry: each Stats field has a
// family and its value arrives unchanged.
func TestCollectorFairShareFamilies(t *testing.T) {
	c := zgprom.NewCollector(nil)
	for _, err := range []error{
		c.AddSocket("s", &stubSocket{ZMTP30Peers: 2, DroppedFairShare: 3, SendEvictions: 4, BudgetBytes: 5,
			BudgetStalls: 6, BudgetEvictions: 7}),
		c.AddZMTPListener("z", &stubZMTP{ConnsEvicted: 8}),
		c.AddOutputs("o", &stubOutputs{ClaimsRefused: 9, EngineDead: 10, UnattributedDead: 11, QueuedBytes: 12,
			Holds: 13, QueueWaits: 14}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	mfs := gather(t, c)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"zmqguard_socket_zmtp30_peers", []string{"socket", "s"}, 2},
		{"zmqguard_socket_fair_share_dropped_messages_total", []string{"socket", "s"}, 3},
		{"zmqguard_socket_send_evictions_total", []string{"socket", "s"}, 4},
		{"zmqguard_socket_budget_bytes", []string{"socket", "s"}, 5},
		{"zmqguard_socket_budget_stalls_total", []string{"socket", "s"}, 6},
		{"zmqguard_socket_budget_evictions_total", []string{"socket", "s"}, 7},
		{"zmqguard_zmtp_evicted_connections_total", []string{"socket", "z"}, 8},
		{"zmqguard_outputs_claims_refused_total", []string{"loop", "o"}, 9},
		{"zmqguard_outputs_engine_dead_total", []string{"loop", "o"}, 10},
		{"zmqguard_outputs_unattributed_dead_total", []string{"loop", "o"}, 11},
		{"zmqguard_outputs_queued_bytes", []string{"loop", "o"}, 12},
		{"zmqguard_outputs_holds_total", []string{"loop", "o"}, 13},
		{"zmqguard_outputs_queue_waits_total", []string{"loop", "o"}, 14},
	} {
		if got := value(t, mfs, tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
}
