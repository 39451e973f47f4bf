package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/internal/ref/dppeer"
	"github.com/zmqguard/zmqguard/internal/ref/dpwire"
	"github.com/zmqguard/zmqguard/socket"
)

func quietSocket() socket.Options {
	o := socket.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	return o
}

// TestHelp: every command answers -h with a usage text listing its own
// flags and the global ones, on stdout, with exit code 0.
func TestHelp(t *testing.T) {
	want := map[string][]string{
		"demo":               {"-duration"},
		"coordinator":        {"-front", "-back-output", "-back-publish", "-engines", "-stats-interval", "-idle-interval", "-max-message-size", "-debug-addr", "-debug-allow-remote"},
		"handshake-listener": {"-bind", "-engine-id", "-pp-size", "-tp-size", "-compat-hash", "-debug-addr", "-debug-allow-remote"},
		"probe":              {"-pp", "-tp", "-variant", "-timeout"},
		"scan":               {"-duration"},
		"sink":               {"-bind", "-decode", "-count"},
		"outputs":            {"-bind", "-count", "-engines", "-vllm-version", "-max-message-size", "-max-frames", "-heartbeat-interval", "-metrics-addr"},
	}
	for name, flags := range want {
		code, out, _ := runBin(t, 20*time.Second, name, "-h")
		if code != 0 || !strings.Contains(out, "usage: zmqguard "+name) {
			t.Errorf("%s -h: exit %d\n%s", name, code, out)
		}
		for _, f := range append(flags, "-log-format", "-log-level") {
			if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
				t.Errorf("%s -h does not list %s:\n%s", name, f, out)
			}
		}
	}
	for _, name := range []string{"coordinator", "handshake-listener"} {
		_, out, _ := runBin(t, 20*time.Second, name, "-h")
		for _, doc := range []string{"/debug/zmqguard", "/debug/pprof/", `"goroutines"`, "dropped_hwm", "accept_errors"} {
			if !strings.Contains(out, doc) {
				t.Errorf("%s -h does not document %s:\n%s", name, doc, out)
			}
		}
	}
	code, out, _ := runBin(t, 20*time.Second, "-h")
	if code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for name := range want {
		if !strings.Contains(out, name) {
			t.Errorf("main usage does not list %s:\n%s", name, out)
		}
	}
	if code, out, _ := runBin(t, 20*time.Second, "help", "probe"); code != 0 || !strings.Contains(out, "usage: zmqguard probe") {
		t.Errorf("help probe: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"demo", "--no-such-flag"},
		{"demo", "--duration", "soon"},
		{"probe"},
		{"probe", "tcp://127.0.0.1:1", "--variant", "v9"},
		{"probe", "tcp://127.0.0.1:1", "--variant", "v2", "--pp", "1"},
		{"coordinator", "--front", "tcp://127.0.0.1:0"},
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0"},
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--compat-hash", "xyz"},
		// --debug-addr: not loopback (an empty host is every interface), or no port.
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--debug-addr", "192.0.2.1:6060"},
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--debug-addr", ":0"},
		{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--debug-addr", "127.0.0.1"},
		{"coordinator", "--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0",
			"--engines", "1", "--debug-addr", "0.0.0.0:0"},
		{"sink", "--bind", "tcp://127.0.0.1:0", "--decode", "json"},
		{"outputs"},
		{"outputs", "--bind", "tcp://127.0.0.1:0", "--vllm-version", "0.1"},
		{"sink", "--bind", "tcp://127.0.0.1:0", "--max-message-size", "lots"},
		{"scan"},
		{"scan", "tcp://192.0.2.1:5600"}, // not a local address: refused before any traffic
		{"demo", "--log-format", "xml"},
		{"--log-level", "loud", "demo"},
	} {
		code, _, errOut := runBin(t, 20*time.Second, args...)
		if len(args) == 0 {
			// No command at all: the command list.
			if code != 2 || !strings.Contains(errOut, "usage: zmqguard") {
				t.Errorf("no args: exit %d, want 2 with usage\n%s", code, errOut)
			}
			continue
		}
		// A usage error is one line that points to the help, not the help.
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		last := lines[len(lines)-1]
		if code != 2 || strings.Contains(errOut, "usage: zmqguard") || !strings.Contains(last, "-h')") ||
			strings.Count(errOut, "zmqguard") > 2+len(lines) {
			t.Errorf("%q: exit %d, want 2 with one line pointing to -h\n%s", args, code, errOut)
		}
		for _, l := range lines {
			if !strings.Contains(l, "level=") && l != last {
				t.Errorf("%q: more than one line of error:\n%s", args, errOut)
				break
			}
		}
	}
}

// TestVersion: "version" and "--version" print one line naming the module
// version and the Go version.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, _ := runBin(t, 20*time.Second, args...)
		if code != 0 || !strings.HasPrefix(out, "zmqguard ") || !strings.Contains(out, "go1.") || strings.Count(out, "\n") != 1 {
			t.Errorf("%q: exit %d, %q", args, code, out)
		}
	}
}

// TestScanJSONDeadPort: a dead port is reported as not answering at the
// start, as JSON with --json, without per-probe verdicts.
func TestScanJSONDeadPort(t *testing.T) {
	ep := closedEndpoint(t)
	code, out, _ := runBin(t, 30*time.Second, "scan", ep, "--json", "--duration", "1s")
	var rep struct {
		OK      bool `json:"ok"`
		Targets []struct {
			Unreachable string            `json:"unreachable"`
			Answering   bool              `json:"answering"`
			Probes      []json.RawMessage `json:"probes"`
		} `json:"targets"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("scan --json: %v\n%s", err, out)
	}
	if code != 1 || rep.OK || len(rep.Targets) != 1 || rep.Targets[0].Unreachable == "" || rep.Targets[0].Answering ||
		len(rep.Targets[0].Probes) != 0 {
		t.Fatalf("exit %d, %s", code, out)
	}
	code, out, _ = runBin(t, 30*time.Second, "probe", ep, "--json")
	var pr struct {
		OK         bool   `json:"ok"`
		FailedStep string `json:"failed_step"`
		RTT        string `json:"rtt"`
	}
	if err := json.Unmarshal([]byte(out), &pr); err != nil || code != 1 || pr.OK || pr.FailedStep != "connect" || pr.RTT == "" {
		t.Fatalf("probe --json: exit %d, %v\n%s", code, err, out)
	}
}

// TestSizeFlagUnits: size flags accept TiB-class units up to 1 TiB and
// refuse more, whatever the unit.
func TestSizeFlagUnits(t *testing.T) {
	for in, want := range map[string]int64{"1TiB": 1 << 40, "1T": 1 << 40, "1TB": 1e12, "0.5TiB": 1 << 39} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"2TiB", "1025GiB", "1.5TB", "2000000000000"} {
		if _, err := parseSize(bad); err == nil || !strings.Contains(err.Error(), "1TiB") {
			t.Errorf("parseSize(%q) = %v, want over 1TiB", bad, err)
		}
	}
}

// TestJSONLogDurations: JSON logs carry durations as strings, and the
// demo's status lines are JSON too.
func TestJSONLogDurations(t *testing.T) {
	var b bytes.Buffer
	l, err := newLogger(&b, "json", "info", false)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("x", "elapsed", 1500*time.Millisecond, "engine_id", logText("prefill-7"), "hostile", logText("a\x1b[2J"))
	if !strings.Contains(b.String(), `"elapsed":"1.5s"`) || !strings.Contains(b.String(), `"engine_id":"prefill-7"`) ||
		!strings.Contains(b.String(), `"hostile":"a\\x1b[2J"`) {
		t.Fatalf("%s", b.String())
	}
	b.Reset()
	sw := &statusWriter{w: &b, term: true, json: true}
	sw.Set("demo 1s/2s | drops 3")
	sw.Done()
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil || m["status"] != "demo 1s/2s | drops 3" {
		t.Fatalf("status %q: %v", b.String(), err)
	}
	if deathsText(0) != "every port answered after every probe" || deathsText(2) != "ports stopped answering after 2 probes" {
		t.Fatal(deathsText(0))
	}
}

// TestDemo runs the product tour for 2 s: exit 0, the final table on stdout,
// no crash, handshakes completed, every component still answering, and a
// JSON log of which no line has a key twice.
func TestDemo(t *testing.T) {
	code, out, errOut := runBin(t, 60*time.Second, "demo", "--duration", "2s", "--log-format", "json")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"COMPONENT", "coordinator front (XPUB)", "coordinator back-output (PULL)", "coordinator back-publish (XPUB)",
		"handshake listener (ROUTER)", "Drops by reason", "handshakes completed:", "crashes:               0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo table lacks %q:\n%s", want, out)
		}
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "coordinator ") && strings.Contains(line, "tcp://") || strings.HasPrefix(line, "handshake listener") {
			rows++
			if !strings.HasSuffix(strings.TrimSpace(line), " yes") {
				t.Errorf("component does not answer at the end: %q", line)
			}
		}
	}
	if rows != 4 || strings.Contains(out, "handshakes completed:  0 ") {
		t.Errorf("demo table shows %d component rows or no handshake:\n%s", rows, out)
	}
	if !strings.Contains(errOut, `"msg":"demo started"`) {
		t.Errorf("no JSON log on stderr:\n%s", errOut)
	}
	// One attribute per key: every stderr line is a JSON object, none has
	// a key twice (a library's component beside the demo's own name).
	t.Logf("%d JSON log lines checked", checkJSONLog(t, errOut))
}

// TestCoordinator runs the coordinator command with two Go engines and a
// front-end, sends it junk, then SIGTERM: exit 0 and one JSON line of
// counters with the junk counted by reason.
func TestCoordinator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "coordinator", "--engines", "2", "--log-format", "json",
		"--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0",
		"--stats-interval", "20ms", "--max-message-size", "64KiB", "--debug-addr", "localhost:0")
	front := p.logField("coordinator running", "front", 20*time.Second)
	backOut := p.logField("coordinator running", "back_output", time.Second)
	backPub := p.logField("coordinator running", "back_publish", time.Second)
	debugAddr := p.logField("coordinator running", "debug_addr", time.Second)

	fe, err := dppeer.DialFrontEnd(dppeer.FrontEndConfig{Front: front, Socket: quietSocket()})
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	var engines []*dppeer.Engine
	for range 2 {
		e, err := dppeer.DialEngine(dppeer.EngineConfig{BackPublish: backPub, BackOutput: backOut, Socket: quietSocket()})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		engines = append(engines, e)
	}
	for i, e := range engines {
		if err := e.WaitReady(ctx); err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
	}
	// Junk on the back output: a bare int (the seed that killed vLLM's
	// client), then stats from both engines.
	junk, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	junk.Dial(backOut)
	if err := junk.Send(ctx, []byte{0x45}); err != nil {
		t.Fatal(err)
	}
	for i, e := range engines {
		if err := e.SendStats(ctx, i, 5+i, 3, 0, 1); err != nil {
			t.Fatal(err)
		}
	}
	for {
		counts, _, _, err := fe.NextStats(ctx)
		if err != nil {
			t.Fatalf("front-end: %v\nstderr:\n%s", err, p.stderr)
		}
		if len(counts) == 2 && counts[0] == [2]int{5, 3} && counts[1] == [2]int{6, 3} {
			break
		}
	}
	// The debug endpoint serves the live counters, under the exit line's
	// names, and a goroutine count.
	d := getDebugVars(t, debugAddr)
	if num(d, "goroutines") < 1 || d["command"] != "coordinator" || num(d, "counters.engines") != 2 ||
		num(d, "counters.back_output.accepted") < 2 || num(d, "counters.goroutines") < 1 || num(d, "memstats.heap_inuse") <= 0 {
		t.Fatalf("/debug/zmqguard = %v", d)
	}
	checkPprof(t, debugAddr)
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("coordinator exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	m := p.jsonLine()
	if m["started"] != true || num(m, "engines") != 2 || num(m, "back_output.accepted") < 2 ||
		num(m, "drops.decode") < 1 || num(m, "back_output.drops.decode") < 1 || num(m, "stats_published") < 1 {
		t.Fatalf("unexpected counters: %s", p.stdout)
	}
	for _, sock := range []string{"front", "back_output", "back_publish"} {
		if s, ok := m[sock].(map[string]any); !ok || s["dropped_hwm"] == nil || s["endpoint"] == nil {
			t.Errorf("%s lacks its per-socket counters: %s", sock, p.stdout)
		}
	}
	checkExitGoroutines(t, m, p.stdout.String())
	if !refused(debugAddr) {
		t.Errorf("debug endpoint %s still accepts connections after the exit", debugAddr)
	}
}

// listener starts handshake-listener for engine "prefill-7" with 2 TP ranks
// and returns the process and its endpoint.
func listener(t *testing.T, ctx context.Context) (*proc, string) {
	t.Helper()
	// Flags after a flag-less position check: --bind before, the rest after.
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "prefill-7",
		"--tp-size", "2", "--log-format", "json")
	return p, p.logField("handshake listener serving", "endpoint", 20*time.Second)
}

// TestHandshakeListener fetches metadata from the listener command with the
// Go client, probes it, scans it, fetches again, then SIGTERM: exit 0 and one
// JSON line of counters.
func TestHandshakeListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p, ep := listener(t, ctx)
	opts := handshake.ClientOptions{ExpectedHash: demoHash(), ExpectedEngineID: "prefill-7", Socket: quietSocket()}
	rep, err := handshake.Fetch(ctx, ep, handshake.Request{Variant: handshake.V3, PP: 0, TP: 1}, opts)
	if err != nil {
		t.Fatalf("Fetch: %v\nstderr:\n%s", err, p.stderr)
	}
	md := rep.Metadata
	if md.EngineID != "prefill-7" || md.DeviceID != 1 || md.NumBlocks != 1001 || md.KVCacheLayout != "HND" || md.BlockSize != 16 {
		t.Fatalf("metadata = %+v", md)
	}
	if _, err := handshake.Fetch(ctx, ep, handshake.Request{Variant: handshake.V3, TP: 5}, opts); !errors.Is(err, handshake.ErrRejected) {
		t.Fatalf("unserved rank: %v, want ErrRejected", err)
	}

	// probe: ADDR first, flags after it.
	code, out, errOut := runBin(t, 20*time.Second, "probe", ep, "--tp", "1", "--timeout", "3s")
	if code != 0 || !strings.Contains(out, "result: ok") || !strings.Contains(out, "prefill-7") {
		t.Fatalf("probe: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runBin(t, 20*time.Second, "probe", "--variant", "v2", ep, "--tp", "5")
	if code != 1 || !strings.Contains(out, "FAIL") {
		t.Fatalf("probe of an unserved rank: exit %d\n%s", code, out)
	}

	// scan: flags on both sides of ADDR; the listener must survive it.
	code, out, errOut = runBin(t, 40*time.Second, "scan", "--duration", "0s", ep, "--hold", "100ms", "--timeout", "2s")
	if code != 0 || !strings.Contains(out, "payload-818001") || !strings.Contains(out, "still answering") || strings.Contains(out, "NO (") {
		t.Fatalf("scan: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := handshake.Fetch(ctx, ep, handshake.Request{Variant: handshake.V2, TP: 0}, opts); err != nil {
		t.Fatalf("Fetch after the scan: %v", err)
	}

	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("listener exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	m := p.jsonLine()
	if num(m, "served.V3") < 2 || num(m, "served.V2") < 1 || num(m, "error_replies") < 2 ||
		num(m, "drops.decode") < 1 || num(m, "drops.unknown-rank") < 2 || num(m, "refused.transport") < 1 ||
		m["dropped_hwm"] == nil {
		t.Fatalf("unexpected counters: %s", p.stdout)
	}
	checkExitGoroutines(t, m, p.stdout.String())
	// Without --debug-addr there is no debug endpoint.
	if strings.Contains(p.stderr.String(), "debug_addr") {
		t.Errorf("debug endpoint started without --debug-addr:\n%s", p.stderr)
	}
}

// TestProbeClosedPort: nothing listening, probe exits non-zero and names the
// failing step.
func TestProbeClosedPort(t *testing.T) {
	ep := closedEndpoint(t)
	code, out, errOut := runBin(t, 20*time.Second, "probe", ep, "--timeout", "1s")
	if code == 0 || !strings.Contains(out, "connect:") || !strings.Contains(out, "FAIL") {
		t.Fatalf("probe of a closed port: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// scan of a closed port: the target does not answer at the start.
	code, out, _ = runBin(t, 20*time.Second, "scan", ep, "--timeout", "500ms")
	if code != 1 || !strings.Contains(out, "did not answer at the start") {
		t.Fatalf("scan of a closed port: exit %d\n%s", code, out)
	}
}

// TestSink sends junk and N valid EngineCoreOutputs to the sink with a Go
// PUSH: it exits 0 after N valid messages and never counts the junk.
func TestSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const n = 200
	p := start(t, ctx, "sink", "--decode", "stats", "--bind", "tcp://127.0.0.1:0", "--count", "200", "--log-format", "json")
	ep := p.logField("sink receiving", "endpoint", 20*time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	junk := [][][]byte{{{0x45}}, {{0xa3, 0xe0, 0x80, 0x80}}, {{0x81, 0x80, 0x01}}, {{0x94}, {0x00}}, {{}}}
	for _, j := range junk {
		if err := push.Send(ctx, j...); err != nil {
			t.Fatal(err)
		}
	}
	m := enginecore.Header{EngineIndex: 1, HasStats: true, Timestamp: 12345.678,
		Stats: enginecore.SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7}}
	valid := dpwire.AppendHeader(nil, &m)
	for i := range n {
		if err := push.Send(ctx, valid); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("sink exit %d\nstdout:\n%s\nstderr:\n%s", code, p.stdout, p.stderr)
	}
	r := p.jsonLine()
	if num(r, "messages") != n || num(r, "dropped") != float64(len(junk)) || num(r, "drops.decode") < 3 ||
		num(r, "drops.envelope") != 1 || num(r, "msgs_per_sec") <= 0 || r["decode"] != "stats" {
		t.Fatalf("unexpected sink report: %s", p.stdout)
	}
	if !strings.Contains(p.stderr.String(), "sink: 200 valid messages") {
		t.Fatalf("no human summary on stderr:\n%s", p.stderr)
	}
}

// TestSinkRaw: --decode none counts every message as valid.
func TestSinkRaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "sink", "--bind", "tcp://127.0.0.1:0", "--log-format=json", "--count=10")
	ep := p.logField("sink receiving", "endpoint", 20*time.Second)
	push, err := socket.New("PUSH", quietSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer push.Close()
	push.Dial(ep)
	for range 10 {
		if err := push.Send(ctx, []byte{0x45}, []byte("two frames")); err != nil {
			t.Fatal(err)
		}
	}
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("sink exit %d\n%s", code, p.stderr)
	}
	r := p.jsonLine()
	if num(r, "messages") != 10 || num(r, "dropped") != 0 || r["decode"] != "none" {
		t.Fatalf("unexpected sink report: %s", p.stdout)
	}
}

// TestSinkUntilSignal: with --count 0 the sink runs until SIGTERM, then
// prints its figures and exits 0.
func TestSinkUntilSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	p := start(t, ctx, "sink", "--bind", "tcp://127.0.0.1:0", "--log-format", "json", "--decode", "stats")
	p.logField("sink receiving", "endpoint", 20*time.Second)
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("sink exit %d\n%s", code, p.stderr)
	}
	if r := p.jsonLine(); num(r, "messages") != 0 || r["decode"] != "stats" {
		t.Fatalf("unexpected sink report: %s", p.stdout)
	}
}

// TestErrorNoStutter: a command's error names the command once.
func TestErrorNoStutter(t *testing.T) {
	code, _, errOut := runBin(t, 20*time.Second, "coordinator", "--front", "udp://x", "--back-output", "tcp://127.0.0.1:0",
		"--back-publish", "tcp://127.0.0.1:0", "--engines", "1")
	if code == 0 || strings.Contains(errOut, "coordinator: coordinator:") || !strings.Contains(errOut, `"udp://x"`) {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

// TestPositionalArgumentsRefused: a command whose spec takes no positional
// arguments refuses one before it runs, with one usage line and exit 2, in
// the one place every command shares (parseCommand).
func TestPositionalArgumentsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range commands {
		spec := c.commandSpec()
		if spec.args {
			continue
		}
		var out, errOut bytes.Buffer
		code := run(ctx, []string{spec.name, "stray"}, &out, &errOut, false)
		want := fmt.Sprintf("zmqguard %s: unexpected argument \"stray\" (see 'zmqguard %s -h')\n", spec.name, spec.name)
		if code != 2 || errOut.String() != want || out.Len() != 0 {
			t.Errorf("%s stray: exit %d, stderr %q, stdout %q; want exit 2 and %q", spec.name, code, errOut.String(), out.String(), want)
		}
	}
}
