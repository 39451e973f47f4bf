package kvindex_test

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread (RUSAGE_THREAD),
// and false where that is not available. The caller locks its goroutine
// to its thread.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
