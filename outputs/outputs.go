// Package outputs is the API front-end's side of vLLM's engine output
// stream: a guarded PULL socket that no frame from an engine or a stranger
// can stop.
//
//	r, err := outputs.New(outputs.Config{
//		Socket: socket.Options{Guard: zmtpguard.Config{Allow: engines}}, // or Curve
//		Handler: func(ctx context.Context, m *enginecore.Message, from *socket.Peer) error {
//			for i := range m.Outputs {
//				use(m.Outputs[i].RequestID, m.Outputs[i].NewTokenIDs)
//			}
//			return nil
//		},
//	})
//	if err != nil {
//		return err
//	}
//	defer r.Close()
//	err = r.Bind("tcp://0.0.0.0:5580") // engines PUSH here
//	err = r.Run(ctx)
//
// Engines connect and PUSH EngineCoreOutputs messages, which a SafeLoop
// (package loop) receives. vLLM's front-end ends its output task on the
// first frame it cannot decode (a port scanner's "\x45": "Expected
// `array`, got `int`"), and the engine client with it. A [Receiver]
// instead decodes every message in full with package enginecore (arrays
// as zero-copy views into the frames, aux frames checked), drops and
// counts what is wrong by reason, per engine where the connection is
// known, and hands each valid message to the handler in the order its
// engine sent it.
//
// Attribution: an engine index is bound to the first connection that sends
// a valid message claiming it. A valid message from any other connection
// claiming that engine is dropped (ReasonPolicy, counted in
// Stats.ClaimsRefused, logged rate-limited): no peer speaks for an engine
// that another connection holds. The binding is released once the owning
// connection has disconnected, so that a restarted engine (a new
// connection) claims its index again with its first message. One
// connection holds at most 64 indices. Whoever connects first wins an
// unbound index, so first is not owner unless only engines can connect:
// Bind refuses a TCP address other than loopback unless a source allowlist
// (Config.Socket.Guard.Allow) or CURVE (Config.Socket.Guard.Curve,
// admitting only the engines' keys) limits who connects, or Config.AnyPeer
// opts out. An index taken over by a connection from another host than
// its previous holder's is logged at WARN naming both (Stats.Takeovers;
// EngineStats.Peer is the holder).
//
// ENGINE_CORE_DEAD, the single frame an engine sends when it fails, is not
// junk, but any peer can send it: it never ends Run. From a connection
// that holds an engine index it marks that engine dead and reaches
// Config.OnEngineDead as a typed [EngineDeadError] (with Engine set); from
// a connection that holds none it is dropped (ReasonPolicy), counted in
// Stats.UnattributedDead and logged rate-limited, and no callback runs.
// vLLM's client stops on it; to do the same, call Close from OnEngineDead.
//
// A utility output under a negative call id, which an engine sends unasked
// (an elastic-EP notification, -1, or a fault-tolerance status, -2), also
// reaches Config.OnNotification as a typed [Notification].
//
// The default limits (4096 frames, 64 MiB) are sized for one engine step
// of a large engine, max_num_seqs 1024 with logprobs, pooling outputs and
// routed experts in aux frames.
//
// A valid message is attributed to the engine it claims (see above); a junk
// message or the sentinel, which carry none, to the engine its connection
// holds. Drops from connections that hold no engine are counted as
// unattributed.
package outputs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/internal/ref/sockopt"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/socket"
)

// engineCoreDead is the frame an engine core sends on its output socket
// when it dies (vLLM's EngineCoreProc.ENGINE_CORE_DEAD).
const engineCoreDead = "ENGINE_CORE_DEAD"

// ErrEngineDead matches, under errors.Is, every *[EngineDeadError].
var ErrEngineDead = errors.New("outputs: engine core died (ENGINE_CORE_DEAD)")

// EngineDeadError reports an engine's ENGINE_CORE_DEAD. It reaches
// Config.OnEngineDead only for a connection that holds an engine index;
// Run never returns it.
type EngineDeadError struct {
	// Engine is the engine's index (always set for an event that reaches
	// OnEngineDead; -1 only in errors built by older callers).
	Engine int64
	// Peer is the connection's address.
	Peer string
	// Time is when the sentinel arrived.
	Time time.Time
}

// Error implements error.
func (e *EngineDeadError) Error() string {
	eng := "an unknown engine"
	if e.Engine >= 0 {
		eng = "engine " + strconv.FormatInt(e.Engine, 10)
	}
	return "outputs: " + eng + " (" + e.Peer + ") sent ENGINE_CORE_DEAD"
}

// Is makes errors.Is(err, ErrEngineDead) true.
func (e *EngineDeadError) Is(target error) bool { return target == ErrEngineDead }

// item is the loop's value: a message or the sentinel.
type item struct {
	dead bool
	m    enginecore.Message
}

// Receiver is the guarded output socket. Create it with [New], Bind it, and
// Run it.
type Receiver struct {
	cfg  Config
	sock *socket.Socket
	lp   *loop.Loop[item]
	lim  enginecore.Limits

	mu           sync.Mutex
	engines      map[int64]*EngineStats
	owner        map[int64]binding   // engine index -> the connection holding it
	peers        map[uint64]int64    // connection id -> the first engine index it holds
	claims       map[uint64]int      // connection id -> how many engine indices it holds
	gone         map[uint64]struct{} // connections in peers that have disconnected
	messages     uint64
	outputs      uint64
	dead         uint64
	deadUnattr   uint64
	refused      uint64
	takeovers    uint64
	unattributed decodeguard.Counts
	lateDropped  decodeguard.Counts // drops by a worker (Handler's classified errors)
	dropLog      *ratelog.Limiter

	// Per-connection queues (fair.go).
	qmu        sync.Mutex
	hmu        sync.Mutex // serializes telling the socket of holds (applyHold)
	queues     map[uint64]*connQueue
	fmu        sync.Mutex
	free       []*frameCopy // recycled copies (fair.go)
	freeBytes  int
	queued     int64
	holds      uint64
	queueWaits uint64
	connLimit  int64
	queueLimit int64
	backstop   int64 // the receive loop waits past it (see QueueBytes)
	space      chan struct{}
	heavy      chan struct{} // heavy slots taken (see heavySlots)
	stop       chan struct{}
	stopOnce   sync.Once
	workers    sync.WaitGroup
	failOnce   sync.Once
	failErr    error
	cancelRun  context.CancelFunc
}

// binding is the connection that holds an engine index.
type binding struct {
	id   uint64
	addr string
}

// New returns a Receiver with a PULL socket configured by cfg. It binds
// nothing yet: call Bind.
func New(cfg Config) (*Receiver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.verify(); err != nil {
		return nil, err
	}
	so, _ := sockopt.Apply(cfg.Socket, sockopt.Overrides{
		MaxFrames: defaultMaxFrames, MaxMessageSize: defaultMaxMessageSize, Logger: cfg.Logger})
	if so.Guard.MaxFrames < defaultMaxFrames {
		cfg.Logger.Warn("outputs: the socket's frame limit is low for engine outputs; messages with more aux frames are refused",
			"loop", cfg.Name, "max_frames", so.Guard.MaxFrames, "suggested", defaultMaxFrames)
	}
	var r *Receiver
	userEvent := so.OnEvent
	so.OnEvent = func(ev socket.Event) {
		if ev.Kind == socket.EventDisconnected && ev.Peer != nil && r != nil {
			r.departed(ev.Peer.ID())
		}
		if userEvent != nil {
			userEvent(ev)
		}
	}
	s, err := socket.New("PULL", so)
	if err != nil {
		return nil, err
	}
	r = &Receiver{cfg: cfg, sock: s, lim: cfg.Limits,
		engines: make(map[int64]*EngineStats), owner: make(map[int64]binding),
		peers: make(map[uint64]int64), claims: make(map[uint64]int), gone: make(map[uint64]struct{}),
		queues: make(map[uint64]*connQueue), space: make(chan struct{}, 1), stop: make(chan struct{}),
		heavy: make(chan struct{}, heavySlots())}
	maxMsg := s.Options().Guard.MaxMessageSize
	r.connLimit, r.queueLimit = cfg.ConnQueueBytes, cfg.QueueBytes
	if r.connLimit == 0 {
		r.connLimit = maxMsg
	}
	if r.queueLimit == 0 {
		r.queueLimit = max(4*maxMsg, r.connLimit)
	}
	if r.queueLimit < r.connLimit {
		s.Close()
		return nil, fmt.Errorf("outputs: Config.QueueBytes %d is below ConnQueueBytes %d", r.queueLimit, r.connLimit)
	}
	// What held connections may still deliver: the socket holds at most
	// twice its MemoryBudget (see socket.Options.MemoryBudget).
	sb := s.Options().MemoryBudget
	if sb <= 0 {
		sb = r.queueLimit
	}
	r.backstop = r.queueLimit + 2*sb
	r.dropLog = ratelog.New(ratelog.Config{Logger: cfg.Logger, Component: cfg.Name})
	if r.lim.Scan.MaxBytes == 0 {
		r.lim.Scan.MaxBytes = int(s.Options().Guard.MaxMessageSize)
	}
	if r.lim.MaxFrames == 0 {
		r.lim.MaxFrames = s.Options().Guard.MaxFrames
	}
	r.lp, err = loop.New(s, loop.Config[item]{
		Name:    cfg.Name,
		Logger:  cfg.Logger,
		Decode:  r.decode,
		Handler: r.handle,
		OnDrop:  r.onDrop,
	})
	if err != nil {
		s.Close()
		return nil, err
	}
	return r, nil
}

// Bind binds the PULL socket to endpoint (engines connect to it). It may
// be called more than once.
func (r *Receiver) Bind(endpoint string) error {
	if err := r.checkProtected(endpoint); err != nil {
		return err
	}
	return r.sock.Bind(endpoint)
}

// checkProtected refuses a Bind that would let any host claim an engine
// index: a TCP endpoint whose host is not loopback (a wildcard included),
// without an allowlist, CURVE or Config.AnyPeer.
func (r *Receiver) checkProtected(endpoint string) error {
	g := &r.cfg.Socket.Guard
	if r.cfg.AnyPeer || len(g.Allow) > 0 || g.Curve != nil {
		return nil
	}
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return nil // ipc: local; anything else Bind refuses itself
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return nil // Bind names the bad endpoint
	}
	if ip, err := netip.ParseAddr(host); (err == nil && ip.Unmap().IsLoopback()) || host == "localhost" {
		return nil
	}
	return fmt.Errorf("outputs: Bind %q: not a loopback address, and neither Socket.Guard.Allow nor Socket.Guard.Curve limits who connects: "+
		"any host could claim an engine index first; set one of them, or Config.AnyPeer to serve anyone", endpoint)
}

// Endpoint returns the first bound endpoint with its actual port.
func (r *Receiver) Endpoint() string { return r.sock.Endpoint() }

// Run receives until ctx ends (nil), Close (loop.ErrLoopClosed) or a
// handler error that is not classified. No peer's message ends it: not
// junk, and not ENGINE_CORE_DEAD (see the package doc).
func (r *Receiver) Run(ctx context.Context) error {
	rctx, cancel := context.WithCancel(ctx)
	r.cancelRun = cancel
	err := r.lp.Run(rctx)
	cancel()
	r.workers.Wait()
	r.dropLog.Flush(time.Now())
	if r.failErr != nil {
		return r.failErr
	}
	return err
}

// Close closes the socket; a running Run returns. It may be called from
// inside any of the Receiver's callbacks (see Handler).
func (r *Receiver) Close() error {
	err := r.lp.Close()
	r.stopOnce.Do(func() { close(r.stop) })
	if e := r.sock.Close(); err == nil {
		err = e
	}
	return err
}

func (r *Receiver) decode(frames [][]byte, dst *item) error {
	dst.dead = false
	if len(frames) == 1 && string(frames[0]) == engineCoreDead {
		dst.dead = true
		return nil
	}
	if err := enginecore.Decode(frames, &dst.m, &r.lim); err != nil {
		return err
	}
	if r.cfg.Engines > 0 && dst.m.EngineIndex >= int64(r.cfg.Engines) {
		return decodeguard.NewError(decodeguard.ReasonUnknownRank,
			"EngineCoreOutputs.engine_index "+strconv.FormatInt(dst.m.EngineIndex, 10)+" is not below "+strconv.Itoa(r.cfg.Engines))
	}
	if dst.m.HasUtilityOutput && dst.m.Utility.Special != 0 {
		if _, _, err := dst.m.Utility.SpecialValue(); err != nil {
			return err
		}
	}
	return nil
}

// notification builds the Notification of m's utility output (a negative
// call id, checked by decode).
func notification(m *enginecore.Message, peer *socket.Peer) Notification {
	n := Notification{Engine: m.EngineIndex, Peer: peer.String(), CallID: m.Utility.Special}
	v, _, _ := m.Utility.SpecialValue()
	switch x := v.(type) {
	case enginecore.EEPNotification:
		n.EEP = &x
	case enginecore.FTStatus:
		n.FT = &x
	}
	return n
}

// engine returns the stats of engine e, or nil when too many are tracked.
// r.mu is held.
func (r *Receiver) engine(e int64) *EngineStats {
	st := r.engines[e]
	if st == nil && len(r.engines) < maxTrackedEngines {
		st = &EngineStats{Engine: e}
		r.engines[e] = st
	}
	return st
}

func (r *Receiver) handle(ctx context.Context, d loop.Delivery[item]) error {
	it := d.Value
	peer := d.Msg.Peer
	if it.dead {
		return r.sentinel(ctx, peer)
	}
	if err := r.claim(it.m.EngineIndex, peer); err != nil {
		return err
	}
	cp, size := r.keepFrames(d.Msg.Frames)
	cost := size + int64(len(it.m.Outputs))*outputCost
	return r.enqueue(ctx, job{cp: cp, size: size, cost: cost, peer: peer})
}

// claim checks that engine e is held by peer's connection, binding it when
// no connection holds it or its holder has disconnected. A refusal is a
// classified error (the loop drops the message under ReasonPolicy).
func (r *Receiver) claim(e int64, peer *socket.Peer) error {
	id := peer.ID()
	r.mu.Lock()
	defer r.mu.Unlock()
	b, held := r.owner[e]
	if held && b.id == id {
		return nil
	}
	if held {
		if _, left := r.gone[b.id]; !left {
			r.refused++
			return decodeguard.NewError(decodeguard.ReasonPolicy,
				"engine_index "+strconv.FormatInt(e, 10)+" is held by another connection ("+b.addr+")")
		}
	}
	if r.claims[id] >= maxClaimsPerConnection {
		r.refused++
		return decodeguard.NewError(decodeguard.ReasonPolicy,
			"engine_index "+strconv.FormatInt(e, 10)+": this connection holds "+strconv.Itoa(maxClaimsPerConnection)+" engine indices already")
	}
	if len(r.owner) >= maxTrackedPeers && !held {
		r.forgetGone()
		if len(r.owner) >= maxTrackedPeers {
			r.refused++
			return decodeguard.NewError(decodeguard.ReasonPolicy,
				"engine_index "+strconv.FormatInt(e, 10)+": "+strconv.Itoa(maxTrackedPeers)+" engine indices are held already")
		}
	}
	// Unbound, or its holder left: a restarted engine claims it again.
	if held {
		r.claims[b.id]--
	}
	r.owner[e] = binding{id: id, addr: peer.String()}
	r.claims[id]++
	if _, ok := r.peers[id]; !ok {
		r.peers[id] = e
	}
	if st := r.engine(e); st != nil {
		st.Dead = false
		st.Peer = peer.String()
	}
	if held {
		if sameHost(b.addr, peer.String()) {
			r.cfg.Logger.Info("engine index claimed by a new connection (its previous one disconnected)",
				"loop", r.cfg.Name, "engine", e, "peer", peer.String(), "previous", b.addr)
		} else {
			r.takeovers++
			r.cfg.Logger.Warn("engine index taken over by a connection from another host (its previous one disconnected): "+
				"if that is not the engine restarted elsewhere, serve with an allowlist or CURVE",
				"loop", r.cfg.Name, "engine", e, "peer", peer.String(), "previous", b.addr)
		}
	}
	return nil
}

// sameHost reports whether two peer addresses ("host:port") have the
// same host; an address without a port (an ipc peer) is its own host.
func sameHost(a, b string) bool {
	ha, _, err := net.SplitHostPort(a)
	if err != nil {
		ha = a
	}
	hb, _, err := net.SplitHostPort(b)
	if err != nil {
		hb = b
	}
	if i := strings.IndexByte(ha, '#'); i >= 0 { // ipc "path#n"
		ha = ha[:i]
	}
	if i := strings.IndexByte(hb, '#'); i >= 0 {
		hb = hb[:i]
	}
	return ha == hb
}

// forgetGone drops the bindings of connections that have disconnected.
// r.mu is held.
func (r *Receiver) forgetGone() {
	for e, b := range r.owner {
		if _, left := r.gone[b.id]; left {
			delete(r.owner, e)
		}
	}
	for id := range r.gone {
		delete(r.peers, id)
		delete(r.claims, id)
	}
	clear(r.gone)
}

// sentinel handles an ENGINE_CORE_DEAD from peer in the receive loop: from
// a connection holding an engine index it is queued behind that
// connection's messages (deadEvent); from any other it is dropped.
func (r *Receiver) sentinel(ctx context.Context, peer *socket.Peer) error {
	r.mu.Lock()
	_, attributed := r.peers[peer.ID()]
	if !attributed {
		r.deadUnattr++
	}
	r.mu.Unlock()
	if !attributed {
		return decodeguard.NewError(decodeguard.ReasonPolicy,
			"ENGINE_CORE_DEAD from a connection that holds no engine index (ignored)")
	}
	return r.enqueue(ctx, job{dead: true, peer: peer, at: time.Now()})
}

// deadEvent marks the engines peer's connection holds dead and calls
// OnEngineDead for each (in the connection's worker).
func (r *Receiver) deadEvent(peer *socket.Peer, at time.Time) {
	id := peer.ID()
	var evs []EngineDeadError
	var first []int64
	r.mu.Lock()
	for e, b := range r.owner {
		if b.id != id {
			continue
		}
		evs = append(evs, EngineDeadError{Engine: e, Peer: peer.String(), Time: at})
		if st := r.engine(e); st != nil {
			if !st.Dead {
				first = append(first, e)
			}
			st.Dead = true
		}
	}
	if len(evs) == 0 {
		r.deadUnattr++ // its engines were claimed by a new connection meanwhile
	} else {
		r.dead++
	}
	r.mu.Unlock()
	slices.SortFunc(evs, func(a, b EngineDeadError) int { return cmp.Compare(a.Engine, b.Engine) })
	for _, e := range first {
		r.cfg.Logger.Warn("engine core dead", "loop", r.cfg.Name, "engine", e, "peer", peer.String())
	}
	if r.cfg.OnEngineDead != nil {
		for _, ev := range evs {
			r.cfg.OnEngineDead(ev)
		}
	}
}

// departed records that a connection left (socket goroutine). Its engine
// indices stay bound to it, so that what it sent before leaving is still
// attributed, until a new connection claims them.
func (r *Receiver) departed(id uint64) {
	r.mu.Lock()
	if _, ok := r.peers[id]; ok {
		r.gone[id] = struct{}{}
	}
	r.mu.Unlock()
}

func (r *Receiver) onDrop(d loop.Drop) {
	r.mu.Lock()
	e, ok := r.peers[d.Peer.ID()]
	var st *EngineStats
	if ok {
		st = r.engine(e)
	}
	if st != nil {
		st.Dropped[d.Reason]++
	} else {
		r.unattributed[d.Reason]++
	}
	r.mu.Unlock()
	if r.cfg.OnDrop != nil {
		r.cfg.OnDrop(d)
	}
}
