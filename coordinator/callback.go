package coordinator

import (
	"github.com/zmqguard/zmqguard/internal/reentry"
	"github.com/zmqguard/zmqguard/loop"
)

// callOnDrop is the one place Config.OnDrop is called: Close looks for it
// on its caller's stack (reentry.Within) to know that it runs inside
// OnDrop, on a goroutine Run waits for, and must not wait for Run.
//
//go:noinline
func callOnDrop(f func(loop.Drop), d loop.Drop) { f(d) }

var onDropMarker = reentry.NewMarker(callOnDrop)

// onDrop is the OnDrop given to the receive loops: Config.OnDrop through
// callOnDrop, or nil.
func (c *Coordinator) onDrop() func(loop.Drop) {
	f := c.cfg.OnDrop
	if f == nil {
		return nil
	}
	return func(d loop.Drop) { callOnDrop(f, d) }
}
