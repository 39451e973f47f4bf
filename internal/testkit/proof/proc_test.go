package proof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
)

// proc is one zmqguard process started by a test: its stdout (the counters
// line) and its stderr (JSON log lines) are collected, and its exit is
// watched.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	stdout bytes.Buffer
	stderr []string // raw log lines, in order

	started chan map[string]any // the first log line whose msg is the start message
	done    chan struct{}       // closed when the process has exited
	waitErr error               // cmd.Wait's result, set before done closes
}

// lockedWriter is an io.Writer appending to a proc's stdout under its lock.
type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.stdout.Write(b)
}

// startProc starts `zmqguard --log-format json ARGS...` and waits until it
// logs startMsg (its "ready" line), whose fields it returns. ctx bounds the
// process's whole life: when it ends, the process is killed. The process is
// killed at the end of the test if it is still running then.
func startProc(t *testing.T, ctx context.Context, name, startMsg string, args ...string) (*proc, map[string]any) {
	t.Helper()
	p := &proc{
		name:    name,
		started: make(chan map[string]any, 1),
		done:    make(chan struct{}),
	}
	p.cmd = exec.CommandContext(ctx, zmqguardBin, append([]string{"--log-format", "json"}, args...)...)
	p.cmd.Stdout = lockedWriter{p}
	p.cmd.WaitDelay = 5 * time.Second
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go p.watch(stderr, startMsg)
	t.Cleanup(func() {
		if p.alive() {
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case fields := <-p.started:
		return p, fields
	case <-p.done:
		t.Fatalf("%s exited before it was ready (%v):\n%s", name, p.waitErr, p.logs())
	case <-timer.C:
		t.Fatalf("%s did not log %q within 30 s:\n%s", name, startMsg, p.logs())
	}
	return nil, nil
}

// watch reads the process's stderr to its end, then reaps the process.
func (p *proc) watch(stderr io.Reader, startMsg string) {
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.stderr = append(p.stderr, line)
		p.mu.Unlock()
		if !sent {
			var fields map[string]any
			if json.Unmarshal([]byte(line), &fields) == nil && fields["msg"] == startMsg {
				p.started <- fields
				sent = true
			}
		}
	}
	io.Copy(io.Discard, stderr) // a line over the scanner's limit: keep draining
	p.waitErr = p.cmd.Wait()
	close(p.done)
}

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// logs returns the stderr lines so far, for failure messages.
func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// logLines returns a copy of the stderr lines so far.
func (p *proc) logLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stderr...)
}

// stop sends SIGTERM, waits for the process to exit 0, checks its stderr for
// race reports and panics, and decodes the counters JSON line it printed on
// stdout into counters.
func (p *proc) stop(t *testing.T, counters any) {
	t.Helper()
	if !p.alive() {
		t.Fatalf("%s had already exited (%v):\n%s", p.name, p.waitErr, p.logs())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to %s: %v", p.name, err)
	}
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%s did not exit within 20 s of SIGTERM:\n%s", p.name, p.logs())
	}
	logs := p.logs()
	if strings.Contains(logs, "WARNING: DATA RACE") {
		t.Errorf("%s: the race detector reported a race:\n%s", p.name, logs)
	}
	if strings.Contains(logs, "panic:") || strings.Contains(logs, "fatal error:") {
		t.Errorf("%s panicked:\n%s", p.name, logs)
	}
	if p.waitErr != nil {
		t.Fatalf("%s exited with %v after SIGTERM, want status 0:\n%s", p.name, p.waitErr, logs)
	}
	p.mu.Lock()
	out := strings.TrimSpace(p.stdout.String())
	p.mu.Unlock()
	lines := strings.Split(out, "\n")
	last := lines[len(lines)-1]
	dec := json.NewDecoder(strings.NewReader(last))
	dec.DisallowUnknownFields()
	if err := dec.Decode(counters); err != nil {
		t.Fatalf("%s: the last stdout line is not its counters JSON (%v):\n%s", p.name, err, out)
	}
	t.Logf("%s counters: %s", p.name, last)
}

// coordProc is a running `zmqguard coordinator`.
type coordProc struct {
	*proc
	front, backOutput, backPublish string
}

// startCoordinator starts a coordinator for one engine on three free
// loopback ports, publishing stats every 200 ms even when nothing changes
// (so that the after-checks never wait for the 5 s idle period).
func startCoordinator(t *testing.T, ctx context.Context) *coordProc {
	t.Helper()
	p, f := startProc(t, ctx, "coordinator", "coordinator running", "coordinator",
		"--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0",
		"--engines", "1", "--idle-interval", "200ms")
	c := &coordProc{proc: p}
	c.front, _ = f["front"].(string)
	c.backOutput, _ = f["back_output"].(string)
	c.backPublish, _ = f["back_publish"].(string)
	if c.front == "" || c.backOutput == "" || c.backPublish == "" {
		t.Fatalf("coordinator's start line lacks its endpoints: %v", f)
	}
	return c
}

// listenerProc is a running `zmqguard handshake-listener`.
type listenerProc struct {
	*proc
	endpoint, hash, engineID string
}

// proofEngineID is the engine id the listeners serve.
const proofEngineID = "proof-engine-0"

// startListener starts a handshake listener on a free loopback port, serving
// rank (0, 0) only.
func startListener(t *testing.T, ctx context.Context) *listenerProc {
	t.Helper()
	p, f := startProc(t, ctx, "handshake-listener", "handshake listener serving", "handshake-listener",
		"--bind", "tcp://127.0.0.1:0", "--engine-id", proofEngineID)
	l := &listenerProc{proc: p, engineID: proofEngineID}
	l.endpoint, _ = f["endpoint"].(string)
	l.hash, _ = f["compatibility_hash"].(string)
	if l.endpoint == "" || len(l.hash) != 64 {
		t.Fatalf("listener's start line lacks its endpoint or hash: %v", f)
	}
	return l
}

// port returns the port of a "tcp://host:port" endpoint.
func port(t *testing.T, ep string) string {
	t.Helper()
	u, err := url.Parse(ep)
	if err != nil || u.Port() == "" {
		t.Fatalf("endpoint %q has no port", ep)
	}
	return u.Port()
}

// socketCounters is one coordinator socket in the counters line.
type socketCounters struct {
	Endpoint    string            `json:"endpoint"`
	Received    uint64            `json:"received"`
	Accepted    uint64            `json:"accepted"`
	Dropped     uint64            `json:"dropped"`
	Drops       map[string]uint64 `json:"drops"`
	StateDrops  map[string]uint64 `json:"state_drops"`
	Refused     map[string]uint64 `json:"refused"`
	Peers       int               `json:"peers"`
	Connects    uint64            `json:"connects"`
	Disconnects uint64            `json:"disconnects"`
	Sent        uint64            `json:"sent"`
	DroppedHWM  uint64            `json:"dropped_hwm"`
}

// coordCounters is the line `zmqguard coordinator` prints at SIGTERM.
type coordCounters struct {
	Started        bool              `json:"started"`
	Subscribed     int               `json:"subscribed"`
	Engines        int               `json:"engines"`
	Wave           int64             `json:"wave"`
	Running        bool              `json:"running"`
	Received       uint64            `json:"received"`
	Accepted       uint64            `json:"accepted"`
	Dropped        uint64            `json:"dropped"`
	Drops          map[string]uint64 `json:"drops"`
	Refused        map[string]uint64 `json:"refused"`
	StatsPublished uint64            `json:"stats_published"`
	WavePublished  uint64            `json:"wave_published"`
	ReadySent      uint64            `json:"ready_sent"`
	ReadyCoalesced uint64            `json:"ready_coalesced"`
	StartWaveCoal  uint64            `json:"start_wave_coalesced"`
	ControlDropped uint64            `json:"control_dropped"`
	SilentEngines  []struct {
		EngineIndex int    `json:"engine_index"`
		BackOutput  uint64 `json:"back_output"`
		BackPublish uint64 `json:"back_publish"`
	} `json:"silent_engines"`
	SilentUnknown    uint64         `json:"silent_unknown"`
	StatsResyncs     uint64         `json:"stats_resyncs"`
	WaveJumps        uint64         `json:"wave_jumps"`
	WaveResyncs      uint64         `json:"wave_resyncs"`
	NewerFields      uint64         `json:"newer_fields"`
	StartWaveSent    uint64         `json:"start_wave_sent"`
	StatsApplied     uint64         `json:"stats_applied"`
	StaleStats       uint64         `json:"stale_stats"`
	Resizes          uint64         `json:"resizes"`
	BackUnsubscribed uint64         `json:"back_unsubscribed"`
	Front            socketCounters `json:"front"`
	BackOutput       socketCounters `json:"back_output"`
	BackPublish      socketCounters `json:"back_publish"`
	// AcceptErrors sums failed accepts over the three sockets; Goroutines
	// is the count left after shutdown.
	AcceptErrors uint64 `json:"accept_errors"`
	Goroutines   int    `json:"goroutines"`
	// Peers dropped by the heartbeat rules, in total and by socket.
	HeartbeatTimeouts         uint64            `json:"heartbeat_timeouts"`
	HeartbeatTimeoutsBySocket map[string]uint64 `json:"heartbeat_timeouts_by_socket"`
	// Loads is each engine's last stats (coordinator.Stats.Loads, in
	// binaries that have it).
	Loads []struct {
		Waiting      int     `json:"waiting"`
		Running      int     `json:"running"`
		KVCacheUsage float64 `json:"kv_cache_usage"`
	} `json:"loads"`
}

// listenerCounters is the line `zmqguard handshake-listener` prints at
// SIGTERM.
type listenerCounters struct {
	Endpoint          string            `json:"endpoint"`
	Served            map[string]uint64 `json:"served"`
	ErrorReplies      uint64            `json:"error_replies"`
	Received          uint64            `json:"received"`
	Delivered         uint64            `json:"delivered"`
	Dropped           uint64            `json:"dropped"`
	Drops             map[string]uint64 `json:"drops"`
	Refused           map[string]uint64 `json:"refused"`
	Connects          uint64            `json:"connects"`
	Disconnects       uint64            `json:"disconnects"`
	DroppedUnroutable uint64            `json:"dropped_unroutable"`
	DroppedHWM        uint64            `json:"dropped_hwm"`
	AcceptErrors      uint64            `json:"accept_errors"`
	HeartbeatTimeouts uint64            `json:"heartbeat_timeouts"`
	Goroutines        int               `json:"goroutines"`
}

// maxExitGoroutines bounds the goroutines a process may report in its exit
// line: they are counted after its sockets (and debug endpoint, if any) were
// closed, so only the main goroutine, signal handling and the runtime's own
// remain in a clean shutdown. More means a goroutine outlived shutdown.
const maxExitGoroutines = 8

// checkExit checks what every exit line must show whatever the test did:
// a goroutine count in [1, maxExitGoroutines], and no failed accept (on
// loopback nothing exhausts descriptors).
func checkExit(t *testing.T, name string, goroutines int, acceptErrors uint64) {
	t.Helper()
	if goroutines < 1 || goroutines > maxExitGoroutines {
		t.Errorf("%s: %d goroutines left after shutdown, want 1..%d", name, goroutines, maxExitGoroutines)
	}
	if acceptErrors != 0 {
		t.Errorf("%s: %d failed accepts", name, acceptErrors)
	}
}

// stopBoth stops the listener and the coordinator (SIGTERM), decodes their
// counters lines and applies the checks every exit line must pass.
func stopBoth(t *testing.T, l *listenerProc, c *coordProc) (listenerCounters, coordCounters) {
	t.Helper()
	var lc listenerCounters
	l.stop(t, &lc)
	var cc coordCounters
	c.stop(t, &cc)
	lc.check(t)
	cc.check(t)
	return lc, cc
}

// check is checkExit for the coordinator's line, which must also name the
// engines that went silent: silent_engines is always present ([] when none).
func (c coordCounters) check(t *testing.T) {
	t.Helper()
	checkExit(t, "coordinator", c.Goroutines, c.AcceptErrors)
	if c.SilentEngines == nil {
		t.Error("coordinator: exit line lacks silent_engines")
	}
}

// check is checkExit for the listener's line.
func (l listenerCounters) check(t *testing.T) {
	t.Helper()
	checkExit(t, "listener", l.Goroutines, l.AcceptErrors)
}

// sum returns the total of a by-reason map.
func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// checkBalanced checks that a socket's received messages are each accepted
// or dropped, once, and that its drops by reason add up to its dropped count.
func (s socketCounters) checkBalanced(t *testing.T, name string) {
	t.Helper()
	if s.Received != s.Accepted+s.Dropped {
		t.Errorf("%s: received %d != accepted %d + dropped %d", name, s.Received, s.Accepted, s.Dropped)
	}
	if sum(s.Drops) != s.Dropped {
		t.Errorf("%s: drops by reason %v add up to %d, dropped is %d", name, s.Drops, sum(s.Drops), s.Dropped)
	}
}

// requireTool finds an external program the proof needs, from Debian
// package debianPackage. When it is missing the test is skipped with the
// missingpeer marker, except under CI (CI set), where .ci/run installs it
// and its absence is a failure.
func requireTool(t *testing.T, name, debianPackage string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	missingpeer.Skip(t, fmt.Sprintf("%s not found (%v)", name, err), debianPackage)
	return ""
}

// pythonPath is Debian's interpreter, which has python3-zmq and
// python3-msgpack (a pyenv or venv python on PATH may not).
const pythonPath = "/usr/bin/python3"

// requirePyzmq skips the test loudly (fails under CI) unless Debian's python3
// can import zmq and msgpack.
func requirePyzmq(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, pythonPath, "-c", "import zmq, msgpack").CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, exec.ErrNotFound) || os.IsNotExist(err) {
			out = bytes.TrimSpace(out)
			missingpeer.Skip(t, fmt.Sprintf("%s cannot import zmq and msgpack (%v: %s)", pythonPath, err, out[bytes.LastIndexByte(out, '\n')+1:]),
				"python3-zmq", "python3-msgpack")
			return
		}
		t.Fatalf("running %s: %v", pythonPath, err)
	}
}
