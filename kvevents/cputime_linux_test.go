//go:build linux

package kvevents

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling OS thread has used, so that a
// benchmark pinned to its thread can report CPU per operation, which a
// loaded machine does not inflate the way it inflates wall time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
