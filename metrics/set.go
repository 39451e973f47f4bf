package metrics

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Source is one source of a source set at the time of a scrape: a
// publisher a subscriber follows, an engine an output receiver reads.
type Source struct {
	// Name identifies the source (an endpoint, an engine index); it becomes
	// the source label unless the set's label cap is reached.
	Name string
	// Received counts messages taken from the source.
	Received uint64
	// Dropped counts its dropped messages by reason.
	Dropped decodeguard.Counts
	// Connected reports whether the source is connected now.
	Connected bool
}

// OtherSource is the source label under which a source set reports the
// sources beyond its label cap, summed.
const OtherSource = "other"

// defaultMaxSources is the label cap of a source set given 0: at most this
// many sources have a source label of their own.
const defaultMaxSources = 100

// maxNameLen bounds component names (label values).
const maxNameLen = 128

// Sample is one value of one family at a scrape. Labels holds the label
// values in the order of Family.Labels.
type Sample struct {
	Family *Family
	Labels []string
	Value  float64
}

// Set is the list of components whose counters an adapter reports. Add
// components with the Add methods (each takes the component itself, whose
// Stats() is read at every scrape, never on the hot path), then hand the Set
// to an adapter (zgprom, zgotel). Names become label values: each must be
// non-empty, printable UTF-8, at most 128 bytes and unique among the
// components of its kind. A Set is safe for concurrent use.
type Set struct {
	mu          sync.Mutex
	loops       []namedLoop
	sockets     []namedSocket
	zmtp        []namedZMTP
	handshakes  []namedHandshake
	coordinator interface{ Stats() coordinator.Stats }
	coordPrefix string
	sourceSets  []*sourceSet
	kvindexes   []namedKVIndex
	names       map[string]bool // "kind\x00name" taken
}

type (
	namedLoop struct {
		name string
		s    interface{ Stats() loop.Stats }
	}
	namedSocket struct {
		name string
		s    interface{ Stats() socket.Stats }
	}
	namedZMTP struct {
		name string
		s    interface{ Stats() zmtpguard.Stats }
	}
	namedHandshake struct {
		name string
		s    interface {
			Stats() handshake.ListenerStats
		}
	}
)

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{names: map[string]bool{}} }

// checkName validates a component name.
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("metrics: %s name is empty", what)
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("metrics: %s name %q is %d bytes, over %d", what,
			ratelog.Escape(name, 32), len(name), maxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("metrics: %s name %q is not valid UTF-8", what, ratelog.Escape(name, 64))
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("metrics: %s name %q has a control character", what, ratelog.Escape(name, 64))
		}
	}
	return nil
}

// claim reserves names of the given kinds; it is called with s.mu held.
func (s *Set) claim(what string, kinds []string, name string) error {
	if err := checkName(what, name); err != nil {
		return err
	}
	for _, k := range kinds {
		if s.names[k+"\x00"+name] {
			return fmt.Errorf("metrics: a %s named %q is already in the set", k, name)
		}
	}
	for _, k := range kinds {
		s.names[k+"\x00"+name] = true
	}
	return nil
}

// isNil reports whether v is nil or holds a nil pointer, which would panic
// at scrape time rather than at Add.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// AddLoop adds a receive loop under the loop label name.
func (s *Set) AddLoop(name string, l interface{ Stats() loop.Stats }) error {
	if isNil(l) {
		return errors.New("metrics: AddLoop: nil loop")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("loop", []string{"loop"}, name); err != nil {
		return err
	}
	s.loops = append(s.loops, namedLoop{name, l})
	return nil
}

// AddSocket adds a socket under the socket label name.
func (s *Set) AddSocket(name string, sock interface{ Stats() socket.Stats }) error {
	if isNil(sock) {
		return errors.New("metrics: AddSocket: nil socket")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("socket", []string{"socket"}, name); err != nil {
		return err
	}
	s.sockets = append(s.sockets, namedSocket{name, sock})
	return nil
}

// AddZMTPListener adds a guarded listener (zmtpguard.Listener or Transport)
// under the socket label name of the zmqguard_zmtp_ families.
func (s *Set) AddZMTPListener(name string, l interface{ Stats() zmtpguard.Stats }) error {
	if isNil(l) {
		return errors.New("metrics: AddZMTPListener: nil listener")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("zmtp listener", []string{"zmtp"}, name); err != nil {
		return err
	}
	s.zmtp = append(s.zmtp, namedZMTP{name, l})
	return nil
}

// AddHandshakeListener adds a NIXL handshake listener: its ROUTER socket
// under socket=name, its receive loop under loop=name, and the
// zmqguard_handshake_ families under socket=name.
func (s *Set) AddHandshakeListener(name string, l interface {
	Stats() handshake.ListenerStats
}) error {
	if isNil(l) {
		return errors.New("metrics: AddHandshakeListener: nil listener")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("handshake listener", []string{"loop", "socket"}, name); err != nil {
		return err
	}
	s.handshakes = append(s.handshakes, namedHandshake{name, l})
	return nil
}

// AddCoordinator adds a DP coordinator: its three sockets and loops under
// the names prefix+"-front", prefix+"-back-output" and
// prefix+"-back-publish" (prefix "" means "coordinator"), and the
// zmqguard_coordinator_ families. A Set holds at most one coordinator.
func (s *Set) AddCoordinator(prefix string, c interface{ Stats() coordinator.Stats }) error {
	if isNil(c) {
		return errors.New("metrics: AddCoordinator: nil coordinator")
	}
	if prefix == "" {
		prefix = "coordinator"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.coordinator != nil {
		return errors.New("metrics: the set already has a coordinator")
	}
	for _, part := range coordParts {
		if err := s.claim("coordinator socket", []string{"loop", "socket"}, prefix+part); err != nil {
			return err
		}
	}
	s.coordinator, s.coordPrefix = c, prefix
	return nil
}

var coordParts = []string{"-front", "-back-output", "-back-publish"}

// AddSources adds a source set under loop=name: list is called at each
// scrape and returns the sources now. At most maxSources (zero means 100;
// negative is an error) have a source label of their own; the others are
// summed under source="other" (a source actually named "other" is too).
// A source keeps its own label while it is listed; when one leaves, the
// next unlabelled source takes its place. Counters under "other" can
// therefore go down when sources move; Prometheus treats that as a reset.
func (s *Set) AddSources(name string, maxSources int, list func() []Source) error {
	return s.addSources(name, maxSources, list, nil)
}

// addSources adds a source set; extra, if not nil, is called after each
// scrape's list to report the families of the component behind the set.
func (s *Set) addSources(name string, maxSources int, list func() []Source, extra func(emitter)) error {
	if list == nil {
		return errors.New("metrics: AddSources: nil list function")
	}
	if maxSources < 0 {
		return fmt.Errorf("metrics: AddSources: maxSources %d is negative", maxSources)
	}
	if maxSources == 0 {
		maxSources = defaultMaxSources
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.claim("source set", []string{"sources"}, name); err != nil {
		return err
	}
	s.sourceSets = append(s.sourceSets, &sourceSet{name: name, max: maxSources, list: list, extra: extra,
		labelled: map[string]bool{}})
	return nil
}

// sourceSet is one AddSources entry and its label assignment.
type sourceSet struct {
	name     string
	max      int
	list     func() []Source
	extra    func(emitter)
	labelled map[string]bool // sources with a label of their own
}

// emitter collects samples.
type emitter func(Sample)

func (e emitter) emit(f *Family, v float64, labels ...string) {
	e(Sample{Family: f, Labels: labels, Value: v})
}

func (e emitter) counts(f *Family, c *decodeguard.Counts, labels ...string) {
	for _, r := range decodeguard.Reasons() {
		e.emit(f, float64(c[r]), append(slices.Clip(labels), r.String())...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (e emitter) loop(name string, st loop.Stats) {
	e.emit(loopReceived, float64(st.Received), name)
	e.emit(loopDelivered, float64(st.Delivered), name)
	e.counts(loopDropped, &st.Dropped, name)
	e.emit(loopHandlerErrors, float64(st.HandlerErrors), name)
	last := 0.0
	if !st.LastDrop.IsZero() {
		last = float64(st.LastDrop.UnixNano()) / 1e9
	}
	e.emit(loopLastDrop, last, name)
}

func (e emitter) socket(name string, st socket.Stats) {
	e.emit(socketReceived, float64(st.Received), name)
	e.emit(socketSent, float64(st.Sent), name)
	e.emit(socketDroppedHWM, float64(st.DroppedHWM), name)
	e.emit(socketDroppedUnroutable, float64(st.DroppedUnroutable), name)
	e.emit(socketDroppedFiltered, float64(st.DroppedFiltered), name)
	e.counts(socketRefused, &st.Refused, name)
	e.emit(socketPeers, float64(st.Peers), name)
	e.emit(socketConnects, float64(st.Connects), name)
	e.emit(socketDisconnects, float64(st.Disconnects), name)
	e.emit(socketAcceptErrors, float64(st.AcceptErrors), name)
	e.emit(socketHeartbeatTimeouts, float64(st.HeartbeatTimeouts), name)
	e.emit(socketHandovers, float64(st.Handovers), name)
	e.emit(socketSendQueueBytes, float64(st.QueuedSendBytes), name)
	e.emit(socketSendQueueMessages, float64(st.QueuedSendMessages), name)
	e.emit(socketReceiveQueueBytes, float64(st.QueuedRecvBytes), name)
	e.emit(socketZMTP30Peers, float64(st.ZMTP30Peers), name)
	e.emit(socketDroppedFairShare, float64(st.DroppedFairShare), name)
	e.emit(socketSendEvictions, float64(st.SendEvictions), name)
	e.emit(socketBudgetBytes, float64(st.BudgetBytes), name)
	e.emit(socketBudgetStalls, float64(st.BudgetStalls), name)
	e.emit(socketBudgetEvictions, float64(st.BudgetEvictions), name)
	for i, v := range []uint64{st.EvictedIdle, st.EvictedOverShare, st.EvictedForReserve} {
		e.emit(socketConnsEvictedBy, float64(v), name, evictionReasons[i])
	}
}

func (e emitter) zmtp(name string, st zmtpguard.Stats) {
	e.emit(zmtpAccepted, float64(st.Accepted), name)
	e.emit(zmtpHandshakes, float64(st.Handshakes), name)
	e.emit(zmtpAcceptErrors, float64(st.AcceptErrors), name)
	e.counts(zmtpRefused, &st.Refused, name)
	e.emit(zmtpEvicted, float64(st.Evicted), name)
	e.emit(zmtpConnsEvicted, float64(st.ConnsEvicted), name)
	for i, v := range []uint64{st.EvictedIdle, st.EvictedOverShare, st.EvictedForReserve} {
		e.emit(zmtpConnsEvictedBy, float64(v), name, evictionReasons[i])
	}
	e.emit(zmtpOpen, float64(st.Open), name)
	e.emit(zmtpPending, float64(st.Pending), name)
}

func (e emitter) coordinator(prefix string, st coordinator.Stats) {
	e.emit(coordEngines, float64(st.Engines))
	e.emit(coordWave, float64(st.Wave))
	e.emit(coordRunning, b2f(st.Running))
	e.emit(coordStarted, b2f(st.Started))
	e.emit(coordStatsPublished, float64(st.StatsPublished))
	e.emit(coordWavePublished, float64(st.WavePublished))
	e.emit(coordReadySent, float64(st.ReadySent))
	e.emit(coordStartWaveSent, float64(st.StartWaveSent))
	e.emit(coordStatsApplied, float64(st.StatsApplied))
	e.emit(coordStaleStats, float64(st.StaleStats))
	e.emit(coordResizes, float64(st.Resizes))
	e.emit(coordBackUnsubscribed, float64(st.BackUnsubscribed))
	for i, ss := range []*coordinator.SocketStats{&st.Front, &st.BackOutput, &st.BackPublish} {
		name := prefix + coordParts[i]
		e.loop(name, ss.Loop)
		e.socket(name, ss.Socket)
		e.counts(coordStateDropped, &ss.StateDrops, name)
	}
}

// sources reports one source set; it is called with s.mu held (the label
// assignment is shared state).
func (e emitter) sources(ss *sourceSet) {
	list := ss.list()
	present := make(map[string]bool, len(list))
	for _, src := range list {
		present[src.Name] = true
	}
	for n := range ss.labelled {
		if !present[n] {
			delete(ss.labelled, n)
		}
	}
	var other Source
	folded, otherConnected := 0, 0
	seen := make(map[string]bool, len(list))
	for i := range list {
		src := &list[i]
		own := src.Name != OtherSource && !seen[src.Name] && checkName("source", src.Name) == nil
		if own && !ss.labelled[src.Name] {
			own = len(ss.labelled) < ss.max
			if own {
				ss.labelled[src.Name] = true
			}
		}
		if !own {
			folded++
			other.Received += src.Received
			other.Dropped.Add(&src.Dropped)
			if src.Connected {
				otherConnected++
			}
			continue
		}
		seen[src.Name] = true
		e.emit(sourceReceived, float64(src.Received), ss.name, src.Name)
		e.counts(sourceDropped, &src.Dropped, ss.name, src.Name)
		e.emit(sourceConnected, b2f(src.Connected), ss.name, src.Name)
	}
	if folded > 0 {
		e.emit(sourceReceived, float64(other.Received), ss.name, OtherSource)
		e.counts(sourceDropped, &other.Dropped, ss.name, OtherSource)
		e.emit(sourceConnected, float64(otherConnected), ss.name, OtherSource)
	}
	e.emit(sourceCount, float64(len(list)), ss.name)
	e.emit(sourcesFolded, float64(folded), ss.name)
	if ss.extra != nil {
		ss.extra(e)
	}
}

// Collect reads every component's Stats now and calls emit once per sample.
// Drop counters are reported for every reason (zeros included), so a
// dashboard's series exist from the first scrape. emit must not call back
// into the Set.
func (s *Set) Collect(emit func(Sample)) {
	e := emitter(emit)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.loops {
		e.loop(l.name, l.s.Stats())
	}
	for _, k := range s.sockets {
		e.socket(k.name, k.s.Stats())
	}
	for _, z := range s.zmtp {
		e.zmtp(z.name, z.s.Stats())
	}
	for _, h := range s.handshakes {
		st := h.s.Stats()
		e.loop(h.name, st.Loop)
		e.socket(h.name, st.Socket)
		e.emit(handshakeServed, float64(st.Served[handshake.V1]+st.Served[handshake.V2]+st.Served[handshake.V3]), h.name)
		e.emit(handshakeErrorReplies, float64(st.ErrorReplies), h.name)
	}
	if s.coordinator != nil {
		e.coordinator(s.coordPrefix, s.coordinator.Stats())
	}
	for _, ss := range s.sourceSets {
		e.sources(ss)
	}
	for _, k := range s.kvindexes {
		e.kvindex(k.name, k.x.Stats())
	}
}

// AddOutputs adds an engine output receiver as a source set under
// loop=name, one source per engine (named by its engine index; drops from
// connections that never sent a valid message under "unattributed"),
// capped at 100 labels, and the zmqguard_outputs_ families under
// loop=name.
func (s *Set) AddOutputs(name string, r interface{ Stats() outputs.Stats }) error {
	if isNil(r) {
		return errors.New("metrics: AddOutputs: nil receiver")
	}
	var st outputs.Stats // the latest scrape's snapshot; s.mu guards it
	return s.addSources(name, 0, func() []Source {
		st = r.Stats()
		src := make([]Source, 0, len(st.Engines)+1)
		for _, e := range st.Engines {
			src = append(src, Source{Name: strconv.FormatInt(e.Engine, 10), Received: e.Messages + e.Dropped.Total(),
				Dropped: e.Dropped, Connected: !e.Dead})
		}
		if st.Unattributed.Total() > 0 {
			src = append(src, Source{Name: "unattributed", Received: st.Unattributed.Total(), Dropped: st.Unattributed})
		}
		return src
	}, func(e emitter) {
		e.emit(outputsClaimsRefused, float64(st.ClaimsRefused), name)
		e.emit(outputsEngineDead, float64(st.EngineDead), name)
		e.emit(outputsUnattributedDead, float64(st.UnattributedDead), name)
		e.emit(outputsQueuedBytes, float64(st.QueuedBytes), name)
		e.emit(outputsHolds, float64(st.Holds), name)
		e.emit(outputsQueueWaits, float64(st.QueueWaits), name)
	})
}

// AddKVEvents adds a KV-event subscriber as a source set under loop=name,
// one source per followed publisher (received = batches delivered plus
// messages dropped; dropped = message and event drops by reason), and the
// zmqguard_kvevents_ families under loop=name, summed over its sources
// (resets by reason, continuity proven and unproven, unknown fields). At
// most maxSources (zero means 100) sources get a label of their own; the
// rest are summed under source="other".
func (s *Set) AddKVEvents(name string, maxSources int, sub interface{ Stats() kvevents.SourceStats }) error {
	if isNil(sub) {
		return errors.New("metrics: AddKVEvents: nil subscriber")
	}
	var st kvevents.SourceStats // the latest scrape's snapshot; s.mu guards it
	return s.addSources(name, maxSources, func() []Source {
		st = sub.Stats()
		src := make([]Source, 0, len(st.Sources))
		for _, k := range st.Sources {
			d := k.Dropped
			d.Add(&k.DroppedEvents)
			src = append(src, Source{Name: k.Name, Received: k.Batches + k.Dropped.Total(), Dropped: d, Connected: k.Connected})
		}
		return src
	}, func(e emitter) {
		r := &st.ResetsBy
		for i, v := range []uint64{r.SeqBack, r.Digest, r.Jump, r.Resync} {
			e.emit(kveventsResets, float64(v), name, kvResetReasons[i])
		}
		e.emit(kveventsProven, float64(st.ContinuityProven), name)
		e.emit(kveventsUnproven, float64(st.Unproven), name)
		e.emit(kveventsUnknownFields, float64(st.UnknownFields), name)
		e.emit(kveventsDeparted, float64(st.Departed), name)
		f := &st.FanIn
		e.emit(kveventsFanInConns, float64(f.Conns), name)
		e.emit(kveventsFanInTopics, float64(f.Topics), name)
		rb := &f.RefusedBy
		for i, v := range []uint64{rb.TopicHeld, rb.Address, rb.BadTopic, rb.TopicLimit, rb.ConnTopicLimit, rb.ConnGone} {
			e.emit(kveventsFanInRefused, float64(v), name, fanInReasons[i])
		}
	})
}
