package main

import (
	"os"
	"runtime/debug"
)

// heapSlack is what a command allows its heap beyond the budgets its
// memory limit is derived from: decoded batches, the runtime, the metrics
// endpoint.
const heapSlack = 64 << 20

// kvEventsMemLimit is kv-events' soft memory limit for a subscriber whose
// sockets have maxMsg as Guard.MaxMessageSize (0: the default): twice the
// Subscriber's MemoryBudget (the live batches buffered during replays and
// the messages being received share that budget, and fair-share reads may
// pass it, never twice it: kvevents.Config.MemoryBudget) plus heapSlack.
// The budget is kvevents' default, 128 MiB, raised to twice the largest
// message (64 MiB of payload plus 64 KiB of framing unless maxMsg is
// larger), as kvevents.Config's fill does: 320 MiB by default.
func kvEventsMemLimit(maxMsg int64) int64 {
	msg := max(maxMsg, 64<<20+64<<10)
	budget := max(int64(128<<20), 2*msg)
	return 2*budget + heapSlack
}

// kvPublishMemLimit is kv-publish's soft memory limit: the live XPUB's and
// the replay ROUTER's send budgets (socket.Options.SendTotalBytes, 256 MiB
// each by default; the live payloads are shared among subscribers, a
// replay's replies are copies), the replay buffer (10,000 batches of the
// synthetic stream: 5.5 KB each, about 55 MiB) and heapSlack: 640 MiB by
// default.
func kvPublishMemLimit(sendTotal int64) int64 {
	if sendTotal <= 0 {
		sendTotal = 256 << 20
	}
	return 2*sendTotal + 64<<20 + heapSlack
}

// setMemoryLimit sets the Go runtime's soft memory limit to limit, unless
// GOMEMLIMIT is set (then the environment wins and 0 is returned), and
// returns the limit set and a function that restores the previous one.
// Without a limit the garbage collector lets the heap grow to about twice
// what is live (GOGC=100); with it, it collects sooner once the heap
// nears the limit (a soft limit: a live heap above it is not refused).
func setMemoryLimit(limit int64) (int64, func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, func() {}
	}
	prev := debug.SetMemoryLimit(limit)
	return limit, func() { debug.SetMemoryLimit(prev) }
}
