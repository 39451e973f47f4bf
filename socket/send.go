package socket

import (
	"context"
	"slices"
)

// Send queues one message made of frames and returns without waiting for the
// network. The frames are copied: the caller may reuse them as soon as Send
// returns. What happens per socket type:
//
//   - ROUTER: frames[0] is the destination identity and at least one more
//     frame is required. An identity that is not connected gives an error
//     matching ErrUnroutable (or a counted drop with
//     Options.RouterDropUnroutable). If that peer's queue is at its HWM the
//     message is dropped for it and counted in Stats.DroppedHWM; Send never
//     waits for one peer.
//   - PUSH, DEALER: the message goes to the next peer, round-robin, that has
//     room in its queue; when none has room (or no peer is connected) Send
//     waits until one has, ctx is done or the socket closes.
//   - REQ: as DEALER, with the empty delimiter frame added; a reply must be
//     received (or Reset called) before the next Send, else an error.
//   - XPUB: published to every subscriber whose topics prefix-match frames[0];
//     a subscriber whose queue is full misses it (counted in DroppedHWM).
//   - XSUB: a single frame "\x01topic" or "\x00topic" subscribes or
//     unsubscribes (as Subscribe/Unsubscribe); anything else goes to every
//     connected publisher (a full queue drops it for that publisher, counted).
//   - PULL, SUB: an error (the type does not send).
func (s *Socket) Send(ctx context.Context, frames ...[]byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(frames) == 0 {
		return errEmptyMessage
	}
	switch s.kind {
	case kRouter:
		return s.sendRouter(frames)
	case kPush, kDealer:
		return s.sendRR(ctx, false, frames)
	case kReq:
		return s.sendReq(ctx, frames)
	case kXPub:
		s.fanOut(frames, true, false)
		return nil
	case kXSub:
		if len(frames) == 1 && len(frames[0]) > 0 && frames[0][0] <= 1 {
			if frames[0][0] == 1 {
				return s.Subscribe(frames[0][1:])
			}
			return s.Unsubscribe(frames[0][1:])
		}
		s.fanOut(frames, false, false)
		return nil
	}
	return errNotSupported
}

// SendShared is Send for an XPUB that queues the last frame by reference
// instead of copying it for each subscriber: every subscriber's queue
// holds the same bytes until that subscriber's copy is written, so a
// payload published to many subscribers (some of them slow) costs its size
// once, not once per subscriber. The caller must not modify the last frame
// afterwards. It still counts in full against each subscriber's queue
// bounds (HWM, SendQueueBytes, its share of SendTotalBytes), which stay
// what they were. Other socket types: as Send (copied).
func (s *Socket) SendShared(ctx context.Context, frames ...[]byte) error {
	if s.kind != kXPub || s.closed.Load() || len(frames) == 0 || len(frames[len(frames)-1]) == 0 {
		return s.Send(ctx, frames...)
	}
	s.fanOut(frames, true, true)
	return nil
}

func (s *Socket) sendRouter(frames [][]byte) error {
	if len(frames) < 2 {
		return errRouterFrames
	}
	s.mu.RLock()
	p := s.byID[string(frames[0])]
	s.mu.RUnlock()
	if p == nil {
		return s.unroutable(frames[0])
	}
	if !p.enqueue(nil, false, frames[1:]) {
		if p.isClosed() {
			return s.unroutable(frames[0])
		}
		s.dropHWM.Add(1)
		return nil
	}
	s.sent.Add(1)
	return nil
}

// SendWait is Send for a ROUTER that waits, rather than drops, when the
// destination peer's queue is full (its HWM, SendQueueBytes or its fair
// share of SendTotalBytes): it returns once the message is queued, when ctx
// is done (ctx's error), when the socket closes (ErrClosed), or, when the
// identity is not connected or disconnects while SendWait waits, with an
// error matching ErrUnroutable (whatever Options.RouterDropUnroutable says: the caller
// asked to know). It waits only for that one peer: a caller serving many
// peers runs one SendWait per peer (package kvevents' replay runs one
// goroutine per replay client), and bounds the wait with ctx or with
// Options.WriteTimeout, which disconnects a peer that reads nothing. Other
// socket types return an error.
func (s *Socket) SendWait(ctx context.Context, frames ...[]byte) error {
	if s.kind != kRouter {
		return errNotSupported
	}
	if len(frames) < 2 {
		return errRouterFrames
	}
	for {
		if s.closed.Load() {
			return ErrClosed
		}
		s.mu.RLock()
		p := s.byID[string(frames[0])]
		s.mu.RUnlock()
		if p == nil || p.isClosed() {
			return &unroutableError{Identity: slices.Clone(frames[0])}
		}
		if p.enqueueCounted(nil, false, frames[1:], false, false) {
			s.sent.Add(1)
			return nil
		}
		ch := s.spaceChan()
		s.waiters.Add(1)
		if p.enqueueCounted(nil, false, frames[1:], false, false) {
			s.waiters.Add(-1)
			s.sent.Add(1)
			return nil
		}
		select {
		case <-ch:
			s.waiters.Add(-1)
		case <-p.done:
			s.waiters.Add(-1)
		case <-ctx.Done():
			s.waiters.Add(-1)
			return ctx.Err()
		case <-s.ctx.Done():
			s.waiters.Add(-1)
			return ErrClosed
		}
	}
}

func (s *Socket) unroutable(id []byte) error {
	if s.opts.RouterDropUnroutable {
		s.dropUnr.Add(1)
		return nil
	}
	return &unroutableError{Identity: slices.Clone(id)}
}

func (p *peerConn) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// sendRR queues frames on the next peer with room, waiting when there is
// none.
func (s *Socket) sendRR(ctx context.Context, req bool, frames [][]byte) error {
	for {
		if s.tryRR(req, frames) {
			return nil
		}
		ch := s.spaceChan()
		s.waiters.Add(1)
		if s.tryRR(req, frames) {
			s.waiters.Add(-1)
			return nil
		}
		select {
		case <-ch:
			s.waiters.Add(-1)
		case <-ctx.Done():
			s.waiters.Add(-1)
			return ctx.Err()
		case <-s.ctx.Done():
			s.waiters.Add(-1)
			return ErrClosed
		}
	}
}

func (s *Socket) tryRR(req bool, frames [][]byte) bool {
	peers := *s.snap.Load()
	n := uint64(len(peers))
	if n == 0 {
		return false
	}
	start := s.rr.Add(1) - 1
	for i := uint64(0); i < n; i++ {
		p := peers[(start+i)%n]
		if req {
			s.reqMu.Lock()
			ok := p.enqueue(nil, true, frames)
			if ok {
				s.reqWaiting = true
				s.reqPeer = p
			}
			s.reqMu.Unlock()
			if ok {
				s.sent.Add(1)
				return true
			}
			continue
		}
		if p.enqueue(nil, false, frames) {
			if i > 0 {
				// Resume the rotation after the peer actually used.
				s.rr.Store(start + i + 1)
			}
			s.sent.Add(1)
			return true
		}
	}
	return false
}

// fanOut queues frames on every peer (XPUB: every matching subscriber),
// dropping and counting for peers whose queue is full.
// share keeps the last frame by reference (SendShared).
func (s *Socket) fanOut(frames [][]byte, filter, share bool) {
	peers := *s.snap.Load()
	var scratch *[]*peerConn
	if filter {
		// The index finds the matching subscribers at a cost that does
		// not grow with the number of topics (see topicIndex).
		scratch = s.matchPool.Get().(*[]*peerConn)
		peers = s.topicIdx.match(frames[0], (*scratch)[:0])
		defer func() {
			clear(peers)
			if cap(peers) <= 4096 {
				*scratch = peers[:0]
				s.matchPool.Put(scratch)
			}
		}()
	}
	for _, p := range peers {
		if p.enqueueCounted(nil, false, frames, true, share) {
			s.sent.Add(1)
		} else if !p.isClosed() {
			s.dropHWM.Add(1)
		}
	}
}

func (s *Socket) sendReq(ctx context.Context, frames [][]byte) error {
	s.reqMu.Lock()
	if s.reqWaiting || s.reqSending {
		s.reqMu.Unlock()
		return errState
	}
	s.reqSending = true
	s.reqMu.Unlock()
	err := s.sendRR(ctx, true, frames)
	s.reqMu.Lock()
	s.reqSending = false
	s.reqMu.Unlock()
	return err
}

// reqAccept decides whether a REQ accepts a message from p as the reply:
// only while a reply is awaited, and only from the peer the request went
// to. Anything else is dropped.
func (s *Socket) reqAccept(p *peerConn) bool {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	if !s.reqWaiting || s.reqPeer != p {
		return false
	}
	s.reqWaiting = false
	s.reqPeer = nil
	return true
}

func (s *Socket) reqCheckWaiting() error {
	s.reqMu.Lock()
	defer s.reqMu.Unlock()
	if !s.reqWaiting {
		return errState
	}
	return nil
}

// Reset abandons a REQ socket's outstanding request, typically after Recv
// timed out, so the next Send is allowed. The connection the request went
// to is closed (and, when dialed, reconnected after ReconnectMin), so a late
// reply to the abandoned request can never be taken for the reply to the
// next one. Reset on a REQ with nothing outstanding does nothing; on other
// socket types it returns an error.
func (s *Socket) Reset() error {
	if s.kind != kReq {
		return errNotSupported
	}
	s.reqMu.Lock()
	p := s.reqPeer
	waiting := s.reqWaiting
	s.reqWaiting = false
	s.reqPeer = nil
	s.reqMu.Unlock()
	if waiting && p != nil {
		p.close(errReset)
	}
	return nil
}

// Subscribe adds a subscription to topic (a prefix; empty means every
// message) on a SUB or XSUB socket and sends it to every connected
// publisher as "\x01topic". Subscriptions are counted: each Subscribe needs
// its own Unsubscribe. They are re-sent to every publisher that connects or
// reconnects later.
func (s *Socket) Subscribe(topic []byte) error {
	return s.changeSub(topic, true)
}

// Unsubscribe removes one count of a subscription made with Subscribe; when
// the count reaches zero "\x00topic" is sent to every connected publisher.
// Unsubscribing a topic not subscribed does nothing.
func (s *Socket) Unsubscribe(topic []byte) error {
	return s.changeSub(topic, false)
}

func (s *Socket) changeSub(topic []byte, add bool) error {
	if s.kind != kSub && s.kind != kXSub {
		return errNotSupported
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	i := slices.IndexFunc(s.subs, func(e subEntry) bool { return e.topic == string(topic) })
	var flag byte = 1
	if add {
		if i >= 0 {
			s.subs[i].count++
		} else {
			s.subs = append(s.subs, subEntry{topic: string(topic), count: 1})
		}
	} else {
		if i < 0 {
			return nil
		}
		s.subs[i].count--
		if s.subs[i].count > 0 {
			return nil
		}
		s.subs = slices.Delete(s.subs, i, i+1)
		flag = 0
	}
	idx := &subIndex{}
	for _, e := range s.subs {
		if e.topic == "" {
			idx.all = true
		}
		idx.topics = append(idx.topics, e.topic)
	}
	s.subIdx.Store(idx)
	msg := append([]byte{flag}, topic...)
	for _, p := range s.peers {
		p.queueCtrl("", msg)
	}
	return nil
}

// subscriptions returns a SUB/XSUB socket's current topics.
func (s *Socket) subscriptions() [][]byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([][]byte, 0, len(s.subs))
	for _, e := range s.subs {
		out = append(out, []byte(e.topic))
	}
	return out
}
