package zmtpguard

import (
	"errors"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// The Transport's message-body deadline and budget: the same rules as a
// Conn's (body.go), applied to the bytes a guardConn passes to zmq4.
//
// zmq4 allocates a whole frame when it reads the frame's header, so a
// frame's bytes are charged to Config.Budget before its header is handed to
// zmq4 (a stall happens there: zmq4 has not allocated, and TCP flow control
// slows the peer). When the message's last byte has passed, its bytes move
// from the connection to the budget's outside charge (as a Socket charges
// messages waiting for Recv: while they hold half the budget, readers only
// stall) until zmq4 asks for the next message's header, which it does only
// once it has handed the message to its queue.

// bodyWait arms the body deadline before a read inside a message that may
// wait on the network (fewer than need bytes buffered).
func (g *guardConn) bodyWait(need int) {
	if g.cfg.BodyTimeout > 0 && g.br.Buffered() < need {
		g.body.arm(g.cfg.BodyTimeout)
	}
}

// charge asks the budget for n more bytes of the current message.
func (g *guardConn) charge(n int64) error {
	if b := g.cfg.Budget; b != nil && n > 0 {
		return b.acquire(&g.body, n)
	}
	return nil
}

// messageDone runs when the last byte of a message has been handed to
// zmq4: the deadline stops, and the message's bytes stay charged, outside
// the connection, until zmq4 asks for the next one (nextMessage).
func (g *guardConn) messageDone() {
	g.body.disarm()
	markWork(g.work)
	b := g.cfg.Budget
	if b == nil || g.body.held == 0 {
		return
	}
	n := g.body.held
	b.release(&g.body)
	g.done.Add(n)
	b.Charge(n)
	if g.body.closed.Load() { // closeBody may have missed it
		if x := g.done.Swap(0); x != 0 {
			b.Charge(-x)
		}
	}
}

// nextMessage runs when zmq4 asks for a frame header: a complete message
// before it has been queued by zmq4, and its charge is returned.
func (g *guardConn) nextMessage() {
	if b := g.cfg.Budget; b != nil {
		if x := g.done.Swap(0); x != 0 {
			b.Charge(-x)
		}
	}
}

// readErr turns the error of a read cut short by the body deadline or by a
// budget eviction into its violation (reported, the connection closed), and
// returns what the message held to the budget.
func (g *guardConn) readErr(err error) error {
	if b := g.cfg.Budget; b != nil {
		b.release(&g.body)
	}
	var v *Violation
	if errors.As(err, &v) {
		return err // reported already
	}
	if g.body.evicted.Load() {
		return g.violate("read", violation(decodeguard.ReasonPolicy,
			"closed to free the transport's byte budget: this connection held the most bytes of unfinished messages past BudgetWait", g.total, nil))
	}
	if g.cfg.BodyTimeout > 0 && g.body.disarm() {
		return g.violate("read", violation(decodeguard.ReasonPolicy,
			"message body not complete within BodyTimeout ("+g.cfg.BodyTimeout.String()+") of its first frame header", g.total, nil))
	}
	return err
}

// closeBody runs when the connection closes: a stalled reader is woken (it
// then fails), and the charge of a complete message zmq4 never queued is
// returned.
func (g *guardConn) closeBody() {
	g.body.closed.Store(true)
	if b := g.cfg.Budget; b != nil {
		if x := g.done.Swap(0); x != 0 {
			b.Charge(-x)
		}
		b.wakeIfWaiting()
	}
}
