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

// hwm is this process's peak resident set (VmHWM), in bytes.
func hwm() int64 {
	b, err := os.ReadFile("/proc/self/status")
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
