package proof

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
)

// TestNmapVersionScan runs nmap's most thorough service detection
// (`-sV --version-all`: every probe of nmap-service-probes at every port)
// against the four ports of a running coordinator and listener. nmap's
// probes are not ZMTP, so the socket layer must refuse each connection before
// any receive loop sees a byte, and both processes must serve as before.
func TestNmapVersionScan(t *testing.T) {
	nmap := requireTool(t, "nmap", "nmap")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCoordinator(t, ctx)
	l := startListener(t, ctx)
	h := newHarness(t, ctx, c, l)
	e := h.startEngine(t, ctx)
	defer e.Close()
	h.afterChecks(t, ctx, "start-up")

	ports := []string{port(t, l.endpoint), port(t, c.front), port(t, c.backOutput), port(t, c.backPublish)}
	args := []string{"-sV", "--version-all", "--host-timeout", "120s", "-p", strings.Join(ports, ","), "127.0.0.1"}
	start := time.Now()
	out, err := exec.CommandContext(ctx, nmap, args...).CombinedOutput()
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("nmap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("nmap %s took %v", strings.Join(args, " "), elapsed.Round(time.Millisecond))
	if strings.Contains(string(out), "host timeout") {
		t.Fatalf("nmap gave up on the host (host timeout):\n%s", out)
	}
	for _, p := range ports {
		if !regexp.MustCompile(`(?m)^` + p + `/tcp\s+open\s`).Match(out) {
			t.Errorf("nmap did not report port %s open:\n%s", p, out)
		}
	}

	h.afterChecks(t, ctx, "nmap -sV --version-all")

	lc, cc := stopBoth(t, l, c)
	// nmap reached every socket and was refused by the socket layer; no
	// receive loop ever saw one of its bytes, so nothing was dropped there.
	for name, s := range map[string]socketCounters{"front": cc.Front, "back_output": cc.BackOutput, "back_publish": cc.BackPublish} {
		s.checkBalanced(t, name)
		if sum(s.Refused) == 0 {
			t.Errorf("%s: no refused connection counted: did nmap reach it? %+v", name, s)
		}
		if s.Dropped != 0 {
			t.Errorf("%s: a receive loop dropped %v: nmap's bytes got past the socket layer", name, s.Drops)
		}
	}
	if sum(lc.Refused) == 0 {
		t.Errorf("listener: no refused connection counted: did nmap reach it? %+v", lc)
	}
	if lc.Dropped != 0 || lc.Served["V3"] != uint64(h.sent.handshakes) {
		t.Errorf("listener: dropped %v, served %v; want no drops and %d V3 handshakes served", lc.Drops, lc.Served, h.sent.handshakes)
	}
}

// TestScanCommand runs `zmqguard scan` (one pass of the built-in hostile
// corpus: transport, envelope and payload probes) at the four ports. The
// scanner itself checks that each target completes a fresh ZMTP handshake
// after every probe; the after-checks then prove the services still work.
func TestScanCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCoordinator(t, ctx)
	l := startListener(t, ctx)
	h := newHarness(t, ctx, c, l)
	e := h.startEngine(t, ctx)
	defer e.Close()

	targets := []string{l.endpoint, c.front, c.backOutput, c.backPublish}
	cmd := exec.CommandContext(ctx, zmqguardBin, append([]string{"--log-format", "json", "scan", "--duration", "0", "--timeout", "15s"}, targets...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zmqguard scan: %v\n%s\n%s", err, out, stderr.String())
	}
	t.Logf("zmqguard scan --duration 0 (one pass at 4 targets) took %v", time.Since(start).Round(time.Millisecond))
	for _, ep := range targets {
		if !regexp.MustCompile(regexp.QuoteMeta(ep) + ` \(\w+\): [1-9]\d* pass\(es\) over the corpus, still answering`).Match(out) {
			t.Errorf("scan table has no 'still answering' line for %s:\n%s", ep, out)
		}
	}

	h.afterChecks(t, ctx, "zmqguard scan")

	lc, cc := stopBoth(t, l, c)
	// Every socket met both kinds of junk: connections the socket layer
	// refused, and messages its receive loop dropped.
	for name, s := range map[string]socketCounters{"front": cc.Front, "back_output": cc.BackOutput, "back_publish": cc.BackPublish} {
		s.checkBalanced(t, name)
		if sum(s.Refused) == 0 || s.Dropped == 0 {
			t.Errorf("%s: refused %v, drops %v: the scan should have caused both", name, s.Refused, s.Drops)
		}
	}
	if sum(lc.Refused) == 0 || lc.Dropped == 0 {
		t.Errorf("listener: refused %v, drops %v: the scan should have caused both", lc.Refused, lc.Drops)
	}
	if lc.Served["V3"] != uint64(h.sent.handshakes) {
		t.Errorf("listener served %v, want %d V3 handshakes (the after-checks')", lc.Served, h.sent.handshakes)
	}
	if cc.StaleStats != 0 || cc.BackOutput.Accepted != uint64(h.sent.stats) {
		t.Errorf("coordinator took %d stats messages (%d stale), want the %d valid ones",
			cc.BackOutput.Accepted, cc.StaleStats, h.sent.stats)
	}
}

// replaySocket is one target socket in the replay's summary: the valid
// messages sent to it and the junk, by kind.
type replaySocket struct {
	Valid int            `json:"valid"`
	Junk  map[string]int `json:"junk"`
}

// replaySummary is the last line testdata/seeds_replay.py prints.
type replaySummary struct {
	Passed int                     `json:"passed"`
	Sent   map[string]replaySocket `json:"sent"`
}

// replaySockets are the sockets the replay reports on.
var replaySockets = []string{"listener", "front", "back_output", "back_publish"}

// junkReason is the drop reason each kind of junk the replay sends must be
// counted under (the reason names of decodeguard.Reason).
var junkReason = map[string]string{
	// handshake listener
	"bare-dealer":  "envelope",     // [identity, body]: no empty delimiter
	"undecodable":  "decode",       // c1: not msgpack
	"truncated":    "decode",       // 93 c4 0c: an array cut short
	"wrong-arity":  "decode",       // (GET_META_MSG,)
	"wrong-type":   "decode",       // (GET_META_MSG, "0", 0)
	"unknown-rank": "unknown-rank", // (GET_META_MSG, 0, 7): answered with an error reply
	// coordinator back output
	"engine-wrong-type":  "decode", // engine_index a str
	"engine-undecodable": "decode", // c1 00
	"int-frame":          "decode", // 45: "Expected array, got int"
	// coordinator front publish
	"invalid-utf8":  "decode",   // a3 e0 80 80
	"map-keyed-map": "decode",   // 81 80 01
	"deep-nesting":  "oversize", // 91 x 20000, 01: over the front's 1 KiB frame limit
	// coordinator back publish
	"subscribe-topic":   "validate", // \x01probe: a subscriber that is not an engine
	"unsubscribe-topic": "validate", // \x00probe
}

// expectedDrops maps a replay summary to the drops each socket must count,
// by reason.
func expectedDrops(sent map[string]replaySocket) (map[string]map[string]uint64, error) {
	want := map[string]map[string]uint64{}
	for _, sock := range replaySockets {
		want[sock] = map[string]uint64{}
		for kind, n := range sent[sock].Junk {
			r, ok := junkReason[kind]
			if !ok {
				return nil, fmt.Errorf("the replay sent junk of kind %q, which this test does not know", kind)
			}
			want[sock][r] += uint64(n)
		}
	}
	return want, nil
}

// runReplay runs testdata/seeds_replay.py against the harness's fresh
// coordinator (no engine yet) and listener, requires all eight scenarios to
// pass, and returns its summary.
func runReplay(t *testing.T, ctx context.Context, h *harness) replaySummary {
	t.Helper()
	if h.c.alive() && h.sent.engineSubs > 0 {
		t.Fatal("runReplay needs a coordinator no engine has subscribed to yet")
	}
	script, err := filepath.Abs(filepath.Join("testdata", "seeds_replay.py"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, pythonPath, script, "--sync-stdin",
		"--listener", h.l.endpoint, "--front", h.c.front, "--back-output", h.c.backOutput,
		"--back-publish", h.c.backPublish, "--engine-id", h.l.engineID, "--compat-hash", h.l.hash)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", pythonPath, err)
	}
	waited := false
	defer func() { // on a failure below: stop the script and reap it
		if !waited {
			cancel()
			stdin.Close()
			cmd.Wait()
		}
	}()
	var lines []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line != "SYNC stray-subscribed" {
			lines = append(lines, line)
			continue
		}
		// Scenario 8: let the engine subscribe only once the coordinator
		// has dropped the stray subscription, so that it surely arrived
		// during start-up.
		poll.WaitFor(t, checkTimeout, "the coordinator to drop the stray subscription", func() bool {
			return slices.ContainsFunc(h.c.logLines(), isStrayDrop)
		})
		io.WriteString(stdin, "go\n")
	}
	stdin.Close()
	err = cmd.Wait()
	waited = true
	if len(lines) == 0 {
		lines = []string{""}
	}
	out := strings.Join(lines, "\n")
	for _, line := range lines[:len(lines)-1] {
		t.Log("seeds_replay.py: " + line)
	}
	if err != nil {
		t.Fatalf("seeds_replay.py: %v (want exit 0: all 8 scenarios pass)\n%s\n%s\ncoordinator log:\n%s\nlistener log:\n%s",
			err, out, stderr.String(), h.c.logs(), h.l.logs())
	}
	for n := 1; n <= 8; n++ {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, fmt.Sprintf("PASS %d ", n)) }) {
			t.Errorf("scenario %d did not report PASS", n)
		}
	}
	var s replaySummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Passed != 8 {
		t.Fatalf("seeds_replay.py summary %q: %v, passed %d", lines[len(lines)-1], err, s.Passed)
	}
	for _, sock := range replaySockets {
		if _, ok := s.Sent[sock]; !ok {
			t.Fatalf("seeds_replay.py summary has no %q entry: %v", sock, s.Sent)
		}
	}
	return s
}

// isStrayDrop reports whether a coordinator log line is the drop of a
// subscription with a topic on the back publish socket.
func isStrayDrop(line string) bool {
	var f map[string]any
	return json.Unmarshal([]byte(line), &f) == nil && f["component"] == "coordinator-back-publish" && f["reason"] == "validate"
}

// TestSeedReplay replays the seeds' eight scenarios with libzmq peers against
// a fresh coordinator and a listener, then runs the after-checks. It also
// checks, in the coordinator's log, that the stray subscription of scenario 8
// really arrived during start-up (before READY), which is what killed vLLM's
// coordinator.
func TestSeedReplay(t *testing.T) {
	requirePyzmq(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCoordinator(t, ctx)
	l := startListener(t, ctx)
	h := newHarness(t, ctx, c, l)

	runReplay(t, ctx, h)
	h.afterChecks(t, ctx, "the seed replay")

	stray, ready := -1, -1
	for i, line := range c.logLines() {
		if stray < 0 && isStrayDrop(line) {
			stray = i
		}
		if ready < 0 && strings.Contains(line, `"msg":"coordinator: all engines subscribed, READY sent"`) {
			ready = i
		}
	}
	if stray < 0 || ready < 0 || stray > ready {
		t.Errorf("the stray subscription's drop (log line %d) should come before READY (log line %d): "+
			"scenario 8 did not hit start-up\n%s", stray, ready, c.logs())
	}
}

// TestCountersAccount checks the processes' own accounting of the seed
// replay: after SIGTERM, each process's counters line must show every junk
// frame the replay sent dropped exactly once under its expected reason, every
// valid message (the replay's and the after-checks') accepted, and nothing
// else.
func TestCountersAccount(t *testing.T) {
	requirePyzmq(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startCoordinator(t, ctx)
	l := startListener(t, ctx)
	h := newHarness(t, ctx, c, l)

	rs := runReplay(t, ctx, h)
	h.afterChecks(t, ctx, "the seed replay")
	want, err := expectedDrops(rs.Sent)
	if err != nil {
		t.Fatal(err)
	}

	lc, cc := stopBoth(t, l, c)

	eq := func(what string, got, want uint64) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %d, want %d", what, got, want)
		}
	}
	eqDrops := func(what string, got, want map[string]uint64) {
		t.Helper()
		maps.DeleteFunc(want, func(_ string, n uint64) bool { return n == 0 })
		if !maps.Equal(got, want) {
			t.Errorf("%s: drops by reason %v, want exactly %v", what, got, want)
		}
	}
	junk := func(sock string) uint64 { return sum(want[sock]) }
	py := func(sock string) uint64 { return uint64(rs.Sent[sock].Valid) }

	// The listener: every request accounted for; only valid V3 handshakes
	// served; each unknown rank answered with an explicit error reply.
	eqDrops("listener", lc.Drops, want["listener"])
	eq("listener received", lc.Received, py("listener")+junk("listener")+uint64(h.sent.handshakes))
	eq("listener dropped", lc.Dropped, junk("listener"))
	eq("listener V3 served", lc.Served["V3"], py("listener")+uint64(h.sent.handshakes))
	eq("listener V1+V2 served", lc.Served["V1"]+lc.Served["V2"], 0)
	eq("listener error replies", lc.ErrorReplies, want["listener"]["unknown-rank"])
	eq("listener refused connections", sum(lc.Refused), 0)
	// Every client of the replay reads its replies: none was dropped at the
	// per-peer queue bound.
	eq("listener replies dropped at the HWM", lc.DroppedHWM, 0)

	// The coordinator, socket by socket.
	eqDrops("front", cc.Front.Drops, want["front"])
	eq("front accepted (subscriptions and wake-ups)", cc.Front.Accepted, py("front")+uint64(h.sent.frontSubs))
	eqDrops("back_output", cc.BackOutput.Drops, want["back_output"])
	eq("back_output accepted (stats and wave notices)", cc.BackOutput.Accepted, py("back_output")+uint64(h.sent.stats))
	eqDrops("back_publish", cc.BackPublish.Drops, want["back_publish"])
	subs := py("back_publish") + uint64(h.sent.engineSubs)
	// Besides the engines' subscriptions, the socket reports an
	// unsubscription when the last engine holding the topic leaves: those
	// are accepted and counted apart.
	eq("back_publish accepted (subscriptions + unsubscriptions)", cc.BackPublish.Accepted, subs+cc.BackUnsubscribed)
	// Re-subscriptions within Config.ReadyInterval of a READY share the next.
	eq("READY sent or coalesced (start-up + one per re-subscription)", cc.ReadySent+cc.ReadyCoalesced, subs)
	eq("stale stats", cc.StaleStats, 0)
	eq("control messages dropped", cc.ControlDropped, 0)
	eq("wave jumps refused", cc.WaveJumps, 0)
	for name, s := range map[string]socketCounters{"front": cc.Front, "back_output": cc.BackOutput, "back_publish": cc.BackPublish} {
		s.checkBalanced(t, name)
		eq(name+" state-machine drops", sum(s.StateDrops), 0)
		eq(name+" refused connections", sum(s.Refused), 0)
	}
	eq("coordinator dropped", cc.Dropped, junk("front")+junk("back_output")+junk("back_publish"))
	eq("coordinator received", cc.Received, cc.Front.Received+cc.BackOutput.Received+cc.BackPublish.Received)
	if !cc.Started {
		t.Error("coordinator never finished start-up")
	}
	if t.Failed() { // the logs say which peer was refused or dropped, and why
		t.Logf("coordinator log:\n%s", c.logs())
		t.Logf("listener log:\n%s", l.logs())
	}
}
