package load

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessCPU is process pid's user and system CPU time: getrusage for this
// process, /proc/PID/stat (in USER_HZ ticks of 10 ms) for another; 0 when
// it cannot be read.
func ProcessCPU(pid int) time.Duration {
	if pid == os.Getpid() {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime is the 14th
	// field of the line, the 12th after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// Load1 is the machine's one-minute load average (0 when unknown).
func Load1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Stop ends a child process the benchmark started: it sends sig (none when
// nil: the caller has already asked, for example by closing its stdin),
// waits up to grace for it to exit, then kills it and reaps it.
func Stop(cmd *exec.Cmd, sig os.Signal, grace time.Duration) {
	if sig != nil {
		cmd.Process.Signal(sig)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}
