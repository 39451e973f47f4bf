package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/socket"
)

// Fan-in (Source.FanIn, issue 36): one bound SUB that any number of engines
// connect to, as llm-d's chart deploys vLLM (every engine's PUB connects to
// the indexer's service and names itself in its topic, kv@<pod ip>@<model>).
// Each distinct topic is an engine: a source without a socket of its own
// (source.parent set), fed by the fan-in source's loop through the same
// onLive as a dialed source, so sequence tracking, resets, lost ranges,
// replay and the continuity proof after a new connection are the same
// code. A topic belongs to the connection that first published it while
// that connection lives; a topic whose host part is an IP address is
// accepted only from that address (Config.FanInAnyAddress turns that
// off).

// Reasons a fan-in source refuses a message (SourceStats.FanIn.RefusedBy).
const (
	refusedTopicHeld      = "topic_held"
	refusedAddress        = "address"
	refusedBadTopic       = "bad_topic"
	refusedTopicLimit     = "topic_limit"
	refusedConnTopicLimit = "conn_topic_limit"
	refusedConnGone       = "conn_gone"
)

// maxTopicLen bounds a fan-in topic (an engine's name): longer ones are
// refused as bad_topic.
const maxTopicLen = 256

// maxGoneConns bounds the connections a fan-in source remembers as closed:
// a message of one still queued when its close is seen is refused (the
// engine's next connection proves continuity), not taken for a new
// connection that would then hold its topic forever.
const maxGoneConns = 4096

// errRetired is returned by onLive for a fan-in engine retired while its
// message was on the way: the fan-in source routes the message again.
var errRetired = errors.New("kvevents: engine retired")

// fanIn is a fan-in source's demultiplexer.
type fanIn struct {
	parent *source
	mu     sync.Mutex
	conns  map[uint64]*fanConn
	gone   map[uint64]struct{}
	goneQ  []uint64
	topics map[string]*fanTopic
	// stopped is the engines' names once stopEngines ran (departRemoved).
	stopped []string
	// gates are the fan-in source's own (source.gates), set before it
	// starts and never changed: each engine waits for them.
	gates []chan struct{}
	// retiring holds, by topic, a retired engine's gate, closed once its
	// UpdateDeparted is done: a new engine of that topic waits for it.
	retiring map[string]chan struct{}
	st       fanStats
}

// fanConn is one open connection of a fan-in source.
type fanConn struct {
	addr   string     // remote address, escaped for logs and stats
	ip     netip.Addr // its IP (unmapped), invalid if unknown
	topics map[string]struct{}
}

// fanTopic is one followed topic: its engine and the connection holding it
// (0: none since that connection closed).
type fanTopic struct {
	eng   *source
	owner uint64
}

// fanStats are the counters of SourceStats.FanIn that are not gauges.
type fanStats struct {
	connections uint64
	departed    uint64
	refused     map[string]uint64
}

func newFanIn(parent *source) *fanIn {
	return &fanIn{parent: parent, conns: map[uint64]*fanConn{}, gone: map[uint64]struct{}{},
		topics: map[string]*fanTopic{}, retiring: map[string]chan struct{}{}, st: fanStats{refused: map[string]uint64{}}}
}

// parseTopic takes apart an llm-d topic, kv@{host}@{model}: host is a
// name or address (letters, digits, '.', '-', '_', ':'), model the rest
// (not empty, UTF-8, no control characters). ok is false for any other
// topic, which still names an engine, without address check or replay.
func parseTopic(topic string) (host, model string, ok bool) {
	rest, found := strings.CutPrefix(topic, "kv@")
	if !found {
		return "", "", false
	}
	host, model, found = strings.Cut(rest, "@")
	if !found || host == "" || model == "" || len(host) > 253 || !utf8.ValidString(model) {
		return "", "", false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':') {
			return "", "", false
		}
	}
	for _, r := range model {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return "", "", false
		}
	}
	return host, model, true
}

// replayFor derives an engine's replay endpoint from the fan-in source's
// template ("" when there is none or the topic has no host part).
func replayFor(template, host string, ok bool) string {
	if template == "" || !ok {
		return ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ReplaceAll(template, "{host}", host)
}

// peerIP is a connection's IP address, unmapped (invalid if unknown).
func peerIP(addr string) netip.Addr {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.Addr{}
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// addConn records an open connection (f.mu held).
func (f *fanIn) addConn(p *socket.Peer) *fanConn {
	c := &fanConn{addr: ratelog.Escape(p.String(), 128), ip: peerIP(p.String()), topics: map[string]struct{}{}}
	f.conns[p.ID()] = c
	f.st.connections++
	return c
}

// onEvent tracks the fan-in socket's connections.
func (f *fanIn) onEvent(e socket.Event) {
	if e.Peer == nil {
		return
	}
	id := e.Peer.ID()
	switch e.Kind {
	case socket.EventConnected:
		f.mu.Lock()
		if _, gone := f.gone[id]; !gone && f.conns[id] == nil {
			f.addConn(e.Peer)
		}
		f.mu.Unlock()
	case socket.EventDisconnected:
		f.mu.Lock()
		c := f.conns[id]
		delete(f.conns, id)
		f.gone[id] = struct{}{}
		f.goneQ = append(f.goneQ, id)
		if len(f.goneQ) > maxGoneConns {
			delete(f.gone, f.goneQ[0])
			f.goneQ = f.goneQ[1:]
		}
		var left []*source
		if c != nil {
			for name := range c.topics {
				if t := f.topics[name]; t != nil && t.owner == id {
					t.owner = 0
					// Under f.mu, so that a claim and a release are
					// stored in the order they happened.
					t.eng.peers.Store(0)
					left = append(left, t.eng)
				}
			}
		}
		f.mu.Unlock()
		for _, eng := range left {
			eng.count(func(st *SourceStats) {
				if eng.holderID == id {
					st.Holder.Addr, st.Holder.Since, st.Holder.Batches = "", time.Time{}, 0
					eng.holderID = 0
				}
			})
			eng.noteConn()
		}
	}
}

// refusal is a refused message, logged once f.mu is released (the Logger
// is the user's: never called under the component's lock).
type refusal struct {
	why, addr, topic string
	args             []any
}

// refuse counts a refused message (f.mu held) and returns what to log.
func (f *fanIn) refuse(why string, c *fanConn, topic []byte, args ...any) *refusal {
	f.st.refused[why]++
	addr := ""
	if c != nil {
		addr = c.addr
	}
	return &refusal{why: why, addr: addr, topic: ratelog.Escape(string(topic), 128), args: args}
}

// log writes the refusal's line, rate-limited per reason.
func (f *fanIn) log(r *refusal) {
	why := r.why
	msg := "kvevents: fan-in refused a message"
	switch why {
	case refusedTopicHeld:
		msg = "kvevents: fan-in refused a topic another connection holds"
	case refusedAddress:
		msg = "kvevents: fan-in refused a topic naming another address than the peer's (Config.FanInAnyAddress turns the check off)"
	case refusedBadTopic:
		msg = "kvevents: fan-in refused a topic that cannot name an engine (empty or too long)"
	case refusedTopicLimit:
		msg = "kvevents: fan-in topic limit reached (Config.FanInMaxTopics): new topic refused"
	case refusedConnTopicLimit:
		msg = "kvevents: fan-in per-connection topic limit reached (Config.FanInMaxTopicsPerConn): new topic refused"
	case refusedConnGone:
		msg = "kvevents: fan-in refused a message of a closed connection"
	}
	cfg := &f.parent.sub.cfg
	f.parent.sub.log.line(logFanIn+why, cfg.Logger, msg, append([]any{"source", f.parent.src.Name, "reason", why,
		"peer", r.addr, "topic", r.topic}, r.args...)...)
}

// onLive routes one live message of the fan-in socket to its topic's
// engine, claiming the topic for the connection when no live one holds it.
func (f *fanIn) onLive(ctx context.Context, m *liveMsg, p *socket.Peer) error {
	for range 2 { // a second time only if the engine was retired meanwhile
		eng, r := f.route(m.topic, m.payload, p)
		if r != nil {
			f.log(r)
		}
		if eng == nil {
			return nil
		}
		eng.lastSeen.Store(time.Now().UnixNano())
		err := eng.onLive(ctx, m.seq, m.payload, p.ID())
		if !errors.Is(err, errRetired) {
			return err
		}
	}
	return nil
}

// route returns the engine a message of topic from p goes to, or nil and
// the refusal; payload names a new engine (engineName).
func (f *fanIn) route(topic, payload []byte, p *socket.Peer) (*source, *refusal) {
	id := p.ID()
	cfg := &f.parent.sub.cfg
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.conns[id]
	if c == nil {
		if _, gone := f.gone[id]; gone {
			return nil, f.refuse(refusedConnGone, &fanConn{addr: ratelog.Escape(p.String(), 128)}, topic)
		}
		c = f.addConn(p)
	}
	t := f.topics[string(topic)]
	if t != nil && t.owner == id {
		return t.eng, nil
	}
	if len(topic) == 0 || len(topic) > maxTopicLen {
		return nil, f.refuse(refusedBadTopic, c, topic, "len", len(topic), "max", maxTopicLen)
	}
	name := string(topic)
	host, _, ok := parseTopic(name)
	if ok && !cfg.FanInAnyAddress {
		if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap() != c.ip {
			return nil, f.refuse(refusedAddress, c, topic, "topic_host", ratelog.Escape(host, 64))
		}
	}
	if t != nil && t.owner != 0 {
		holder := ""
		if h := f.conns[t.owner]; h != nil {
			holder = h.addr
		}
		return nil, f.refuse(refusedTopicHeld, c, topic, "holder", holder)
	}
	if len(c.topics) >= cfg.FanInMaxTopicsPerConn {
		return nil, f.refuse(refusedConnTopicLimit, c, topic, "limit", cfg.FanInMaxTopicsPerConn)
	}
	if t == nil {
		if len(f.topics) >= cfg.FanInMaxTopics {
			return nil, f.refuse(refusedTopicLimit, c, topic, "limit", cfg.FanInMaxTopics)
		}
		t = &fanTopic{eng: f.newEngine(name, engineName(name, payload), replayFor(f.parent.src.ReplayTemplate, host, ok))}
		f.topics[name] = t
	}
	t.owner = id
	c.topics[name] = struct{}{}
	eng := t.eng
	eng.peers.Store(1)
	eng.count(func(st *SourceStats) {
		st.Holder.Addr, st.Holder.Since, st.Holder.Batches = c.addr, time.Now(), 0
		eng.holderID = id
	})
	// noteConn takes only eng.bgMu, never f.mu: safe here.
	eng.noteConn()
	return eng, nil
}

// engineName names a new engine of topic from its first message's payload:
// the topic itself, or, when the batch says the engine is data-parallel
// rank r > 0 (its data_parallel_rank, vLLM PR #18925), topic + "/dp<r>".
// vLLM's ranks of one pod publish under one topic, each from its own
// connection to the fan-in port + r, so each port's fan-in source sees one
// rank: the suffix keeps the ranks distinct engines to the Handler and in
// Stats (as DPSources names dialed ranks), where the topic alone would
// give every rank one name. Rank 0 and a nil rank keep the topic (vLLM
// without data parallelism sends rank 0). An undecodable payload keeps the
// topic too; its delivery counts the error. It runs once per engine.
func engineName(topic string, payload []byte) string {
	var b Batch
	if DecodeBatch(payload, &b) != nil || !b.DataParallelRank.Valid || b.DataParallelRank.V <= 0 {
		return topic
	}
	return topic + "/dp" + strconv.FormatInt(b.DataParallelRank.V, 10)
}

// newEngine creates a topic's engine (f.mu held): a source with no socket,
// named name (engineName).
func (f *fanIn) newEngine(topic, name, replay string) *source {
	p := f.parent
	s := p.sub
	src := Source{Name: name, Live: p.src.Live, Replay: replay, Engine: p.src.Engine}
	e := &source{sub: s, src: src, fromStart: s.cfg.FromStart, parent: p, topic: topic, turn: make(chan struct{}, 1)}
	e.gates = append(e.gates, f.gates...)
	if g := f.retiring[topic]; g != nil {
		e.gates = append(e.gates, g) // the engine retired under this topic departs first
	}
	e.ctx, e.cancel = context.WithCancel(p.ctx)
	e.st.Name, e.st.Live, e.st.Replay = name, src.Live, replay
	e.batch.Source = name
	s.nsources.Add(1)
	e.start()
	return e
}

// retire retires an engine whose topic's connection has stayed gone for
// EngineTTL: the topic is forgotten (a return is a new run), the engine
// gets its UpdateDeparted and stops.
func (f *fanIn) retire(e *source) {
	f.mu.Lock()
	t := f.topics[e.topic]
	if t == nil || t.eng != e || t.owner != 0 {
		f.mu.Unlock()
		return
	}
	delete(f.topics, e.topic)
	f.st.departed++
	gate := make(chan struct{})
	f.retiring[e.topic] = gate
	f.mu.Unlock()
	f.parent.sub.nsources.Add(-1)
	e.lock()
	e.retired = true
	e.abortReplay()
	_ = e.depart("kvevents: fan-in engine retired: its connection has been gone for Config.EngineTTL; topic forgotten")
	e.unlock()
	e.stop()
	f.mu.Lock()
	if f.retiring[e.topic] == gate {
		delete(f.retiring, e.topic)
	}
	f.mu.Unlock()
	close(gate)
}

// stopEngines stops every engine (the fan-in source is stopping).
func (f *fanIn) stopEngines() {
	f.mu.Lock()
	list := make([]*source, 0, len(f.topics))
	for _, t := range f.topics {
		list = append(list, t.eng)
		f.stopped = append(f.stopped, t.eng.src.Name)
	}
	clear(f.topics)
	f.mu.Unlock()
	for _, e := range list {
		e.removed.Store(true)
		e.stop()
		f.parent.sub.nsources.Add(-1)
	}
}

// stoppedNames is the engines stopEngines stopped.
func (f *fanIn) stoppedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stopped...)
}

// engines returns the engines followed now.
func (f *fanIn) engines() []*source {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := make([]*source, 0, len(f.topics))
	for _, t := range f.topics {
		list = append(list, t.eng)
	}
	return list
}

// stats fills st.FanIn.
func (f *fanIn) stats(st *SourceStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := &st.FanIn
	fs.Conns, fs.Topics, fs.Connections, fs.Departed = len(f.conns), len(f.topics), f.st.connections, f.st.departed
	r := &fs.RefusedBy
	r.TopicHeld, r.Address, r.BadTopic = f.st.refused[refusedTopicHeld], f.st.refused[refusedAddress], f.st.refused[refusedBadTopic]
	r.TopicLimit, r.ConnTopicLimit, r.ConnGone = f.st.refused[refusedTopicLimit], f.st.refused[refusedConnTopicLimit], f.st.refused[refusedConnGone]
	fs.Refused = 0
	for _, n := range f.st.refused {
		fs.Refused += n
	}
}

// checkFanIn refuses a source mixing fan-in with what it does not use.
func checkFanIn(src Source) error {
	switch {
	case !src.FanIn && src.ReplayTemplate != "":
		return fmt.Errorf("kvevents: source %s: Source.ReplayTemplate needs Source.FanIn", ratelog.Escape(src.Name, 128))
	case !src.FanIn:
		return nil
	case src.Bind || src.Replay != "" || src.Resume != nil:
		return fmt.Errorf("kvevents: fan-in source %s: Bind, Replay and Resume do not apply (its engines' replay endpoints come from Source.ReplayTemplate)", ratelog.Escape(src.Name, 128))
	case src.ReplayTemplate != "" && !strings.Contains(src.ReplayTemplate, "{host}"):
		return fmt.Errorf("kvevents: fan-in source %s: Source.ReplayTemplate %q has no {host}", ratelog.Escape(src.Name, 128), ratelog.Escape(src.ReplayTemplate, 128))
	}
	return nil
}
