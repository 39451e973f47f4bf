package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeLoop loop.Stats

func (f *fakeLoop) Stats() loop.Stats { return loop.Stats(*f) }

type fakeSocket socket.Stats

func (f *fakeSocket) Stats() socket.Stats { return socket.Stats(*f) }

type fakeZMTP zmtpguard.Stats

func (f *fakeZMTP) Stats() zmtpguard.Stats { return zmtpguard.Stats(*f) }

type fakeHandshake handshake.ListenerStats

func (f *fakeHandshake) Stats() handshake.ListenerStats { return handshake.ListenerStats(*f) }

type fakeCoord coordinator.Stats

func (f *fakeCoord) Stats() coordinator.Stats { return coordinator.Stats(*f) }

// scrape collects s into "name{v1,v2}" -> value.
func scrape(t *testing.T, s *Set) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	s.Collect(func(smp Sample) {
		if len(smp.Labels) != len(smp.Family.Labels) {
			t.Fatalf("%s: %d label values for labels %v", smp.Family.Name, len(smp.Labels), smp.Family.Labels)
		}
		key := smp.Family.Name + "{" + strings.Join(smp.Labels, ",") + "}"
		if _, dup := out[key]; dup {
			t.Fatalf("duplicate sample %s", key)
		}
		out[key] = smp.Value
	})
	return out
}

func want(t *testing.T, got map[string]float64, key string, v float64) {
	t.Helper()
	g, ok := got[key]
	if !ok {
		t.Errorf("no sample %s", key)
		return
	}
	if g != v {
		t.Errorf("%s = %v, want %v", key, g, v)
	}
}

func TestCollectMapsEveryField(t *testing.T) {
	s := NewSet()
	var drops decodeguard.Counts
	drops[decodeguard.ReasonDecode] = 3
	drops[decodeguard.ReasonOversize] = 1
	last := time.Unix(1700000000, 500000000)
	l := &fakeLoop{Received: 10, Delivered: 6, Dropped: drops, HandlerErrors: 2, LastDrop: last}
	var viol decodeguard.Counts
	viol[decodeguard.ReasonHandshake] = 7
	sk := &fakeSocket{Received: 11, Sent: 12, DroppedHWM: 13, DroppedUnroutable: 14, DroppedFiltered: 15,
		Refused: viol, Peers: 4, Connects: 16, Disconnects: 17, AcceptErrors: 18,
		ZMTP30Peers: 3, DroppedFairShare: 60, SendEvictions: 61, BudgetBytes: 62, BudgetStalls: 63, BudgetEvictions: 64,
		ConnsEvicted: 65 + 66 + 67, EvictedIdle: 65, EvictedOverShare: 66, EvictedForReserve: 67}
	z := &fakeZMTP{Accepted: 20, Handshakes: 21, AcceptErrors: 22, Refused: viol, Evicted: 23, Open: 24, Pending: 25,
		ConnsEvicted: 26, EvictedIdle: 27, EvictedOverShare: 28, EvictedForReserve: 29}
	kv := &fakeKV{}
	kv.st.ResetsBy.SeqBack, kv.st.ResetsBy.Digest, kv.st.ResetsBy.Jump, kv.st.ResetsBy.Resync = 80, 81, 82, 83
	kv.st.ContinuityProven, kv.st.Unproven, kv.st.UnknownFields = 84, 85, 86
	kv.st.Departed, kv.st.FanIn.Conns, kv.st.FanIn.Topics = 90, 91, 92
	rb := &kv.st.FanIn.RefusedBy
	rb.TopicHeld, rb.Address, rb.BadTopic, rb.TopicLimit, rb.ConnTopicLimit, rb.ConnGone = 93, 94, 95, 96, 97, 98
	kv.st.Sources = []kvevents.SourceStats{{Name: "pod-0", Batches: 87}}
	o := &fakeOutputs{st: outputs.Stats{ClaimsRefused: 70, EngineDead: 71, UnattributedDead: 72, QueuedBytes: 73,
		Holds: 74, QueueWaits: 75, Engines: []outputs.EngineStats{{Engine: 0, Messages: 76}}}}
	h := &fakeHandshake{Served: [4]uint64{0, 1, 2, 3}, ErrorReplies: 5, Loop: loop.Stats(*l), Socket: socket.Stats(*sk)}
	c := &fakeCoord{Engines: 2, Wave: 9, Running: true, Started: true, StatsPublished: 30, WavePublished: 31,
		ReadySent: 32, StartWaveSent: 33, StatsApplied: 34, StaleStats: 35, Resizes: 36, BackUnsubscribed: 37}
	c.BackOutput.Loop = loop.Stats{Received: 40}
	c.BackOutput.Socket = socket.Stats{Peers: 2}
	c.Front.StateDrops[decodeguard.ReasonValidate] = 41
	for _, err := range []error{
		s.AddLoop("jobs", l), s.AddSocket("jobs", sk), s.AddZMTPListener("jobs", z),
		s.AddHandshakeListener("nixl", h), s.AddCoordinator("", c),
		s.AddSources("kv", 0, func() []Source {
			return []Source{{Name: "tcp://a", Received: 50, Dropped: drops, Connected: true}}
		}),
		s.AddKVIndex("kv", &fakeKVIndex{st: kvStats()}),
		s.AddOutputs("out", o),
		s.AddKVEvents("kve", 0, kv),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := scrape(t, s)
	want(t, got, "zmqguard_loop_messages_received_total{jobs}", 10)
	want(t, got, "zmqguard_loop_messages_delivered_total{jobs}", 6)
	want(t, got, "zmqguard_loop_messages_dropped_total{jobs,decode}", 3)
	want(t, got, "zmqguard_loop_messages_dropped_total{jobs,oversize}", 1)
	want(t, got, "zmqguard_loop_messages_dropped_total{jobs,policy}", 0)
	want(t, got, "zmqguard_loop_handler_errors_total{jobs}", 2)
	want(t, got, "zmqguard_loop_last_drop_timestamp_seconds{jobs}", 1700000000.5)
	want(t, got, "zmqguard_socket_messages_received_total{jobs}", 11)
	want(t, got, "zmqguard_socket_messages_sent_total{jobs}", 12)
	want(t, got, "zmqguard_socket_hwm_dropped_messages_total{jobs}", 13)
	want(t, got, "zmqguard_socket_unroutable_dropped_messages_total{jobs}", 14)
	want(t, got, "zmqguard_socket_filtered_dropped_messages_total{jobs}", 15)
	want(t, got, "zmqguard_socket_refused_total{jobs,handshake}", 7)
	want(t, got, "zmqguard_socket_peers{jobs}", 4)
	want(t, got, "zmqguard_socket_connects_total{jobs}", 16)
	want(t, got, "zmqguard_socket_disconnects_total{jobs}", 17)
	want(t, got, "zmqguard_socket_accept_errors_total{jobs}", 18)
	want(t, got, "zmqguard_zmtp_connections_accepted_total{jobs}", 20)
	want(t, got, "zmqguard_zmtp_handshakes_total{jobs}", 21)
	want(t, got, "zmqguard_zmtp_accept_errors_total{jobs}", 22)
	want(t, got, "zmqguard_zmtp_refused_total{jobs,handshake}", 7)
	want(t, got, "zmqguard_zmtp_evicted_handshakes_total{jobs}", 23)
	want(t, got, "zmqguard_zmtp_open_connections{jobs}", 24)
	want(t, got, "zmqguard_zmtp_pending_handshakes{jobs}", 25)
	want(t, got, "zmqguard_zmtp_evicted_connections_total{jobs}", 26)
	want(t, got, "zmqguard_zmtp_connection_evictions_total{jobs,idle}", 27)
	want(t, got, "zmqguard_zmtp_connection_evictions_total{jobs,over_share}", 28)
	want(t, got, "zmqguard_zmtp_connection_evictions_total{jobs,reserve}", 29)
	want(t, got, "zmqguard_socket_connection_evictions_total{jobs,idle}", 65)
	want(t, got, "zmqguard_socket_connection_evictions_total{jobs,over_share}", 66)
	want(t, got, "zmqguard_socket_connection_evictions_total{jobs,reserve}", 67)
	want(t, got, "zmqguard_kvevents_resets_total{kve,seq_back}", 80)
	want(t, got, "zmqguard_kvevents_resets_total{kve,digest}", 81)
	want(t, got, "zmqguard_kvevents_resets_total{kve,jump}", 82)
	want(t, got, "zmqguard_kvevents_resets_total{kve,resync}", 83)
	want(t, got, "zmqguard_kvevents_continuity_proven_total{kve}", 84)
	want(t, got, "zmqguard_kvevents_continuity_unproven_total{kve}", 85)
	want(t, got, "zmqguard_kvevents_unknown_fields_total{kve}", 86)
	want(t, got, "zmqguard_kvevents_departed_total{kve}", 90)
	want(t, got, "zmqguard_kvevents_fan_in_connections{kve}", 91)
	want(t, got, "zmqguard_kvevents_fan_in_topics{kve}", 92)
	for i, r := range []string{"topic_held", "address", "bad_topic", "topic_limit", "conn_topic_limit", "conn_gone"} {
		want(t, got, "zmqguard_kvevents_fan_in_refused_total{kve,"+r+"}", float64(93+i))
	}
	want(t, got, "zmqguard_source_messages_received_total{kve,pod-0}", 87)
	want(t, got, "zmqguard_socket_zmtp30_peers{jobs}", 3)
	want(t, got, "zmqguard_socket_fair_share_dropped_messages_total{jobs}", 60)
	want(t, got, "zmqguard_socket_send_evictions_total{jobs}", 61)
	want(t, got, "zmqguard_socket_budget_bytes{jobs}", 62)
	want(t, got, "zmqguard_socket_budget_stalls_total{jobs}", 63)
	want(t, got, "zmqguard_socket_budget_evictions_total{jobs}", 64)
	want(t, got, "zmqguard_outputs_claims_refused_total{out}", 70)
	want(t, got, "zmqguard_outputs_engine_dead_total{out}", 71)
	want(t, got, "zmqguard_outputs_unattributed_dead_total{out}", 72)
	want(t, got, "zmqguard_outputs_queued_bytes{out}", 73)
	want(t, got, "zmqguard_outputs_holds_total{out}", 74)
	want(t, got, "zmqguard_outputs_queue_waits_total{out}", 75)
	want(t, got, "zmqguard_source_messages_received_total{out,0}", 76)
	want(t, got, "zmqguard_handshake_requests_served_total{nixl}", 6)
	want(t, got, "zmqguard_handshake_error_replies_total{nixl}", 5)
	want(t, got, "zmqguard_loop_messages_dropped_total{nixl,decode}", 3)
	want(t, got, "zmqguard_socket_peers{nixl}", 4)
	want(t, got, "zmqguard_coordinator_engines{}", 2)
	want(t, got, "zmqguard_coordinator_wave{}", 9)
	want(t, got, "zmqguard_coordinator_running{}", 1)
	want(t, got, "zmqguard_coordinator_started{}", 1)
	want(t, got, "zmqguard_coordinator_stats_published_total{}", 30)
	want(t, got, "zmqguard_coordinator_wave_published_total{}", 31)
	want(t, got, "zmqguard_coordinator_ready_sent_total{}", 32)
	want(t, got, "zmqguard_coordinator_start_wave_sent_total{}", 33)
	want(t, got, "zmqguard_coordinator_stats_applied_total{}", 34)
	want(t, got, "zmqguard_coordinator_stale_stats_total{}", 35)
	want(t, got, "zmqguard_coordinator_resizes_total{}", 36)
	want(t, got, "zmqguard_coordinator_back_unsubscribed_total{}", 37)
	want(t, got, "zmqguard_loop_messages_received_total{coordinator-back-output}", 40)
	want(t, got, "zmqguard_socket_peers{coordinator-back-output}", 2)
	want(t, got, "zmqguard_coordinator_state_dropped_messages_total{coordinator-front,validate}", 41)
	want(t, got, "zmqguard_source_messages_received_total{kv,tcp://a}", 50)
	want(t, got, "zmqguard_source_messages_dropped_total{kv,tcp://a,decode}", 3)
	want(t, got, "zmqguard_source_connected{kv,tcp://a}", 1)
	want(t, got, "zmqguard_sources{kv}", 1)
	want(t, got, "zmqguard_sources_folded{kv}", 0)

	// Every family has at least one sample with these components, so a
	// family added without a Collect path fails here.
	seen := map[string]bool{}
	for k := range got {
		seen[k[:strings.IndexByte(k, '{')]] = true
	}
	for _, f := range Families() {
		if !seen[f.Name] {
			t.Errorf("family %s has no sample", f.Name)
		}
	}
}

func TestSourceCap(t *testing.T) {
	s := NewSet()
	var list []Source
	var one decodeguard.Counts
	one[decodeguard.ReasonDecode] = 1
	for i := range 1000 {
		list = append(list, Source{Name: fmt.Sprintf("tcp://10.0.%d.%d:5557", i/256, i%256), Received: 2,
			Dropped: one, Connected: i%2 == 0})
	}
	if err := s.AddSources("kv", 10, func() []Source { return list }); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, s)
	named := 0
	for k := range got {
		if strings.HasPrefix(k, "zmqguard_source_messages_received_total{") {
			named++
		}
	}
	if named != 11 { // 10 own labels + other
		t.Fatalf("%d source series, want 11 (cap 10 + other)", named)
	}
	want(t, got, "zmqguard_source_messages_received_total{kv,other}", 990*2)
	want(t, got, "zmqguard_source_messages_dropped_total{kv,other,decode}", 990)
	want(t, got, "zmqguard_source_connected{kv,other}", 495)
	want(t, got, "zmqguard_sources{kv}", 1000)
	want(t, got, "zmqguard_sources_folded{kv}", 990)
	want(t, got, "zmqguard_source_messages_received_total{kv,"+list[0].Name+"}", 2)

	// A labelled source keeps its label across scrapes; when it leaves, the
	// first unlabelled source takes its slot.
	list = append(list[:0:0], list[1:]...)
	got = scrape(t, s)
	want(t, got, "zmqguard_source_messages_received_total{kv,"+list[0].Name+"}", 2)
	want(t, got, "zmqguard_source_messages_received_total{kv,"+list[9].Name+"}", 2) // took the freed slot
	if _, ok := got["zmqguard_source_messages_received_total{kv,"+list[10].Name+"}"]; ok {
		t.Errorf("source %s got a label beyond the cap", list[10].Name)
	}
	want(t, got, "zmqguard_sources_folded{kv}", 989)

	// A source named "other", a duplicate and a name with a control
	// character are folded, never given a label of their own.
	list = []Source{{Name: OtherSource, Received: 1}, {Name: "a", Received: 1}, {Name: "a", Received: 1}, {Name: "b\n", Received: 1}}
	got = scrape(t, s)
	want(t, got, "zmqguard_source_messages_received_total{kv,other}", 3)
	want(t, got, "zmqguard_source_messages_received_total{kv,a}", 1)
	want(t, got, "zmqguard_sources_folded{kv}", 3)
}

func TestAddRefusesBadNames(t *testing.T) {
	s := NewSet()
	l := &fakeLoop{}
	if err := s.AddLoop("a", l); err != nil {
		t.Fatal(err)
	}
	var nilLoop *fakeLoop
	for _, tc := range []struct {
		err  error
		want string
	}{
		{s.AddLoop("", l), "empty"},
		{s.AddLoop("a", l), `loop named "a" is already`},
		{s.AddHandshakeListener("a", &fakeHandshake{}), `loop named "a" is already`},
		{s.AddLoop("x\x1b[31m", l), "control character"},
		{s.AddLoop("\xff", l), "not valid UTF-8"},
		{s.AddLoop(strings.Repeat("n", 129), l), "129 bytes"},
		{s.AddLoop("b", nilLoop), "nil loop"},
		{s.AddLoop("b", nil), "nil loop"},
		{s.AddSources("k", -1, func() []Source { return nil }), "negative"},
		{s.AddSources("k", 1, nil), "nil list"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", tc.err, tc.want)
		}
	}
	if err := s.AddCoordinator("c", &fakeCoord{}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddCoordinator("d", &fakeCoord{}); err == nil {
		t.Error("a second coordinator was accepted")
	}
	// A failed Add leaves no half-claimed names behind.
	if err := s.AddLoop("b", l); err != nil {
		t.Errorf("AddLoop(b) after a refused nil loop: %v", err)
	}
}

func TestOTelNames(t *testing.T) {
	for f, w := range map[*Family]string{
		loopDropped:  "zmqguard.loop.messages_dropped",
		loopLastDrop: "zmqguard.loop.last_drop_timestamp",
		socketPeers:  "zmqguard.socket.peers",
		coordWave:    "zmqguard.coordinator.wave",
		{Name: "zmqguard_socket_send_queue_bytes", Unit: "By", Kind: Gauge}: "zmqguard.socket.send_queue",
	} {
		if g := f.OTelName(); g != w {
			t.Errorf("%s.OTelName() = %q, want %q", f.Name, g, w)
		}
	}
	names := map[string]bool{}
	for _, f := range Families() {
		for _, n := range []string{f.Name, "otel:" + f.OTelName()} {
			if names[n] {
				t.Errorf("name %s used twice", n)
			}
			names[n] = true
		}
		if !strings.HasPrefix(f.Name, "zmqguard_") || (f.Kind == Counter) != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s: prefix or _total suffix wrong for a %s", f.Name, f.Kind)
		}
	}
}

type fakeOutputs struct{ st outputs.Stats }

func (f *fakeOutputs) Stats() outputs.Stats { return f.st }

func TestAddOutputsOneSourcePerEngine(t *testing.T) {
	f := &fakeOutputs{}
	f.st.Engines = []outputs.EngineStats{{Engine: 0, Messages: 5}, {Engine: 3, Messages: 1, Dead: true}}
	f.st.Engines[1].Dropped[decodeguard.ReasonDecode] = 2
	f.st.Unattributed[decodeguard.ReasonEnvelope] = 4
	s := NewSet()
	if err := s.AddOutputs("outputs", f); err != nil {
		t.Fatal(err)
	}
	if err := s.AddOutputs("x", nil); err == nil {
		t.Fatal("nil receiver accepted")
	}
	got := map[string]float64{}
	s.Collect(func(smp Sample) {
		got[smp.Family.Name+"|"+strings.Join(smp.Labels, ",")] = smp.Value
	})
	found := 0
	for k, v := range got {
		if (strings.Contains(k, "|outputs,3,decode") && v == 2) || (strings.Contains(k, "|outputs,unattributed,envelope") && v == 4) {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("want engine 3's decode drops and the unattributed envelope drops; got %v", got)
	}
}

type fakeKV struct{ st kvevents.SourceStats }

func (f *fakeKV) Stats() kvevents.SourceStats { return f.st }

func TestAddKVEventsCapsSources(t *testing.T) {
	f := &fakeKV{}
	for i := range 5 {
		k := kvevents.SourceStats{Name: fmt.Sprintf("pod-%d", i), Batches: 10, Connected: true}
		k.Dropped[decodeguard.ReasonDecode] = 1
		k.DroppedEvents[decodeguard.ReasonValidate] = 2
		f.st.Sources = append(f.st.Sources, k)
	}
	s := NewSet()
	if err := s.AddKVEvents("kv", 2, f); err != nil {
		t.Fatal(err)
	}
	if err := s.AddKVEvents("kv2", 0, nil); err == nil {
		t.Fatal("nil subscriber accepted")
	}
	labels := map[string]bool{}
	var validate float64
	s.Collect(func(smp Sample) {
		for i, l := range smp.Family.Labels {
			if l == labelSource {
				labels[smp.Labels[i]] = true
			}
		}
		if strings.Contains(strings.Join(smp.Labels, ","), "validate") {
			validate += smp.Value
		}
	})
	if len(labels) != 3 || !labels[OtherSource] {
		t.Fatalf("source labels %v: want 2 of their own and %q", labels, OtherSource)
	}
	if validate != 10 {
		t.Fatalf("event drops by reason validate = %v, want 10 (2 per source, 5 sources)", validate)
	}
}
