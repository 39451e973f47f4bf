//go:build unix

package enginecore

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time (all threads), so that a
// benchmark on a loaded machine can report CPU per operation, comparable
// with Python's time.process_time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
