package socket

import (
	"runtime"
	"sync/atomic"
	"time"
)

// reclaimer asks the runtime for a collection once departed connections
// released enough buffer memory (Options.ReclaimBytes). Shared by every
// socket of the process, so that many sockets losing peers at once cause
// at most one collection a second.
var reclaimer struct {
	pending atomic.Int64
	running atomic.Bool
	last    atomic.Int64 // UnixNano of the last collection it asked for
	// gen numbers the collections scheduled, so that each socket whose
	// bytes one takes counts it once.
	gen atomic.Uint64
	// tail is set when the last collection was asked for by the
	// threshold: bytes let go soon after may ask for one more.
	tail atomic.Bool
}

// reclaimEvery is the shortest time between two collections the reclaimer
// asks for.
const reclaimEvery = time.Second

// reclaimTail is how long after a collection any bytes let go ask for
// another (see noteReleased).
const reclaimTail = 2 * time.Second

// reclaimDelay is how long after the threshold is passed the collection
// runs, so that one collection takes a burst of departures.
const reclaimDelay = 200 * time.Millisecond

// noteReleased records n bytes of buffers let go by a departed connection
// and, past ReclaimBytes, schedules a collection.
//
// Why: a process attacked by connections that each hold a large partial
// message has, at its last collection, a live heap of those buffers; its
// next collection is due when the heap doubles that. Once the attackers
// leave, nothing references the buffers, but a process that then allocates
// little does not reach that target, and the heap stays in use until the
// runtime's forced collection two minutes later (measured: 100 half-sent
// 1 MiB messages kept 136 MiB in use for as long as we watched; one
// runtime.GC returned it to the baseline).
func (s *Socket) noteReleased(n int64) {
	lim := s.opts.ReclaimBytes
	if lim <= 0 || n <= 0 {
		return
	}
	// Past the threshold, or the tail of a burst: bytes let go within
	// reclaimTail of a collection the threshold asked for get one more (a
	// single one, at least reclaimEvery later), so that the part of a
	// burst of departures that came after its collection is not left for
	// the runtime's two-minute one.
	full := reclaimer.pending.Add(n) >= lim
	tail := !full && reclaimer.tail.Load() && time.Since(time.Unix(0, reclaimer.last.Load())) < reclaimTail
	if !full && !tail {
		return
	}
	if !reclaimer.running.CompareAndSwap(false, true) {
		// A collection is scheduled (by this socket or another): it
		// takes these bytes too.
		s.countReclaim(reclaimer.gen.Load())
		return
	}
	reclaimer.tail.Store(full) // a tail collection has no tail
	s.countReclaim(reclaimer.gen.Add(1))
	// Departures come in bursts (an attacker leaving closes all its
	// connections): wait reclaimDelay so one collection takes the burst.
	wait := max(reclaimDelay, time.Until(time.Unix(0, reclaimer.last.Load()).Add(reclaimEvery)))
	time.AfterFunc(wait, reclaim)
}

// countReclaim counts collection gen in s's Stats.Reclaims, once.
func (s *Socket) countReclaim(gen uint64) {
	if s.reclaimGen.Swap(gen) != gen {
		s.reclaims.Add(1)
	}
}

// releaseHook returns the zmtpguard OnRelease hook of s's connections:
// buffers an open connection gives back (an idle peer's grown read buffer)
// count toward ReclaimBytes like a departed one's, so that 1,000 peers that
// went quiet after a burst do not keep their buffers in use until the
// runtime's next collection. user, the hook Options.Guard set, runs too.
func (s *Socket) releaseHook(user func(int)) func(int) {
	return func(n int) {
		s.noteReleased(int64(n))
		if user != nil {
			user(n)
		}
	}
}

func reclaim() {
	reclaimer.pending.Store(0)
	runtime.GC()
	reclaimer.last.Store(time.Now().UnixNano())
	reclaimer.running.Store(false)
}

// departedOverhead is what a departed peer lets go beside its read
// buffers and messages, at least: its write buffer (4 KiB once small), its
// reader and writer state and its queues. Measured with bench/memattack
// -attack burst: 1,000 idle peers whose read buffers had shrunk to 4 KiB
// held about 25 MiB of heap, 25 KiB each. Without it, 1,000 peers leaving
// with small buffers released 4 MiB by the count, under ReclaimBytes, and
// their 29 MiB stayed in use.
const departedOverhead = 16 << 10

// releasedBytes is what a departed peer's reader lets go: its connection's
// read buffers, the message it was reading when the connection failed, the
// slot it keeps between batches, and departedOverhead.
func (p *peerConn) releasedBytes(b *batch) int64 {
	n := p.conn.ReadBufferBytes() + p.first.footprint() + departedOverhead
	if b != nil && b.n < len(b.slots) {
		n += b.slots[b.n].footprint()
	}
	return int64(n)
}
