package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/zmqguard/zmqguard/handshake"
)

// httpGet GETs url with a client that keeps no connection open afterwards
// (so that goleak sees none of its goroutines) and returns the status and
// body.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp.StatusCode, b
}

// getDebugVars GETs /debug/zmqguard at addr and decodes it.
func getDebugVars(t *testing.T, addr string) map[string]any {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/debug/zmqguard")
	var m map[string]any
	if code != http.StatusOK || json.Unmarshal(body, &m) != nil {
		t.Fatalf("GET /debug/zmqguard: status %d, body %q", code, body)
	}
	return m
}

// checkPprof checks that the pprof index and the heap profile answer 200
// with a body.
func checkPprof(t *testing.T, addr string) {
	t.Helper()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1"} {
		if code, body := httpGet(t, "http://"+addr+path); code != http.StatusOK || len(body) == 0 {
			t.Errorf("GET %s: status %d, %d bytes", path, code, len(body))
		}
	}
}

// refused reports whether nothing accepts TCP connections at addr any more.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// TestDebugServer runs the debug endpoint in this process: it serves the
// counters, the goroutine count, heap figures and pprof; Close ends every
// goroutine it started (goleak), even with a CPU profile request in flight,
// and stops listening.
func TestDebugServer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	type counters struct {
		Served uint64 `json:"served"`
	}
	calls := 0
	ds, err := startDebug(&debugOptions{addr: "127.0.0.1:0"}, "test-cmd", func() any {
		calls++
		return counters{Served: 42}
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := ds.Addr()
	m := getDebugVars(t, addr)
	if num(m, "goroutines") < 1 || num(m, "memstats.heap_inuse") <= 0 || num(m, "memstats.heap_sys") <= 0 ||
		num(m, "memstats.sys") <= 0 || num(m, "counters.served") != 42 || m["command"] != "test-cmd" || calls != 1 {
		t.Fatalf("/debug/zmqguard = %v (counters called %d times)", m, calls)
	}
	for _, k := range []string{"heap_idle", "heap_released", "num_gc"} {
		if _, ok := m["memstats"].(map[string]any)[k]; !ok {
			t.Errorf("/debug/zmqguard memstats lack %s: %v", k, m)
		}
	}
	checkPprof(t, addr)
	if code, _ := httpGet(t, "http://"+addr+"/"); code != http.StatusNotFound {
		t.Errorf("GET /: status %d, want 404 (only /debug/ is served)", code)
	}

	// A 30 s CPU profile in flight must not hold Close up for longer than
	// the shutdown timeout: its connection is closed.
	inflight := make(chan error, 1)
	go func() {
		tr := &http.Transport{DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: time.Minute}).Get("http://" + addr + "/debug/pprof/profile?seconds=30")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		inflight <- err
	}()
	waitActive(t, ds)
	ds.Close()
	ds.Close() // idempotent
	select {
	case <-inflight:
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight profile request did not end after Close")
	}
	if !refused(addr) {
		t.Errorf("%s still accepts connections after Close", addr)
	}
	var nilServer *debugServer // --debug-addr off
	nilServer.Close()
	if nilServer.Addr() != "" || nilServer.logAttrs() != nil {
		t.Error("a nil debug server has an address")
	}
}

// waitActive waits until the server's goroutine dump shows the pprof CPU
// profile handler at work, so that Close meets it in flight.
func waitActive(t *testing.T, ds *debugServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, dump := httpGet(t, "http://"+ds.Addr()+"/debug/pprof/goroutine?debug=2")
		if strings.Contains(string(dump), "net/http/pprof.Profile") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the CPU profile request never started")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestDebugOptionsCheck(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:0", "127.0.0.5:6060", "[::1]:0", "localhost:6060", "LOCALHOST:0", "[::ffff:127.0.0.1]:0"} {
		if err := (&debugOptions{addr: ok}).check(); err != nil {
			t.Errorf("--debug-addr %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{":6060", "0.0.0.0:0", "[::]:0", "192.0.2.1:6060", "[2001:db8::1]:1", "example.com:80", "10.0.0.1:0"} {
		err := (&debugOptions{addr: bad}).check()
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--debug-allow-remote") {
			t.Errorf("--debug-addr %q: %v, want a usage error naming --debug-allow-remote", bad, err)
		}
		if err := (&debugOptions{addr: bad, allowRemote: true}).check(); err != nil {
			t.Errorf("--debug-addr %q --debug-allow-remote refused: %v", bad, err)
		}
	}
	for _, malformed := range []string{"127.0.0.1", "127.0.0.1:nope", "[::1:0", "127.0.0.1:99999"} {
		var ue *usageError
		if err := (&debugOptions{addr: malformed, allowRemote: true}).check(); !errors.As(err, &ue) {
			t.Errorf("--debug-addr %q: %v, want a usage error", malformed, err)
		}
	}
}

// TestReportAcceptErrors: the listener's counters line carries accept_errors,
// dropped_hwm and goroutines with their values.
func TestReportAcceptErrors(t *testing.T) {
	var st handshake.ListenerStats
	st.Socket.DroppedHWM = 5
	st.Socket.AcceptErrors = 11
	r := newListenerReport("tcp://127.0.0.1:1", st)
	r.Goroutines = 3
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if num(m, "accept_errors") != 11 || num(m, "dropped_hwm") != 5 || num(m, "goroutines") != 3 {
		t.Fatalf("listener line %s", b)
	}
}

// TestListenerDebugEndpoint runs handshake-listener with --debug-addr: the
// address is in the start line, /debug/zmqguard shows the live counters and
// a goroutine count, pprof answers, and at SIGTERM the endpoint is closed
// before the exit line counts the goroutines left.
func TestListenerDebugEndpoint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "dbg",
		"--log-format", "json", "--debug-addr", "127.0.0.1:0")
	ep := p.logField("handshake listener serving", "endpoint", 20*time.Second)
	addr := p.logField("handshake listener serving", "debug_addr", time.Second)
	if own := p.logField("debug endpoint serving", "debug_addr", time.Second); own != addr || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("debug_addr %q in the start line, %q in its own line", addr, own)
	}
	opts := handshake.ClientOptions{ExpectedHash: demoHash(), ExpectedEngineID: "dbg", Socket: quietSocket()}
	if _, err := handshake.Fetch(ctx, ep, handshake.Request{Variant: handshake.V3}, opts); err != nil {
		t.Fatalf("Fetch: %v\nstderr:\n%s", err, p.stderr)
	}
	m := getDebugVars(t, addr)
	if num(m, "goroutines") < 1 || num(m, "counters.goroutines") < 1 || num(m, "counters.served.V3") != 1 ||
		num(m, "memstats.heap_inuse") <= 0 || m["command"] != "handshake-listener" {
		t.Fatalf("/debug/zmqguard = %v", m)
	}
	if c, ok := m["counters"].(map[string]any); !ok || c["endpoint"] != ep || c["dropped_hwm"] == nil {
		t.Fatalf("/debug/zmqguard counters = %v", m["counters"])
	}
	checkPprof(t, addr)

	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("listener exit %d after SIGTERM\nstderr:\n%s", code, p.stderr)
	}
	r := p.jsonLine()
	checkExitGoroutines(t, r, p.stdout.String())
	if num(r, "served.V3") != 1 || r["dropped_hwm"] == nil {
		t.Fatalf("unexpected counters: %s", p.stdout)
	}
	if !refused(addr) {
		t.Errorf("%s still accepts connections after the process exited", addr)
	}
}

// maxExitGoroutines bounds the goroutines an exit line may report: the
// main goroutine, signal handling and the runtime's own, with room to
// spare. A socket, peer or debug-server goroutine that outlives shutdown
// shows as more.
const maxExitGoroutines = 8

// checkExitGoroutines checks the exit line's goroutines field.
func checkExitGoroutines(t *testing.T, line map[string]any, raw string) {
	t.Helper()
	if g := num(line, "goroutines"); g < 1 || g > maxExitGoroutines {
		t.Errorf("exit line reports %v goroutines after shutdown, want 1..%d: %s", g, maxExitGoroutines, raw)
	}
}

// FuzzDebugOptionsCheck: a --debug-addr value never panics the check; one
// accepted without --debug-allow-remote is host:port with a loopback host,
// and is accepted with it too.
func FuzzDebugOptionsCheck(f *testing.F) {
	for _, s := range []string{"127.0.0.1:0", "[::1]:6060", "localhost:http", ":0", "0.0.0.0:1", "[fe80::1%lo]:1",
		"[::ffff:127.0.0.1]:0", "127.0.0.1", "[::1", "a:b:c", "127.0.0.1:65536", "\x1b[31m:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		checkLoopbackProperty(t, addr, "--debug-allow-remote", func(remote bool) error {
			return (&debugOptions{addr: addr, allowRemote: remote}).check()
		})
	})
}

// checkLoopbackProperty is the property both HTTP-flag fuzz targets check of
// the one loopback rule behind --debug-addr and --metrics-addr: a refusal is
// a usage error; an address accepted without allowFlag is accepted with it
// too, and is "" or host:port with a loopback host.
func checkLoopbackProperty(t *testing.T, addr, allowFlag string, check func(remote bool) error) {
	err := check(false)
	remoteErr := check(true)
	if err != nil {
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Fatalf("check(%q) = %v, not a usage error", addr, err)
		}
		return
	}
	if remoteErr != nil {
		t.Fatalf("check(%q) accepted without %s, refused with it: %v", addr, allowFlag, remoteErr)
	}
	if addr == "" {
		return
	}
	host, _, serr := net.SplitHostPort(addr)
	if serr != nil || !isLoopbackHost(host) {
		t.Fatalf("check(%q) accepted a host that is not loopback (%q, %v)", addr, host, serr)
	}
}
