package socket

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// Heartbeat rules of the interop tests, on both sides: the bound each side
// must meet is interval + timeout + 1 s (allowed 3× on a loaded machine).
const (
	ivlMS, tmoMS = 200, 600
	detectBound  = 3 * (ivlMS*time.Millisecond + tmoMS*time.Millisecond + time.Second)
)

// lineProc is a child process whose stdout lines the test reads.
type lineProc struct {
	cmd   *exec.Cmd
	lines chan string
	stdin interface{ Close() error }
	done  chan struct{}
	err   *strings.Builder
}

func startLines(t *testing.T, ctx context.Context, env []string, name string, args ...string) *lineProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &lineProc{cmd: cmd, lines: make(chan string, 100), stdin: stdin, done: make(chan struct{}), err: &strings.Builder{}}
	cmd.Stderr = p.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // nobody listening for chatter
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		stdin.Close()
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// await returns the first line starting with prefix (other lines are
// skipped), failing the test after d.
func (p *lineProc) await(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return strings.TrimSpace(strings.TrimPrefix(l, prefix))
			}
		case <-p.done:
			t.Fatalf("%s exited before %q: %s", p.cmd.Path, prefix, p.err.String())
		case <-tm.C:
			t.Fatalf("no %q from %s within %v", prefix, p.cmd.Path, d)
		}
	}
}

// quiet fails the test if p prints a line starting with prefix within d.
func (p *lineProc) quiet(t *testing.T, prefix string, d time.Duration) {
	t.Helper()
	tm := time.NewTimer(d)
	defer tm.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				t.Fatalf("%s said %q while it should not", p.cmd.Path, l)
			}
		case <-tm.C:
			return
		}
	}
}

// pyArgs runs the libzmq peer with the given heartbeat interval and
// timeout (ms) and a TTL of 2 s.
func pyArgs(mode, ep string, ivl, tmo int) []string {
	return []string{"testdata/heartbeat_peer.py", mode, ep, fmt.Sprint(ivl), fmt.Sprint(tmo), "2000", "60"}
}

func hbOpts(o *Options) {
	o.HeartbeatInterval = ivlMS * time.Millisecond
	o.HeartbeatTimeout = tmoMS * time.Millisecond
	o.HeartbeatTTL = 2 * time.Second
}

// A libzmq DEALER that PINGs only every 1.5 s (with a TTL of 2 s) stays
// connected to our ROUTER, whose own PINGs after 200 ms of silence it
// answers; once SIGSTOPped it is dropped within the bound.
func TestInteropHeartbeatWeDetectFrozenLibzmq(t *testing.T) {
	python := pypeer.Require(t, "zmq")
	ctx := testCtx(t, 60*time.Second)
	var log hbLog
	r := mustSocket(t, NewRouter, hbOpts, func(o *Options) { o.OnEvent = log.add })
	ep := mustBind(t, r)
	py := startLines(t, ctx, nil, python, pyArgs("dealer", ep, 1500, 6000)...)
	m, err := r.Recv(ctx)
	if err != nil || string(m.Frames[0]) != "py" || string(m.Frames[1]) != "hi" {
		t.Fatalf("first message %q %v", m.Frames, err)
	}
	// Idle for over 3 × (interval + timeout): neither side drops the other.
	py.quiet(t, "DISCONNECTED", 2500*time.Millisecond)
	st := r.Stats()
	if st.HeartbeatTimeouts != 0 || st.Disconnects != 0 || st.PongsReceived == 0 || st.PingsSent == 0 {
		t.Fatalf("idle libzmq peer: stats %+v (want pings and pongs, no disconnect)", st)
	}
	if err := py.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	poll.WaitForCtx(t, ctx, "heartbeat disconnect of the frozen libzmq peer", func() bool { _, ok := log.find(isHeartbeatTimeout); return ok })
	took := time.Since(stopped)
	t.Logf("zmqguard ROUTER noticed a SIGSTOPped libzmq DEALER after %v (interval %dms + timeout %dms)", took.Round(time.Millisecond), ivlMS, tmoMS)
	if took > detectBound {
		t.Fatalf("frozen peer noticed after %v, over %v", took, detectBound)
	}
}

// A libzmq ROUTER with heartbeats (200 ms / 600 ms) keeps our idle DEALER
// (in a helper process) connected on the strength of our PONGs, and drops
// it within the bound once it is SIGSTOPped.
func TestInteropHeartbeatLibzmqDetectsFrozenUs(t *testing.T) {
	python := pypeer.Require(t, "zmq")
	ctx := testCtx(t, 60*time.Second)
	py := startLines(t, ctx, nil, python, pyArgs("router", "tcp://127.0.0.1:0", ivlMS, tmoMS)...)
	port := py.await(t, "PORT", 20*time.Second)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := startLines(t, ctx, []string{"ZMQGUARD_HB_HELPER=tcp://127.0.0.1:" + port}, exe, "-test.run=^TestHeartbeatHelperProcess$")
	helper.await(t, "DIALED", 20*time.Second)
	py.await(t, "GOT", 20*time.Second)
	py.quiet(t, "DISCONNECTED", 2500*time.Millisecond)
	if err := helper.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	py.await(t, "DISCONNECTED", detectBound)
	t.Logf("libzmq ROUTER noticed a SIGSTOPped zmqguard DEALER after %v (interval %dms + timeout %dms)", time.Since(stopped).Round(time.Millisecond), ivlMS, tmoMS)
}

// TestHeartbeatHelperProcess is the zmqguard DEALER the test above runs in
// its own process (so that it can be frozen); it does nothing in a normal
// run.
func TestHeartbeatHelperProcess(t *testing.T) {
	ep := os.Getenv("ZMQGUARD_HB_HELPER")
	if ep == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := mustSocket(t, NewDealer, hbOpts, func(o *Options) { o.Identity = []byte("go") })
	mustDial(t, d, ep)
	if err := d.Send(ctx, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	fmt.Println("DIALED")
	// Stay until killed (or 60 s); print our own disconnects.
	for ctx.Err() == nil {
		if _, err := d.Recv(ctx); errors.Is(err, ErrClosed) {
			return
		}
	}
}

// Our PULL announces a TTL of 1 s in a PING while a libzmq PUSH is quiet;
// then the PUSH talks without pause and our PULL has nothing to send: our
// PINGs after each interval in which we sent nothing keep libzmq's TTL
// timer from expiring, so it keeps the connection.
func TestInteropTTLHonouredByLibzmq(t *testing.T) {
	python := pypeer.Require(t, "zmq")
	ctx := testCtx(t, 60*time.Second)
	pull := mustSocket(t, NewPull, func(o *Options) {
		o.HeartbeatInterval = ivlMS * time.Millisecond
		o.HeartbeatTimeout = tmoMS * time.Millisecond
		o.HeartbeatTTL = time.Second
	})
	ep := mustBind(t, pull)
	py := startLines(t, ctx, nil, python, pyArgs("pusher", ep, 0, 0)...)
	go func() {
		for {
			if _, err := pull.Recv(ctx); err != nil {
				return
			}
		}
	}()
	py.await(t, "CONNECTED", 20*time.Second)
	py.quiet(t, "DISCONNECTED", 3500*time.Millisecond)
	if st := pull.Stats(); st.Disconnects != 0 || st.PingsSent == 0 || st.Received < 50 {
		t.Fatalf("chatty libzmq PUSH with our TTL: stats %+v (want pings sent, data received, no disconnect)", st)
	}
}
