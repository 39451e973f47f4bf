package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/socket"
)

// finishReplay delivers what the buffer holds and reports what is still
// missing as lost, once the replay attempts are spent (so.mu held).
func (so *source) finishReplay() error {
	if so.proving {
		// No replay proved continuity: what the new connection brings is
		// applied, the source's entries uncertain.
		to := so.maxSeen + 1
		if len(so.buf) > 0 {
			to = so.buf[0].seq
		}
		so.sub.log.line(logProof, so.sub.cfg.Logger, "kvevents: continuity unproven (the replay could not show the last delivered batch): entries uncertain",
			"source", so.src.Name, "last_seq", so.pos.Seq, "last_digest", hex64(so.pos.Digest), "next", so.next, "to", to)
		if err := so.unproven(so.next, to); err != nil {
			return err
		}
	}
	for {
		if err := so.advance(); err != nil {
			return err
		}
		if len(so.buf) == 0 {
			break
		}
		if err := so.lose(so.next, so.buf[0].seq); err != nil {
			return err
		}
	}
	if so.next <= so.maxSeen {
		if err := so.lose(so.next, so.maxSeen+1); err != nil {
			return err
		}
	}
	so.replaying = false
	so.dropBuf()
	return nil
}

// whyUnreachable starts the reason of a replay whose request could not be
// sent: no replay server answered the connection within ReplayTimeout.
const whyUnreachable = "no replay server: "

// replay recovers the source's hole(s) for gen, off the receive path: one
// replay session after another, each waiting out the source's back-off
// before it asks for a slot, until nothing seen live is missing, the
// attempts are spent (the rest is then reported lost), or the source stops
// or restarts (gen changes).
func (so *source) replay(ctx context.Context, gen uint64) {
	defer so.wg.Done()
	cfg := &so.sub.cfg
	attempts := 0
	// leadFrom is the start of the last replay that began past next:
	// such a replay is asked once more before [next, first reply) is
	// reported lost (replies dropped at the start, not a bounded buffer).
	leadFrom, leadSeen := uint64(0), false
	// lastProgress bounds the retries in time too: a source whose replay
	// server is gone is not kept stale for ReplayAttempts × (back-off +
	// ReplayTimeout) when that passes ReplayDeadline.
	lastProgress := time.Now()
	for {
		so.lock()
		wait := time.Until(so.replayAfter)
		so.unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		hold, err := so.sub.slots.acquire(ctx)
		if err != nil {
			return
		}
		so.lock()
		if so.gen != gen {
			so.unlock()
			hold.release()
			return
		}
		// A continuity proof replays from the last delivered batch (its
		// reply is compared with what was kept), anything else from the
		// next one.
		from, next0, proving := so.next, so.next, so.proving
		if proving {
			from = so.pos.Seq
		}
		so.unlock()
		so.count(func(st *SourceStats) { st.Replays++ })
		ok, why, lead := so.session(hold.ctx, gen, from, leadSeen && leadFrom == from)
		preempted := hold.wasPreempted() && ctx.Err() == nil
		hold.release()
		so.lock()
		if so.gen != gen || ctx.Err() != nil {
			so.unlock()
			return
		}
		if err := so.advance(); err != nil {
			so.unlock()
			return
		}
		progress := so.next > next0 || proving && !so.proving
		switch {
		case lead:
			leadFrom, leadSeen = from, true
		case preempted:
			so.count(func(st *SourceStats) { st.Preempted++ })
		case ok && progress:
			so.failures = 0
		default:
			if ok {
				why = "the replay ended without the batches seen live (" + fmt.Sprint(from) + " on)"
			}
			so.failures++
			d := cfg.ReplayBackoff << min(so.failures-1, 16)
			so.replayAfter = time.Now().Add(min(d, cfg.ReplayBackoffMax))
			so.sub.log.line(logReplay, cfg.Logger, "kvevents: replay incomplete", "source", so.src.Name,
				"endpoint", so.src.Replay, "from", from, "why", why, "attempt", attempts+1, "of", cfg.ReplayAttempts)
		}
		switch {
		case lead:
		case progress || preempted:
			attempts = 0
			lastProgress = time.Now()
		default:
			attempts++
		}
		if so.caughtUp() {
			so.replaying = false
			so.dropBuf()
			so.unlock()
			return
		}
		// A replay server that cannot be reached at all is not asked
		// again for this hole (nothing can be recovered from it, and
		// retrying would hold the source's delivery back): as before.
		unreachable := !preempted && strings.HasPrefix(why, whyUnreachable)
		if unreachable || attempts >= cfg.ReplayAttempts || attempts > 0 && time.Since(lastProgress) >= cfg.ReplayDeadline {
			_ = so.finishReplay()
			so.unlock()
			return
		}
		so.unlock()
	}
}

// session sends one replay request for [from, ...) and applies the
// replies. It reports whether the replay ended properly (the end marker,
// or caught up with the live stream, with no reply missing on the way)
// and, if not, why. Replies beyond the highest live sequence number seen,
// or at or below the previous reply's, are refused and never move next.
//
// A replay whose first reply is past next ends with lead set, unless
// acceptLead: the caller asks once more, and only a second replay that
// starts past the same next makes [next, first reply) lost.
func (so *source) session(ctx context.Context, gen, from uint64, acceptLead bool) (ok bool, why string, lead bool) {
	cfg := &so.sub.cfg
	opts := cfg.Socket
	opts.OnEvent = nil
	d, err := socket.New("DEALER", opts)
	if err != nil {
		return false, err.Error(), false
	}
	// Shutdown: the source's goroutines (Run waits for them) include what
	// its replay sockets run. This goroutine runs no callback of d's.
	defer d.Shutdown(context.Background())
	if err := d.Dial(so.src.Replay); err != nil {
		return false, err.Error(), false
	}
	total, cancel := context.WithTimeout(ctx, cfg.ReplayDeadline)
	defer cancel()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], from)
	sctx, scancel := context.WithTimeout(total, cfg.ReplayTimeout)
	err = d.Send(sctx, []byte{}, req[:])
	scancel()
	if err != nil {
		return false, whyUnreachable + err.Error(), false
	}
	topic := cfg.Topic
	first, last := true, uint64(0)
	for {
		rctx, rcancel := context.WithTimeout(total, cfg.ReplayTimeout)
		msg, err := d.Recv(rctx)
		rcancel()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return false, "stopped: " + context.Cause(ctx).Error(), false
			case total.Err() != nil:
				return false, "past the replay deadline " + cfg.ReplayDeadline.String(), false
			}
			return false, "silent for the replay timeout " + cfg.ReplayTimeout.String(), false
		}
		seq, payload, end, err := parseReply(msg.Frames, topic, cfg.MaxPayload)
		if err != nil {
			so.replayDrop(decodeguard.ReasonOf(err), err, msg.Frames)
			continue
		}
		if end {
			if seq == replayErrorSeq {
				return false, "the publisher sent the replay error marker (it dropped replies)", false
			}
			return true, "", false
		}
		so.lock()
		if so.gen != gen {
			so.unlock()
			return true, "", false
		}
		if ms := so.maxSeen; seq > ms {
			// The publisher cannot have held a batch newer than the live
			// stream has shown when it answered: taking it would make every
			// live batch up to it look like a duplicate. Refuse it (if it
			// is real, the live stream brings it).
			so.unlock()
			so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d past the live stream's %d", seq, ms), msg.Frames)
			continue
		}
		if !first && seq <= last {
			so.unlock()
			so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d not after the previous reply's %d", seq, last), msg.Frames)
			return false, fmt.Sprintf("replies out of order (%d after %d)", seq, last), false
		}
		if so.proving {
			switch {
			case seq < so.pos.Seq:
				so.unlock()
				so.replayDrop(decodeguard.ReasonValidate, fmt.Errorf("kvevents: replayed seq %d before the requested %d", seq, from), msg.Frames)
				continue
			case seq == so.pos.Seq:
				got := payloadDigest(payload)
				if got != so.pos.Digest {
					// A Handler error has ended Run (emit reported it).
					_ = so.newRun(got)
					so.unlock()
					return true, "", false
				}
				so.proving = false
				so.count(func(st *SourceStats) { st.ContinuityProven++ })
				so.sub.log.line(logProof, cfg.Logger, "kvevents: continuity proven after a new connection", "source", so.src.Name,
					"seq", seq, "digest", hex64(got), "live_seq", so.connSeq)
				first, last = false, seq
				err = so.advance()
				caught := so.caughtUp()
				so.unlock()
				if err != nil || caught {
					return true, "", false
				}
				continue
			case !acceptLead:
				so.unlock()
				return false, "", true
			default:
				// The publisher no longer holds the last delivered
				// batch: no proof, what it holds is applied, the
				// source's entries uncertain.
				to := seq
				if len(so.buf) > 0 && so.buf[0].seq < to {
					to = so.buf[0].seq
				}
				so.sub.log.line(logProof, cfg.Logger, "kvevents: continuity unproven (the publisher no longer holds the last delivered batch): entries uncertain",
					"source", so.src.Name, "last_seq", so.pos.Seq, "last_digest", hex64(so.pos.Digest), "first_replayed", seq, "live_seq", so.connSeq)
				if err = so.unproven(so.next, to); err == nil {
					if err = so.advance(); err == nil && seq == so.next {
						err = so.deliver(seq, payload, true)
					}
				}
				first, last = false, seq
				if err == nil {
					err = so.advance()
				}
				caught := so.caughtUp()
				so.unlock()
				if err != nil || caught {
					return true, "", false
				}
				continue
			}
		}
		if err := so.advance(); err != nil {
			so.unlock()
			return true, "", false
		}
		switch {
		case seq < so.next:
			so.count(func(st *SourceStats) { st.Duplicates++ })
		case seq == so.next:
			err = so.deliver(seq, payload, true)
		case first && !acceptLead:
			so.unlock()
			return false, "", true
		case first:
			// The replay starts past next: the publisher no longer holds
			// [next, seq) (its buffer is bounded); that much is lost.
			to := seq
			if len(so.buf) > 0 && so.buf[0].seq < to {
				to = so.buf[0].seq
			}
			if err = so.lose(so.next, to); err == nil {
				if err = so.advance(); err == nil && seq == so.next {
					err = so.deliver(seq, payload, true)
				}
			}
		default:
			// A hole inside the replies: the publisher dropped some (its
			// queue for us was full). Retry from next; nothing is lost.
			n := so.next
			so.unlock()
			return false, fmt.Sprintf("replies missing from %d (next reply %d)", n, seq), false
		}
		first, last = false, seq
		if err == nil {
			err = so.advance()
		}
		caught := so.caughtUp()
		so.unlock()
		if err != nil || caught {
			return true, "", false
		}
	}
}

// newRun handles a continuity proof that found another run at the kept
// seq (so.mu held, called by the replay goroutine): an UpdateReset, then
// delivery from 0 by a new replay (the live batches buffered are the new
// run's, and kept).
func (so *source) newRun(got uint64) error {
	so.countReset("digest")
	so.sub.log.line(logReset, so.sub.cfg.Logger, "kvevents: publisher is another run (digest differs at the last delivered seq): reset",
		"source", so.src.Name, "seq", so.pos.Seq, "kept_digest", hex64(so.pos.Digest), "replayed_digest", hex64(got), "live_seq", so.connSeq)
	so.havePos, so.proving = false, false
	err := so.emit(Update{Kind: UpdateReset, Seq: so.connSeq})
	so.cancelReplay()
	so.next = 0
	so.startReplay()
	return err
}

func (so *source) replayDrop(r decodeguard.Reason, err error, frames [][]byte) {
	if r == decodeguard.ReasonNone {
		r = decodeguard.ReasonValidate
	}
	so.count(func(st *SourceStats) { st.Dropped[r]++ })
	var last []byte
	if len(frames) > 0 {
		last = frames[len(frames)-1]
	}
	so.sub.log.drop(r, so.src.Name, 0, err, last)
}
