package kvevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
)

func (p *Publisher) badRequest(r decodeguard.Reason, msg string, n int) {
	p.smu.Lock()
	p.bad[r]++
	p.smu.Unlock()
	p.cfg.Logger.Debug("kvevents: bad replay request", "reason", r.String(), "detail", msg, "frames", n)
}

func (p *Publisher) serveReplay() {
	defer p.wg.Done()
	p.lastReplay = make(map[uint64]time.Time)
	p.refusedRun = make(map[uint64]int)
	p.hostTokens = make(map[string]*hostBucket)
	lastPrune := time.Now()
	for {
		msg, err := p.rep.Recv(p.ctx)
		if err != nil {
			return
		}
		id, start, err := parseRequest(msg.Frames)
		if err != nil {
			p.badRequest(decodeguard.ReasonOf(err), err.Error(), len(msg.Frames))
			continue
		}
		id = append([]byte(nil), id...)
		conn := msg.Peer.ID()
		p.amu.Lock()
		busy := p.active[conn]
		p.amu.Unlock()
		now := time.Now()
		if now.Sub(lastPrune) > time.Minute {
			p.pruneReplayConns(now)
			lastPrune = now
		}
		iv := p.cfg.ReplayInterval
		last, seen := p.lastReplay[conn]
		if busy || (iv > 0 && seen && now.Sub(last) < iv) || !p.hostAllows(msg.Peer, now) {
			// A flood of requests from one connection costs one small
			// reply each, not one replay each, and past
			// ReplayFloodLimit refusals in a row its connection.
			p.replaysRefused.Add(1)
			p.refusedRun[conn]++
			if lim := p.cfg.ReplayFloodLimit; lim > 0 && p.refusedRun[conn] > lim {
				// Requests it sent before the close may still come:
				// they find it closed and are dropped here.
				if p.rep.Disconnect(msg.Peer, decodeguard.NewError(decodeguard.ReasonPolicy,
					fmt.Sprintf("kvevents: replay client sent more than ReplayFloodLimit %d requests in a row while its replay ran or within ReplayInterval %v of it", lim, iv))) {
					p.replayFloods.Add(1)
				}
				continue
			}
			if !busy {
				// Not waited for: a flooder that does not read misses
				// it. While the connection's replay runs, no marker (it
				// would land inside that replay, which ends with its own).
				p.sendMarker(id, replayErrorSeq)
			}
			continue
		}
		delete(p.refusedRun, conn)
		p.lastReplay[conn] = now
		p.replays.Add(1)
		p.amu.Lock()
		p.active[conn] = true
		p.amu.Unlock()
		p.wg.Add(1)
		go p.replay(conn, id, start, p.seq.Load())
	}
}

// pruneReplayConns forgets the replay connections not served within the
// last minute (or ReplayInterval, if longer), so the maps hold only the
// connections served lately.
func (p *Publisher) pruneReplayConns(now time.Time) {
	for id, t := range p.lastReplay {
		if now.Sub(t) >= max(p.cfg.ReplayInterval, time.Minute) {
			delete(p.lastReplay, id)
			delete(p.refusedRun, id)
		}
	}
	for h, b := range p.hostTokens {
		if now.Sub(b.last) >= time.Minute {
			delete(p.hostTokens, h)
		}
	}
}

// hostBucket is one remote host's ReplaysPerHost token bucket.
type hostBucket struct {
	tokens float64
	last   time.Time
}

// hostAllows takes one of peer's host's ReplaysPerHost tokens, reporting
// false when there is none. Only a request that passes the other checks
// takes one (it is the last in the condition that calls it).
func (p *Publisher) hostAllows(peer *socket.Peer, now time.Time) bool {
	rate := float64(p.cfg.ReplaysPerHost)
	if rate <= 0 {
		return true
	}
	host := peer.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	b := p.hostTokens[host]
	if b == nil {
		b = &hostBucket{tokens: rate, last: now}
		p.hostTokens[host] = b
	}
	b.tokens = min(rate, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// entry returns the buffered batch seq, or ok false with the oldest
// sequence number the buffer still holds.
func (p *Publisher) entry(seq uint64) (e pubEntry, ok bool, oldest uint64) {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	if len(p.ring) == 0 {
		return pubEntry{}, false, p.seq.Load()
	}
	oldest = p.ring[p.head].seq
	if seq < oldest || seq-oldest >= uint64(len(p.ring)) {
		return pubEntry{}, false, oldest
	}
	return p.ring[(p.head+int(seq-oldest))%len(p.ring)], true, oldest
}

// replay sends one client the buffered batches from start up to end (the
// next sequence number when the request came), in order, then the end
// marker. It runs in its own goroutine, one per replay connection at a
// time, and waits for room in that client's queue (socket.SendWait): the
// client's in-flight replies are bounded by the ROUTER's HWM and byte
// bounds (its fair share of SendTotalBytes among the replay clients), a
// client that reads slowly gets its replay slowly, and one that never
// reads holds only its own goroutine until the ROUTER's write deadline
// disconnects it — never another client's replay or the live stream. A
// start older than the buffer yields what is left (as vLLM does: the client
// checks the first sequence number). If the replay cannot be completed
// (a batch left the buffer before it was sent, or a reply waited longer
// than the write deadline) it ends with the error marker (replayErrorSeq)
// instead, so a client never takes a replay with a hole for a complete one.
func (p *Publisher) replay(conn uint64, id []byte, start, end uint64) {
	defer p.wg.Done()
	defer func() {
		p.amu.Lock()
		delete(p.active, conn)
		p.amu.Unlock()
	}()
	var seqb [8]byte
	marker := replayEndSeq
	for seq := start; seq < end; seq++ {
		e, ok, oldest := p.entry(seq)
		if !ok {
			if seq == start && seq < oldest && oldest < end {
				seq = oldest - 1 // older than the buffer: what is left
				continue
			}
			marker = replayErrorSeq // it left the buffer mid-replay
			break
		}
		binary.BigEndian.PutUint64(seqb[:], e.seq)
		var err error
		if p.topicRep {
			err = p.sendWait(id, nil, p.topic, seqb[:], e.payload)
		} else {
			err = p.sendWait(id, nil, seqb[:], e.payload)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			marker = replayErrorSeq
			break
		}
		if err != nil {
			return // the client left, or the publisher closes
		}
		p.replayedBatches.Add(1)
	}
	if marker == replayErrorSeq {
		p.replaysIncompl.Add(1)
	}
	binary.BigEndian.PutUint64(seqb[:], marker)
	if p.topicRep {
		p.sendWait(id, nil, nil, seqb[:], nil)
	} else {
		p.sendWait(id, nil, seqb[:], nil)
	}
}

// sendWait queues one reply to id, waiting for room at most replayWait.
func (p *Publisher) sendWait(id []byte, frames ...[]byte) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.replayWait)
	defer cancel()
	return p.rep.SendWait(ctx, append([][]byte{id}, frames...)...)
}

// sendMarker sends the end (replayEndSeq) or error (replayErrorSeq) marker
// to id in the release's layout, without waiting (dropped, counted, if the
// client's queue is full).
func (p *Publisher) sendMarker(id []byte, seq uint64) error {
	var seqb [8]byte
	binary.BigEndian.PutUint64(seqb[:], seq)
	if p.topicRep {
		return p.rep.Send(p.ctx, id, nil, nil, seqb[:], nil)
	}
	return p.rep.Send(p.ctx, id, nil, seqb[:], nil)
}
