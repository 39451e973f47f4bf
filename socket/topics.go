package socket

import (
	"slices"
	"sync"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// topicRef is one subscriber's hold on a topic: its subscription count and
// its position in the topic's subscriber list (for O(1) removal).
type topicRef struct {
	count int32
	idx   int32
}

// topicIndex is an XPUB's subscriptions, indexed by topic, so that matching
// a publication costs one map lookup per distinct topic length no longer
// than the publication's first frame (plus one step per matching
// subscriber), whatever the number of topics; and a departure costs the
// departing subscriber's own topics. Every subscriber's topic map
// (peerConn.topics) is guarded by mu too.
type topicIndex struct {
	mu sync.RWMutex
	// subs lists the subscribers of each distinct topic ("" = every
	// message).
	subs map[string][]*peerConn
	// lens counts the distinct topics of each length; sorted holds those
	// lengths in increasing order.
	lens   map[int]int
	sorted []int
	// count and bytes are the (subscriber, topic) pairs held socket-wide
	// and the bytes of their topics; peers is the number of subscribers
	// holding at least one topic.
	count int
	bytes int64
	peers int
}

func newTopicIndex() *topicIndex {
	return &topicIndex{subs: make(map[string][]*peerConn), lens: make(map[int]int)}
}

// add registers p under topic. Call with mu held.
func (x *topicIndex) add(p *peerConn, topic string) {
	list := x.subs[topic]
	if len(list) == 0 {
		if x.lens[len(topic)]++; x.lens[len(topic)] == 1 {
			i, _ := slices.BinarySearch(x.sorted, len(topic))
			x.sorted = slices.Insert(x.sorted, i, len(topic))
		}
	}
	p.topics[topic] = topicRef{count: 1, idx: int32(len(list))}
	x.subs[topic] = append(list, p)
	if len(p.topics) == 1 {
		x.peers++
	}
	x.count++
	x.bytes += int64(len(topic))
	p.topicBytes += len(topic)
}

// remove unregisters p from topic (p must hold it). It reports whether
// the topic has no subscriber left. Call with mu held.
func (x *topicIndex) remove(p *peerConn, topic string) bool {
	ref := p.topics[topic]
	list := x.subs[topic]
	last := len(list) - 1
	if int(ref.idx) != last {
		moved := list[last]
		list[ref.idx] = moved
		r := moved.topics[topic]
		r.idx = ref.idx
		moved.topics[topic] = r
	}
	list[last] = nil
	list = list[:last]
	delete(p.topics, topic)
	if len(p.topics) == 0 {
		x.peers--
	}
	x.count--
	x.bytes -= int64(len(topic))
	p.topicBytes -= len(topic)
	if len(list) > 0 {
		if cap(list) > 64 && len(list) < cap(list)/4 {
			list = slices.Clip(slices.Clone(list))
		}
		x.subs[topic] = list
		return false
	}
	delete(x.subs, topic)
	if x.lens[len(topic)]--; x.lens[len(topic)] == 0 {
		delete(x.lens, len(topic))
		if i, ok := slices.BinarySearch(x.sorted, len(topic)); ok {
			x.sorted = slices.Delete(x.sorted, i, i+1)
		}
	}
	return true
}

// match appends to dst every subscriber with a topic that prefixes f, each
// once.
func (x *topicIndex) match(f []byte, dst []*peerConn) []*peerConn {
	x.mu.RLock()
	hits := 0
	for _, l := range x.sorted {
		if l > len(f) {
			break
		}
		if list, ok := x.subs[string(f[:l])]; ok {
			dst = append(dst, list...)
			hits++
		}
	}
	x.mu.RUnlock()
	if hits > 1 {
		// A subscriber holding several matching prefixes gets one copy.
		slices.SortFunc(dst, func(a, b *peerConn) int {
			switch {
			case a.info.id < b.info.id:
				return -1
			case a.info.id > b.info.id:
				return 1
			}
			return 0
		})
		dst = slices.Compact(dst)
	}
	return dst
}

// applySub applies an XPUB subscription message ("\x01topic" or
// "\x00topic") to p's topics. It returns false when the subscription is
// refused (counted as ReasonPolicy): p already holds maxTopicsPerPeer
// topics or maxTopicBytesPerPeer bytes, or the socket holds
// Options.XPubMaxTopics topics or XPubMaxTopicBytes bytes and p holds at
// least its fair share of them (the limit divided by the subscribers). So a
// subscription flood costs the flooding subscriber's own allowance: a
// subscriber with fewer topics than its fair share is never refused for
// the socket-wide limits.
func (p *peerConn) applySub(msg []byte) bool {
	s := p.s
	x := s.topicIdx
	topic := msg[1:]
	x.mu.Lock()
	defer x.mu.Unlock()
	if p.topics == nil { // departed
		return false
	}
	ref, held := p.topics[string(topic)]
	if msg[0] == 1 {
		if held {
			if ref.count < 1<<30 {
				ref.count++
			}
			p.topics[string(topic)] = ref
			return true
		}
		if len(p.topics) >= maxTopicsPerPeer || p.topicBytes+len(topic) > maxTopicBytesPerPeer || !x.socketRoom(p, len(topic), &s.opts) {
			s.viol[decodeguard.ReasonPolicy].Add(1)
			s.topicRefusals.Add(1)
			return false
		}
		x.add(p, string(topic))
		return true
	}
	if held {
		if ref.count > 1 {
			ref.count--
			p.topics[string(topic)] = ref
		} else {
			x.remove(p, string(topic))
		}
	}
	return true
}

// socketRoom reports whether the socket-wide topic limits let p add a topic
// of n bytes. Call with mu held.
func (x *topicIndex) socketRoom(p *peerConn, n int, o *Options) bool {
	subs := x.peers
	if len(p.topics) == 0 {
		subs++
	}
	if o.XPubMaxTopics > 0 && x.count+1 > o.XPubMaxTopics && len(p.topics)+1 > o.XPubMaxTopics/subs {
		return false
	}
	if o.XPubMaxTopicBytes > 0 && x.bytes+int64(n) > o.XPubMaxTopicBytes && int64(p.topicBytes+n) > o.XPubMaxTopicBytes/int64(subs) {
		return false
	}
	return true
}

// dropTopics unregisters every topic of a departed subscriber and returns
// the topics that no other subscriber holds, for the "\x00topic" messages.
// Its cost is p's own topics, not the socket's.
func (p *peerConn) dropTopics() []string {
	x := p.s.topicIdx
	x.mu.Lock()
	freed := int64(p.topicBytes) + topicOverhead*int64(len(p.topics))
	var gone []string
	for t := range p.topics {
		if x.remove(p, t) {
			gone = append(gone, t)
		}
	}
	p.topics = nil // released with the peer; nothing can add to it now
	x.mu.Unlock()
	p.s.noteReleased(freed)
	return gone
}

// topicOverhead estimates the bytes one held topic costs beyond its text:
// the subscriber's map entry, the string header and the index slot.
const topicOverhead = 96

// matches reports whether an XPUB subscriber wants a message whose first
// frame is f (tests and diagnostics; fan-out uses the index).
func (p *peerConn) matches(f []byte) bool {
	x := p.s.topicIdx
	x.mu.RLock()
	defer x.mu.RUnlock()
	for t := range p.topics {
		if len(t) <= len(f) && string(f[:len(t)]) == t {
			return true
		}
	}
	return false
}

// topicList returns p's subscribed topics ("" included if subscribed).
func (p *peerConn) topicList() []string {
	x := p.s.topicIdx
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(p.topics))
	for t := range p.topics {
		out = append(out, t)
	}
	return out
}
