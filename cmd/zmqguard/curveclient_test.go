package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/vllm"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// curveCerts makes a server and a client certificate with 'zmqguard keygen
// --out' and returns the server's public key and the paths of the server's
// secret certificate, the client's secret certificate and the client
// certificates' directory (for --curve-allow).
func curveCerts(t *testing.T) (srvPub, srvSecret, cliSecret, cliDir string) {
	t.Helper()
	srvDir, cliDir := t.TempDir(), t.TempDir()
	for _, c := range [][2]string{{srvDir, "server"}, {cliDir, "client"}} {
		if code, _, errOut := runBin(t, 20*time.Second, "keygen", "--out", c[0], "--name", c[1]); code != 0 {
			t.Fatalf("keygen --out %s: exit %d\n%s", c[0], code, errOut)
		}
	}
	srvSecret = filepath.Join(srvDir, "server.key_secret")
	certPublic, _, err := zmtpguard.LoadCertificate(filepath.Join(srvDir, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	return certPublic.String(), srvSecret, filepath.Join(cliDir, "client.key_secret"), cliDir
}

// TestProbeCurve: probe against a CURVE-only handshake-listener succeeds
// with the listener's public key and an admitted client certificate, and
// fails at the zmtp step, naming CURVE, with a wrong server key, with a
// fresh (unlisted) key pair, and without CURVE; the flags' misuse is a
// usage error.
func TestProbeCurve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srvPub, srvSecret, cliSecret, cliDir := curveCerts(t)
	p := start(t, ctx, "handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "prefill-c",
		"--curve-secret-key-file", srvSecret, "--curve-allow", cliDir, "--log-format", "json")
	ep := p.logField("handshake listener serving", "endpoint", 20*time.Second)

	code, out, errOut := runBin(t, 20*time.Second, "probe", ep, "--curve-server-key", srvPub, "--curve-secret-key-file", cliSecret)
	if code != 0 || !strings.Contains(out, "CURVE (encrypted, server key verified)") || !strings.Contains(out, "result: ok") {
		t.Fatalf("probe with the right keys: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runBin(t, 20*time.Second, "probe", ep, "--json", "--curve-server-key", srvPub, "--curve-secret-key-file", cliSecret)
	var rep struct {
		OK       bool   `json:"ok"`
		EngineID string `json:"engine_id"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || !rep.OK || rep.EngineID != "prefill-c" { // no literal quotes inside the JSON string
		t.Fatalf("probe --json with CURVE: exit %d, %v\n%s", code, err, out)
	}

	wrongPub, _, _ := zmtpguard.GenerateCurveKeyPair()
	for name, args := range map[string][]string{
		"wrong server key": {"--curve-server-key", wrongPub.String(), "--curve-secret-key-file", cliSecret},
		"fresh key pair":   {"--curve-server-key", srvPub},
		"no CURVE":         nil,
	} {
		code, out, _ := runBin(t, 20*time.Second, append([]string{"probe", ep, "--timeout", "3s"}, args...)...)
		want := "the CURVE handshake failed"
		if args == nil {
			want = "the peer demands CURVE"
		}
		if code != 1 || !strings.Contains(out, "zmtp:    FAIL: "+want) {
			t.Errorf("probe, %s: exit %d, want 1 and %q\n%s", name, code, want, out)
		}
	}

	for _, args := range [][]string{
		{"--curve-secret-key-file", cliSecret},
		{"--curve-server-key", "not-a-key"},
		{"--curve-server-key", srvPub, "--curve-secret-key-file", filepath.Join(cliDir, "client.key")},
	} {
		if code, _, errOut := runBin(t, 20*time.Second, append([]string{"probe", ep}, args...)...); code != 2 {
			t.Errorf("probe %v: exit %d, want 2 (usage)\n%s", args, code, errOut)
		}
	}
	if code := p.terminate(20 * time.Second); code != 0 {
		t.Fatalf("listener exit %d\n%s", code, p.stderr)
	}
}

// TestProbeCurveFreshKey: with --curve-server-key alone the probe's fresh
// key pair gets into a server that admits any key (libzmq's CURVE server
// without ZAP).
func TestProbeCurveFreshKey(t *testing.T) {
	pub, sec, err := zmtpguard.GenerateCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	m := handshake.NixlAgentMetadata{EngineID: "prefill-any", AgentMetadata: []byte("a"), KVCachesBaseAddr: []uint64{1},
		NumBlocks: 1, BlockLens: []int64{16}, BlockStrides: []int64{16}, KVCacheLayout: "HND",
		BlockSize: 16, AttnBackendName: "FLASH_ATTN", PhysicalBlocksPerLogicalKVBlock: 1, DCPSize: 1, PCPSize: 1}
	hash := strings.Repeat("ab", 32)
	b, err := handshake.EncodePayload(hash, &m, vllm.Latest())
	if err != nil {
		t.Fatal(err)
	}
	o := quietSocket()
	o.Guard.Curve = &zmtpguard.CurveConfig{Server: true, SecretKey: sec, Authorize: func(zmtpguard.CurveKey, net.Addr) (bool, string) { return true, "" }, Logger: o.Logger}
	l, err := handshake.NewListener(handshake.ListenerConfig{Endpoint: "tcp://127.0.0.1:0", Payloads: map[handshake.Rank][]byte{{}: b},
		Socket: o, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	defer func() {
		cancel()
		<-done
		l.Close()
	}()
	code, out, errOut := runBin(t, 20*time.Second, "probe", l.Endpoint(), "--curve-server-key", pub.String())
	if code != 0 || !strings.Contains(out, `engine_id "prefill-any"`) || !strings.Contains(errOut, "fresh key pair") {
		t.Fatalf("probe with a fresh key pair: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestKVEventsCurve: kv-events with --curve-server-key and
// --curve-secret-key-file follows a CURVE-only kv-publish, live and through
// replay (the batches before it joined, with --from-start); with a wrong
// server key it gets nothing.
func TestKVEventsCurve(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srvPub, srvSecret, cliSecret, cliDir := curveCerts(t)
	pub := start(t, ctx, "kv-publish", "--bind", "tcp://127.0.0.1:0", "--replay-bind", "tcp://127.0.0.1:0", "--topic", "kv@c",
		"--rate", "100", "--stored", "1", "--curve-secret-key-file", srvSecret, "--curve-allow", cliDir, "--log-format", "json")
	ep := pub.logField("kv-publish", "endpoint", 20*time.Second)
	rep := pub.logField("kv-publish", "replay", 20*time.Second)
	// Batches to replay: a first live subscriber that has seen one batch
	// proves kv-publish has published (the one below then joins later).
	first := start(t, ctx, "kv-events", "--connect", ep, "--topic", "kv@", "--count", "2",
		"--curve-server-key", srvPub, "--curve-secret-key-file", cliSecret, "--log-format", "json")
	if code := first.wait(30 * time.Second); code != 0 {
		t.Fatalf("first kv-events with CURVE: exit %d\n%s\n%s", code, first.stdout, first.stderr)
	}

	// 40 events: batch 0's BlockStored, then batches of one BlockStored and
	// one BlockRemoved (of the previous batch's block).
	p := start(t, ctx, "kv-events", "--connect", ep, "--replay", rep, "--topic", "kv@", "--from-start", "--count", "40",
		"--curve-server-key", srvPub, "--curve-secret-key-file", cliSecret, "--log-format", "json")
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("kv-events with CURVE: exit %d\n%s\n%s", code, p.stdout, p.stderr)
	}
	lines := kvLines(t, p.stdout.String())
	if len(lines) != 41 {
		t.Fatalf("%d lines:\n%s", len(lines), p.stdout)
	}
	for i, l := range lines[:40] {
		if l["seq"] != float64((i+1)/2) {
			t.Fatalf("line %d: %v (want seq %d)", i, l, (i+1)/2)
		}
	}
	if c := lines[40]; num(c, "counters.total.replayed") < 1 || num(c, "counters.total.lost") != 0 {
		t.Fatalf("counters: %v", c)
	}

	wrongPub, _, _ := zmtpguard.GenerateCurveKeyPair()
	w := start(t, ctx, "kv-events", "--connect", ep, "--replay", rep, "--from-start",
		"--curve-server-key", wrongPub.String(), "--curve-secret-key-file", cliSecret, "--log-format", "json")
	// The condition, not a time: the publisher has refused this client's
	// HELLO (live) and the client has seen its handshake fail.
	pub.waitStderr("the client has a wrong server key", 20*time.Second)
	w.waitStderr(`"event":"handshake-failed"`, 20*time.Second)
	if code := w.terminate(20 * time.Second); code != 0 {
		t.Fatalf("kv-events with a wrong key: exit %d\n%s", code, w.stderr)
	}
	if l := kvLines(t, w.stdout.String()); len(l) != 1 || num(l[0], "counters.total.events") != 0 {
		t.Fatalf("kv-events with a wrong server key received something:\n%s", w.stdout)
	}
	if code := pub.terminate(20 * time.Second); code != 0 {
		t.Fatalf("kv-publish exit %d\n%s", code, pub.stderr)
	}
}
