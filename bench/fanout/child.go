package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/socket"
)

// childStats is what the child reports on request.
type childStats struct {
	Peers          int    `json:"peers"`
	Received       uint64 `json:"received"`
	StatsPublished uint64 `json:"stats_published"`
	// Topics is the front socket's subscriptions held, -1 when the
	// coordinator's socket does not report it.
	Topics int `json:"topics"`
}

// setIfExists sets the named field of *opts when it exists with v's kind:
// the program builds against coordinators with and without the field.
func setIfExists(opts any, name string, v any) {
	f := reflect.ValueOf(opts).Elem().FieldByName(name)
	if f.IsValid() && f.CanSet() && f.Kind() == reflect.ValueOf(v).Kind() {
		f.Set(reflect.ValueOf(v).Convert(f.Type()))
	}
}

// runChild is the coordinator process: it prints its endpoints as a JSON
// line, then answers each "stats" line on in with a childStats line, and
// stops when in closes.
func runChild(in io.Reader, out io.Writer) error {
	si, err := time.ParseDuration(os.Getenv("FANOUT_STATS_INTERVAL"))
	if err != nil {
		return err
	}
	if path := os.Getenv("FANOUT_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var opts socket.Options
	setIfExists(&opts, "XPubMaxTopics", -1)
	setIfExists(&opts, "XPubMaxTopicBytes", int64(-1))
	setIfExists(&opts, "HeartbeatInterval", time.Duration(-1))
	c, err := coordinator.New(coordinator.Config{
		Front: "tcp://127.0.0.1:0", BackOutput: "tcp://127.0.0.1:0", BackPublish: "tcp://127.0.0.1:0",
		Engines: 1, StatsInterval: si, Socket: opts,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	enc := json.NewEncoder(out)
	enc.Encode(map[string]string{"front": c.FrontEndpoint(), "back_output": c.BackOutputEndpoint(), "back_publish": c.BackPublishEndpoint()})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		st := c.Stats()
		cs := childStats{Peers: st.Front.Peers, Received: st.Front.Received, StatsPublished: st.StatsPublished, Topics: -1}
		var sock map[string]any
		if b, err := json.Marshal(st.Front.Socket); err == nil && json.Unmarshal(b, &sock) == nil {
			if n, ok := sock["topics"].(float64); ok {
				cs.Topics = int(n)
			}
		}
		enc.Encode(cs)
	}
	cancel()
	c.Close()
	<-done
	return nil
}

// child is the running coordinator process.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	mu   sync.Mutex
	eps  map[string]string
	pid  int
	tick float64
}

func startChild(ctx context.Context, self string, cfg Config, stderr io.Writer) (*child, error) {
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), "FANOUT_ROLE=coordinator", "FANOUT_STATS_INTERVAL="+cfg.StatsInterval.String())
	cmd.Stderr = stderr
	cmd.WaitDelay = 10 * time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := &child{cmd: cmd, in: in, out: bufio.NewScanner(outp), pid: cmd.Process.Pid, tick: 100}
	if !ch.out.Scan() {
		ch.stop()
		return nil, fmt.Errorf("coordinator child printed no endpoints: %v", ch.out.Err())
	}
	if err := json.Unmarshal(ch.out.Bytes(), &ch.eps); err != nil {
		ch.stop()
		return nil, err
	}
	return ch, nil
}

func (ch *child) stats() (childStats, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var st childStats
	if _, err := io.WriteString(ch.in, "stats\n"); err != nil {
		return st, err
	}
	if !ch.out.Scan() {
		return st, fmt.Errorf("coordinator child: no stats line: %v", ch.out.Err())
	}
	return st, json.Unmarshal(ch.out.Bytes(), &st)
}

// cpu returns the child's user+system CPU seconds and its peak RSS (MiB).
func (ch *child) cpu() (float64, float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ch.pid))
	if err != nil {
		return -1, -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields from state (field 3): utime is field 14, stime 15.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	rss := -1.0
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", ch.pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				rss = kb / 1024
			}
		}
	}
	return (ut + st) / ch.tick, rss
}

func (ch *child) stop() {
	ch.in.Close()
	ch.cmd.Wait()
}
