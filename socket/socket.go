package socket

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/ratelog"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// ErrClosed is returned by every operation on a closed Socket.
var ErrClosed = errors.New("socket: closed")

// ErrUnroutable is matched (errors.Is) by the error a ROUTER's Send or
// SendWait returns for an identity that is not (or no longer) connected;
// the error's text names the identity in hex.
var ErrUnroutable = errors.New("socket: no peer with that identity")

// Errors for misuse: their text says what was wrong; a caller has nothing
// to match them for.
var (
	// errNotSupported is returned by an operation the socket type does not
	// have (Send on PULL or SUB, Recv on PUSH, Subscribe on ROUTER, ...).
	errNotSupported = errors.New("socket: operation not supported by this socket type")
	// errEmptyMessage is returned by Send with no frames.
	errEmptyMessage = errors.New("socket: a message needs at least one frame")
	// errRouterFrames is returned by a ROUTER's Send with fewer than two
	// frames (an identity and at least one frame of message).
	errRouterFrames = errors.New("socket: ROUTER Send needs an identity frame and at least one message frame")
	// errState is returned by a REQ socket used out of turn: Send while a
	// reply is awaited, or Recv with no request outstanding.
	errState = errors.New("socket: REQ send/recv out of turn (call Reset to abandon a request)")
	// errDuplicateIdentity is the cause given when a ROUTER refuses a
	// connection announcing an identity another connected peer already has.
	errDuplicateIdentity = errors.New("socket: identity already in use by another peer")
	// errReset is the disconnect cause of a REQ peer dropped by Reset.
	errReset = errors.New("socket: REQ request abandoned by Reset")
)

// unroutableError is returned by a ROUTER's Send to an identity that is not
// (or no longer) connected.
type unroutableError struct {
	// Identity is a copy of the identity the message was addressed to.
	Identity []byte
}

// Error names the identity in hex (at most 32 bytes of it).
func (e *unroutableError) Error() string {
	id := e.Identity
	s := "socket: ROUTER has no peer with identity "
	if len(id) > 32 {
		return s + hex.EncodeToString(id[:32]) + "... (" + strconv.Itoa(len(id)) + " bytes)"
	}
	if len(id) == 0 {
		return s + "\"\" (empty)"
	}
	return s + hex.EncodeToString(id)
}

// Is makes errors.Is(err, ErrUnroutable) true.
func (e *unroutableError) Is(target error) bool { return target == ErrUnroutable }

type kind uint8

const (
	kRouter kind = iota + 1
	kDealer
	kReq
	kPull
	kPush
	kXPub
	kSub
	kXSub
)

var kindTypes = [...]zmtpguard.SocketType{
	kRouter: "ROUTER", kDealer: "DEALER", kReq: "REQ", kPull: "PULL",
	kPush: "PUSH", kXPub: "XPUB", kSub: "SUB", kXSub: "XSUB",
}

// receives reports whether the socket type delivers messages to Recv.
func (k kind) receives() bool { return k != kPush }

const (
	inboxBatches = 16 // batches waiting for Recv across all peers
	freeBatches  = 32 // recycled batches kept for reuse
)

// Socket is a ZeroMQ socket of one type whose every connection passed
// zmtpguard. See the package documentation for the per-type semantics. All
// methods are safe for concurrent use, but messages returned by Recv alias
// buffers reused by the next Recv (see [Msg]).
type Socket struct {
	kind  kind
	typ   zmtpguard.SocketType
	opts  Options
	guard zmtpguard.Config

	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	wg     sync.WaitGroup
	// closeDone is closed once Close has seen every goroutine end.
	closeDone chan struct{}

	mu        sync.RWMutex
	peers     []*peerConn
	byID      map[string]*peerConn // ROUTER identities
	estab     map[string]int       // remote addresses of accepted peers
	nextID    uint32               // ROUTER assigned identities
	listeners []*listener
	subs      []subEntry // SUB/XSUB subscriptions, in order of first subscription
	snap      atomic.Pointer[[]*peerConn]
	// XPUB subscriptions (topics.go) and the scratch slices of fan-out
	// matching.
	topicIdx      *topicIndex
	matchPool     sync.Pool
	topicRefusals atomic.Uint64
	// budget is MemoryBudget, shared by every connection (nil: none).
	budget   *zmtpguard.Budget
	reclaims atomic.Uint64
	subIdx   atomic.Pointer[subIndex] // SUB receive filter
	peerSeq  atomic.Uint64
	rr       atomic.Uint64

	// reclaimGen is the reclaimer generation last counted in reclaims.
	reclaimGen atomic.Uint64

	// receive side
	inbox chan *batch
	free  chan *batch
	// freeBytes is the buffer bytes the batches in free keep (see putBatch).
	freeBytes atomic.Int64
	recvMu    sync.Mutex
	// recvWaiting is set while Recv waits for a batch (see handOff).
	recvWaiting atomic.Bool
	cur         *batch
	pos         int

	// REQ state
	reqMu      sync.Mutex
	reqSending bool
	reqWaiting bool
	reqPeer    *peerConn

	// senders waiting for room (PUSH, DEALER, REQ)
	spaceMu  sync.Mutex
	spaceCh  chan struct{}
	waiters  atomic.Int32
	received atomic.Uint64
	sent     atomic.Uint64
	dropHWM  atomic.Uint64
	dropUnr  atomic.Uint64
	dropFilt atomic.Uint64
	connects atomic.Uint64
	discons  atomic.Uint64

	// liveness and byte bounds (liveness.go); zmtp30Noted: the first ZMTP
	// 3.0 peer was logged
	zmtp30Noted   atomic.Bool
	hbTimeouts    atomic.Uint64
	pings         atomic.Uint64
	pongs         atomic.Uint64
	handovers     atomic.Uint64
	idRefusals    atomic.Uint64
	dropBytes     atomic.Uint64
	dropShare     atomic.Uint64 // refused over the peer's fair share (peer.go)
	sendEvictions atomic.Uint64 // peers closed over their share (evictOverShare)
	sendBytes     atomic.Int64  // bytes queued for every peer (SendTotalBytes)
	recvBytes     atomic.Int64  // bytes received, not yet released by Recv
	recvWaiters   atomic.Int32
	recvSpaceMu   sync.Mutex
	recvSpace     chan struct{} // closed when Recv releases bytes
	viol          [len(decodeguard.Counts{})]atomic.Uint64

	logOnce sync.Once        // see log.go
	lim     *ratelog.Limiter // drop lines, shared rules with package loop
}

// New returns a socket of type typ (its ZMTP name, for example "PULL"),
// configured by opts (zero fields mean their defaults; see [Options]). The
// types and what Send and Recv do for each:
//
//   - "ROUTER": Recv returns [identity, frames...];
//     Send(ctx, identity, frames...) routes to that peer.
//   - "DEALER": Send round-robins over peers with room, Recv
//     fair-queues.
//   - "REQ": strict Send/Recv alternation, the empty delimiter
//     added and stripped for the caller.
//   - "PULL": Recv fair-queues messages from every peer.
//   - "PUSH": Send round-robins over peers with room.
//   - "XPUB": Send publishes to matching subscribers, Recv returns
//     every subscription, unsubscription and other message.
//   - "SUB": Subscribe/Unsubscribe choose the topics, Recv returns
//     matching data messages.
//   - "XSUB": like SUB, but Send passes messages ("\x01topic" /
//     "\x00topic" subscriptions or data) to every publisher and Recv is
//     not filtered.
//
// Other types (PAIR, PUB, REP) are refused, as is an Options value that
// does not verify once its defaults are filled in.
func New(typ zmtpguard.SocketType, opts Options) (*Socket, error) {
	k := kindOf(typ)
	if k == 0 {
		return nil, fmt.Errorf("socket: type %q is not supported (want ROUTER, DEALER, REQ, PULL, PUSH, XPUB, SUB or XSUB)", string(typ))
	}
	return newSocket(k, opts)
}

// kindOf returns the kind of a socket type, 0 for an unsupported one.
func kindOf(typ zmtpguard.SocketType) kind {
	for k, t := range kindTypes {
		if t == typ && k != 0 {
			return kind(k)
		}
	}
	return 0
}

func newSocket(k kind, opts Options) (*Socket, error) {
	o := opts.withDefaults(k)
	if err := o.verify(); err != nil {
		return nil, err
	}
	o.Identity = append([]byte(nil), o.Identity...)
	s := &Socket{
		kind:      k,
		typ:       kindTypes[k],
		opts:      o,
		guard:     o.Guard,
		spaceCh:   make(chan struct{}),
		inbox:     make(chan *batch, inboxBatches),
		free:      make(chan *batch, freeBatches),
		recvSpace: make(chan struct{}),
		closeDone: make(chan struct{}),
	}
	if o.MemoryBudget > 0 {
		if s.guard.Budget == nil {
			s.guard.Budget = &zmtpguard.Budget{Limit: o.MemoryBudget, Wait: o.BudgetWait}
		}
		s.budget = s.guard.Budget
	}
	s.guard.OnRelease = s.releaseHook(s.guard.OnRelease)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.estab = make(map[string]int)
	s.topicIdx = newTopicIndex()
	s.matchPool.New = func() any { return new([]*peerConn) }
	if k == kRouter {
		s.byID = make(map[string]*peerConn)
		s.nextID = 1
	}
	empty := []*peerConn{}
	s.snap.Store(&empty)
	s.subIdx.Store(&subIndex{})
	return s, nil
}

// sockType returns the socket's ZMTP type.
func (s *Socket) sockType() zmtpguard.SocketType { return s.typ }

// Options returns the options the socket runs with: its Options with every
// default filled in, derived ones included (MemoryBudget, an XPUB's
// WriteTimeout). To configure another socket like this one, start from
// the same Options value or [DefaultOptions], not from these: a derived
// value copied here stays fixed when the field it came from changes.
func (s *Socket) Options() Options { return s.opts }

// addr returns the address of the first bound endpoint (nil before Bind).
func (s *Socket) addr() net.Addr {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.listeners) == 0 {
		return nil
	}
	return s.listeners[0].addr
}

// Endpoint returns the first bound endpoint with the port actually chosen,
// for example "tcp://127.0.0.1:41234" ("" before Bind).
func (s *Socket) Endpoint() string { return endpointString(s.addr()) }

// endpoints returns every bound endpoint, in Bind order.
func (s *Socket) endpoints() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.listeners))
	for _, l := range s.listeners {
		out = append(out, l.endpoint)
	}
	return out
}

// peerList returns the currently connected peers (Stats.Peers counts them;
// Msg.Peer and Event.Peer name them).
func (s *Socket) peerList() []*Peer {
	ps := *s.snap.Load()
	out := make([]*Peer, len(ps))
	for i, p := range ps {
		out[i] = p.info
	}
	return out
}

// Disconnect closes the connection of peer (from Msg.Peer or Event.Peer) with
// cause, a policy decision of the caller (for example a peer flooding
// requests): it is reported as EventDisconnected with cause, counted under
// cause's reason (decodeguard.ReasonOf) in Stats.Refused, and a dialed
// connection reconnects. It reports whether peer was still connected. It
// never waits for the peer.
func (s *Socket) Disconnect(peer *Peer, cause error) bool {
	if peer == nil {
		return false
	}
	for _, p := range *s.snap.Load() {
		if p.info == peer {
			if p.isClosed() {
				return false
			}
			p.close(cause)
			return true
		}
	}
	return false
}

// Stats returns a snapshot of the socket's counters.
func (s *Socket) Stats() Stats {
	st := Stats{
		Received:          s.received.Load(),
		Sent:              s.sent.Load(),
		DroppedHWM:        s.dropHWM.Load(),
		DroppedUnroutable: s.dropUnr.Load(),
		DroppedFiltered:   s.dropFilt.Load(),
		Peers:             len(*s.snap.Load()),
		Connects:          s.connects.Load(),
		Disconnects:       s.discons.Load(),
		HeartbeatTimeouts: s.hbTimeouts.Load(),
		PingsSent:         s.pings.Load(),
		PongsReceived:     s.pongs.Load(),
		Handovers:         s.handovers.Load(),
		IdentityRefusals:  s.idRefusals.Load(),
		DroppedBytes:      s.dropBytes.Load(),
		DroppedFairShare:  s.dropShare.Load(),
		SendEvictions:     s.sendEvictions.Load(),
		QueuedSendBytes:   s.sendBytes.Load(),
		QueuedRecvBytes:   s.recvBytes.Load(),
		TopicRefusals:     s.topicRefusals.Load(),
		Reclaims:          s.reclaims.Load(),
	}
	for _, p := range *s.snap.Load() {
		if !p.heartbeats() {
			st.ZMTP30Peers++
		}
		p.qmu.Lock()
		if !p.qclosed {
			st.QueuedSendMessages += int64(p.n)
		}
		p.qmu.Unlock()
	}
	if b := s.budget; b != nil {
		st.BudgetBytes, st.BudgetStalls, st.BudgetEvictions = b.Stats()
	}
	if s.kind == kXPub {
		s.topicIdx.mu.RLock()
		st.Topics, st.TopicBytes = s.topicIdx.count, s.topicIdx.bytes
		s.topicIdx.mu.RUnlock()
	}
	for i := range s.viol {
		st.Refused[i] = s.viol[i].Load()
	}
	s.mu.RLock()
	for _, l := range s.listeners {
		ls := l.gl.Stats()
		st.AcceptErrors += ls.AcceptErrors
		st.ConnsEvicted += ls.ConnsEvicted
		st.EvictedIdle += ls.EvictedIdle
		st.EvictedOverShare += ls.EvictedOverShare
		st.EvictedForReserve += ls.EvictedForReserve
	}
	s.mu.RUnlock()
	return st
}

// Close closes the socket and returns without waiting: Recv and Send
// return ErrClosed at once, the bound addresses are free, and the socket's
// dialers and peers are taken down in the background (messages not yet written are
// discarded; each connected peer still gets its EventDisconnected). Close
// never waits for the socket's goroutines, so it may be called from
// anywhere, Options.OnEvent and the Guard's hooks (OnViolation, OnRelease)
// included. Use [Socket.Shutdown] to wait for the shutdown to finish. Close
// is idempotent and returns nil.
func (s *Socket) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.cancel()
	// The OS listeners close now (closing one waits for nothing), so that
	// the address is free once Close has returned; zmtpguard's listeners,
	// whose Close waits for their handshakes, close in the background.
	s.mu.RLock()
	for _, l := range s.listeners {
		l.ln.Close()
	}
	s.mu.RUnlock()
	go s.finishClose()
	return nil
}

// Shutdown closes the socket like Close and waits until every goroutine of
// the socket has ended and its pending log summaries are written, or ctx
// ends (it then returns ctx's error). Shutdown waits for the callbacks the
// socket is running: calling it from inside one (Options.OnEvent, a Guard
// hook) waits until ctx ends; call Close there.
func (s *Socket) Shutdown(ctx context.Context) error {
	s.Close()
	select {
	case <-s.closeDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finishClose is the rest of Close, on a goroutine of its own: it closes
// listeners and peers, waits for every goroutine and writes the pending log
// summaries.
func (s *Socket) finishClose() {
	s.mu.Lock()
	lns := s.listeners
	peers := append([]*peerConn(nil), s.peers...)
	s.mu.Unlock()
	for _, l := range lns {
		l.close()
	}
	for _, p := range peers {
		p.close(ErrClosed)
	}
	s.wg.Wait()
	s.flushLog()
	close(s.closeDone)
}

// addPeer registers a connection that passed its handshake and starts its
// reader and writer. gone, if set, is called once when the peer leaves.
func (s *Socket) addPeer(c *zmtpguard.Conn, ep string, accepted bool, gone func()) (*peerConn, error) {
	md := c.Peer()
	info := &Peer{
		id:       s.peerSeq.Add(1),
		addr:     c.NetConn().RemoteAddr(),
		typ:      md.SocketType,
		endpoint: ep,
	}
	if info.addr != nil {
		info.addrText = info.addr.String()
	}
	if md.Identity != "" {
		info.identity = []byte(md.Identity)
	}
	major, minor := c.Peer().Major, c.Peer().Minor
	info.version = [2]byte{byte(major), byte(minor)}
	p := newPeerConn(s, c, info, gone)
	p.accepted = accepted

	var old *peerConn
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		c.Close()
		return nil, ErrClosed
	}
	if s.kind == kRouter {
		if md.Identity != "" {
			if prev, dup := s.byID[md.Identity]; dup && s.opts.RouterHandover {
				// The new connection takes the identity; prev is closed
				// below, once s.mu is released (removePeer takes it, and
				// leaves the identity to p).
				old = prev
			} else if dup {
				s.mu.Unlock()
				c.Close()
				s.idRefusals.Add(1)
				s.viol[decodeguard.ReasonPolicy].Add(1)
				err := decodeguard.WrapError(decodeguard.ReasonPolicy,
					"ROUTER identity "+ratelog.Render(info.identity)+" already connected", errDuplicateIdentity)
				s.emit(Event{Kind: EventRejected, Peer: info, Remote: info.addrText, Endpoint: ep, Err: err, Reason: decodeguard.ReasonPolicy})
				return nil, err
			}
		} else {
			for {
				id := []byte{0, byte(s.nextID >> 24), byte(s.nextID >> 16), byte(s.nextID >> 8), byte(s.nextID)}
				s.nextID++
				if s.nextID == 0 {
					s.nextID = 1
				}
				if _, dup := s.byID[string(id)]; !dup {
					info.identity = id
					break
				}
			}
		}
		s.byID[string(info.identity)] = p
	}
	if s.kind == kSub || s.kind == kXSub {
		for _, e := range s.subs {
			p.queueCtrl("", append([]byte{1}, e.topic...))
		}
	}
	s.peers = append(s.peers, p)
	if accepted {
		s.estab[info.addrText]++
	}
	s.publishSnap()
	s.wg.Add(2)
	s.mu.Unlock()

	if old != nil {
		s.handovers.Add(1)
		old.close(handoverErr(info))
	}
	s.connects.Add(1)
	p.noteZMTP30()
	p.startHeartbeat()
	go p.readLoop()
	go p.writeLoop()
	s.emit(Event{Kind: EventConnected, Peer: info, Remote: info.addrText, Endpoint: ep})
	s.wakeSenders()
	return p, nil
}

// removePeer unregisters p. Called once, from p.close.
func (s *Socket) removePeer(p *peerConn) {
	s.mu.Lock()
	if i := slices.Index(s.peers, p); i >= 0 {
		s.peers = slices.Delete(s.peers, i, i+1)
	}
	if p.accepted {
		if s.estab[p.info.addrText]--; s.estab[p.info.addrText] <= 0 {
			delete(s.estab, p.info.addrText)
		}
	}
	if s.kind == kRouter {
		if q, ok := s.byID[string(p.info.identity)]; ok && q == p {
			delete(s.byID, string(p.info.identity))
		}
	}
	s.publishSnap()
	s.mu.Unlock()
}

// publishSnap stores a fresh copy of s.peers for lock-free senders. Call with
// s.mu held.
func (s *Socket) publishSnap() {
	cp := make([]*peerConn, len(s.peers))
	copy(cp, s.peers)
	s.snap.Store(&cp)
}

// wakeSenders releases every Send waiting for room or a peer.
func (s *Socket) wakeSenders() {
	if s.waiters.Load() == 0 {
		return
	}
	s.spaceMu.Lock()
	close(s.spaceCh)
	s.spaceCh = make(chan struct{})
	s.spaceMu.Unlock()
}

func (s *Socket) spaceChan() chan struct{} {
	s.spaceMu.Lock()
	ch := s.spaceCh
	s.spaceMu.Unlock()
	return ch
}

// countErr counts a classified error under its reason.
func (s *Socket) countErr(err error) decodeguard.Reason {
	r := decodeguard.ReasonOf(err)
	if r != decodeguard.ReasonNone {
		s.viol[r].Add(1)
	}
	return r
}
