package socket

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/zmqguard/zmqguard/internal/zmtpaccess"
)

// reclaimer asks the runtime for a collection once departed connections
// released enough buffer memory (Options.ReclaimBytes). Shared by every
// socket of the process, so that many sockets losing peers at once cause
// at most one collection a second.
var reclaimer struct {
	pending atomic.Int64
	running atomic.Bool
	last    atomic.Int64 // UnixNano of the last collection it asked for
}

// reclaimEvery is the shortest time between two collections the reclaimer
// asks for.
const reclaimEvery = time.Second

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
	if reclaimer.pending.Add(n) < lim || !reclaimer.running.CompareAndSwap(false, true) {
		return
	}
	s.reclaims.Add(1)
	// Departures come in bursts (an attacker leaving closes all its
	// connections): wait reclaimDelay so one collection takes the burst.
	wait := max(reclaimDelay, time.Until(time.Unix(0, reclaimer.last.Load()).Add(reclaimEvery)))
	time.AfterFunc(wait, reclaim)
}

func reclaim() {
	reclaimer.pending.Store(0)
	runtime.GC()
	reclaimer.last.Store(time.Now().UnixNano())
	reclaimer.running.Store(false)
}

// releasedBytes is what a departed peer's reader lets go: its connection's
// read buffers, the message it was reading when the connection failed, and
// the slot it keeps between batches.
func (p *peerConn) releasedBytes(b *batch) int64 {
	n := zmtpaccess.ReadBufferBytes(p.conn) + p.first.footprint()
	if b != nil && b.n < len(b.slots) {
		n += b.slots[b.n].footprint()
	}
	return int64(n)
}
