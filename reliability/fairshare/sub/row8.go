package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/zmqguard/zmqguard/kvevents"
)

// row8 runs the attacker as a child process and the subscriber here.
func row8(n int, d time.Duration) (any, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "row8-pub", "-sources", fmt.Sprint(n), "-for", (d + 10*time.Second).String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("attacker: %w", err)
	}
	var eps [][2]string
	if err := json.Unmarshal([]byte(line), &eps); err != nil {
		return nil, err
	}
	if binPath != "" {
		return row8CLI(n, d, eps)
	}
	base := hwm()
	tr := newTracker()
	sub, stop, err := startSub(tr.handle)
	if err != nil {
		return nil, err
	}
	defer stop()
	for i, e := range eps {
		if err := sub.Add(kvevents.Source{Name: fmt.Sprint("s", i), Live: e[0], Replay: e[1]}); err != nil {
			return nil, err
		}
	}
	time.Sleep(d) // the attack's duration (the measurement window)
	if heapProfile != "" {
		if err := writeHeap(heapProfile); err != nil {
			return nil, err
		}
	}
	st := sub.Stats()
	return map[string]any{"row": 8, "sources": n, "seconds": d.Seconds(), "rss_before_mib": base >> 20,
		"peak_rss_mib": hwm() >> 20, "buffer_overflows": st.BufferOverflows, "replays": st.Replays, "lost": st.Lost}, nil
}

func row8Pub(n int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	rep, err := replaySrv(ctx, trickle)
	if err != nil {
		return err
	}
	var lives []*live
	var eps [][2]string
	for range n {
		l, err := newLive()
		if err != nil {
			return err
		}
		lives = append(lives, l)
		eps = append(eps, [2]string{l.xp.Endpoint(), rep})
	}
	b, _ := json.Marshal(eps)
	fmt.Println(string(b))
	for _, l := range lives {
		if err := l.wait(); err != nil {
			return err
		}
	}
	payload := make([]byte, 8<<20)
	s := uint64(0)
	tk := time.NewTicker(500 * time.Millisecond)
	defer tk.Stop()
	for ctx.Err() == nil {
		for _, l := range lives {
			l.send(s, payload)
		}
		if s == 0 {
			s++ // a gap: every source replays from 1
		}
		s++
		select {
		case <-ctx.Done():
		case <-tk.C:
		}
	}
	return nil
}

// row8CLI measures `BIN kv-events` (its defaults, its memory limit)
// following the attacker's sources instead of an in-process Subscriber:
// its peak resident set (VmHWM) after d.
func row8CLI(n int, d time.Duration, eps [][2]string) (any, error) {
	var args []string
	for _, e := range eps {
		args = append(args, "--connect", e[0], "--replay", e[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"kv-events"}, args...)...)
	if err := cmd.Start(); err != nil { // stdout and stderr: /dev/null
		return nil, err
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	time.Sleep(d) // the attack's duration (the measurement window)
	peak := hwmOf(fmt.Sprint(cmd.Process.Pid))
	if peak == 0 {
		return nil, fmt.Errorf("kv-events exited early or /proc is unreadable")
	}
	return map[string]any{"row": 8, "cli": true, "sources": n, "seconds": d.Seconds(),
		"peak_rss_mib": peak >> 20, "gomemlimit_env": os.Getenv("GOMEMLIMIT")}, nil
}

// hwm is this process's peak resident set (VmHWM), in bytes.
func hwm() int64 { return hwmOf("self") }

// hwmOf is process pid's peak resident set (VmHWM), in bytes (0 if
// unknown).
func hwmOf(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(l, "VmHWM:"), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// writeHeap writes the heap profile (pprof's, after a collection) to path.
func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
