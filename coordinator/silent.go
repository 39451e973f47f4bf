package coordinator

import (
	"errors"
	"net"
	"slices"
	"sync"

	"github.com/zmqguard/zmqguard/socket"
)

// EngineSilence counts the heartbeat timeouts (socket.ErrHeartbeatTimeout)
// of one engine's connections on the two back sockets.
type EngineSilence struct {
	// EngineIndex is the engine's data-parallel index (its engine_index).
	EngineIndex int64 `json:"engine_index"`
	// BackOutput and BackPublish count heartbeat disconnects on each socket.
	BackOutput  uint64 `json:"back_output"`
	BackPublish uint64 `json:"back_publish"`
}

// silence learns which engine each back-output connection carries and
// names the engine when one of its connections goes silent. It is used from
// Run's goroutine (learn) and the sockets' event callbacks (disconnect).
//
// An engine is known on the back output socket by the connection its
// outputs arrive on (their engine_index). Its back publish connection (a
// subscription, which carries no index) is known only by its host: the
// engines whose outputs came from the same IP address. With several
// engines on one host, the warning lists them all and counts none.
type silence struct {
	mu sync.Mutex
	// engines maps an engine index to the back-output connection its
	// latest accepted output came on; at most one entry per index the
	// state machine accepted (bounded by Config.MaxEngines).
	engines map[int64]enginePeer
	counts  map[int64]*EngineSilence
	// unknown counts heartbeat disconnects on the back sockets that could
	// not be tied to one engine.
	unknown uint64
}

type enginePeer struct {
	id   uint64 // socket.Peer.ID on the back output socket
	host string // its remote IP address
}

func peerHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// learn records that an accepted output of engine idx came from p.
func (s *silence) learn(idx int64, p *socket.Peer) {
	if p == nil {
		return
	}
	id := p.ID()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.engines[idx]; ok && e.id == id {
		return
	}
	if s.engines == nil {
		s.engines = map[int64]enginePeer{}
	}
	s.engines[idx] = enginePeer{id: id, host: peerHost(p.String())}
}

// match returns the engine indexes a silent connection of socket idx
// belongs to, sorted.
func (s *silence) match(sock int, e socket.Event) []int64 {
	var out []int64
	addr := e.Remote
	if e.Peer != nil {
		addr = e.Peer.String()
	}
	host := peerHost(addr)
	for i, ep := range s.engines {
		switch {
		case sock == idxBackOutput && e.Peer != nil && ep.id == e.Peer.ID():
			out = append(out, i)
		case sock == idxBackPublish && host != "" && ep.host == host:
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// onEvent handles a socket event of socket sock: a heartbeat timeout on a
// back socket is logged at warn level, naming the engine when known, and
// counted.
func (c *Coordinator) onSocketEvent(sock int, e socket.Event) {
	if e.Kind != socket.EventDisconnected || (sock != idxBackOutput && sock != idxBackPublish) ||
		!errors.Is(e.Err, socket.ErrHeartbeatTimeout) {
		return
	}
	s := &c.silent
	s.mu.Lock()
	idx := s.match(sock, e)
	if len(idx) == 1 {
		if s.counts == nil {
			s.counts = map[int64]*EngineSilence{}
		}
		n := s.counts[idx[0]]
		if n == nil {
			n = &EngineSilence{EngineIndex: idx[0]}
			s.counts[idx[0]] = n
		}
		if sock == idxBackOutput {
			n.BackOutput++
		} else {
			n.BackPublish++
		}
	} else {
		s.unknown++
	}
	s.mu.Unlock()
	peer := e.Remote
	if e.Peer != nil {
		peer = e.Peer.String()
	}
	args := []any{"socket", socketNames[sock], "peer", peer}
	switch len(idx) {
	case 0:
		args = append(args, "engine_index", "unknown")
	case 1:
		args = append(args, "engine_index", idx[0])
	default:
		args = append(args, "engine_index", "ambiguous", "engines_on_host", idx)
	}
	c.log.Warn("coordinator: engine went silent", append(args, "err", e.Err.Error())...)
}

// socketNames are the sockets' names in logs and stats (as in
// Stats' JSON keys).
var socketNames = [numLoops]string{"front", "back_output", "back_publish"}

// silences returns the per-engine heartbeat timeout counts, by index, and
// the count not tied to one engine.
func (c *Coordinator) silences() ([]EngineSilence, uint64) {
	s := &c.silent
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []EngineSilence
	for _, n := range s.counts {
		out = append(out, *n)
	}
	slices.SortFunc(out, func(a, b EngineSilence) int {
		switch {
		case a.EngineIndex < b.EngineIndex:
			return -1
		case a.EngineIndex > b.EngineIndex:
			return 1
		}
		return 0
	})
	return out, s.unknown
}
