package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/zmtpguard"
)

// refusal runs the CLI in process and returns its exit code and stderr;
// it fails t when anything reached stdout (a refusal does no work).
func refusal(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut, false)
	if out.Len() != 0 {
		t.Errorf("%q: stdout %q; a refusal prints nothing there", args, out.String())
	}
	return code, errOut.String()
}

// TestRefusalsNameFlagAndValue: each refusal is one line (exit 2) that
// names the flag (or the argument) and the value given, and says it once.
func TestRefusalsNameFlagAndValue(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nonexistent", "key")
	srvPub, _, err := zmtpguard.GenerateCurveKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string // the whole message between "zmqguard CMD: " and " (see ..."
	}{
		// The exposure clause once, not "... to anyone who reaches it" twice.
		{[]string{"kv-index", "--connect", "tcp://127.0.0.1:1", "--http", "0.0.0.0:0"},
			`--http "0.0.0.0:0" is not a loopback address: anyone who reaches it can read which engine caches which prompt; use 127.0.0.1, ::1 or localhost, or add --http-allow-remote`},
		{[]string{"sink", "--bind", "tcp://127.0.0.1:0", "--metrics-addr", "0.0.0.0:0"},
			`--metrics-addr "0.0.0.0:0" is not a loopback address: the metrics endpoint describes this process to anyone who reaches it; use 127.0.0.1, ::1 or localhost, or add --metrics-allow-remote`},
		{[]string{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--debug-addr", "0.0.0.0:0"},
			`--debug-addr "0.0.0.0:0" is not a loopback address: the debug endpoint serves heap profiles to anyone who reaches it; use 127.0.0.1, ::1 or localhost, or add --debug-allow-remote`},
		// probe checks its endpoint as sink does, before dialing anything.
		{[]string{"probe", "tcp://nowhere:x"}, `bad endpoint "tcp://nowhere:x": port is not a number in 1..65535`},
		{[]string{"probe", "tcp://h:0"}, `bad endpoint "tcp://h:0": port is not a number in 1..65535`},
		{[]string{"probe", "tcp://*:5600"}, `bad endpoint "tcp://*:5600": has no host to connect to`},
		{[]string{"probe", "udp://h:5600"}, `bad endpoint "udp://h:5600": want tcp://host:port or ipc://path`},
		{[]string{"probe", "ipc://"}, `bad endpoint "ipc://": has an empty path`},
		// A key file names its flag; the path is said once.
		{[]string{"probe", "tcp://127.0.0.1:1", "--curve-server-key", srvPub.String(), "--curve-secret-key-file", missing},
			`--curve-secret-key-file "` + missing + `": no such file or directory`},
		{[]string{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--curve-secret-key-file", missing, "--curve-allow", dir},
			`--curve-secret-key-file "` + missing + `": no such file or directory`},
		// Values refused one flag at a time, each named with its value.
		{[]string{"demo", "--clients", "9"}, `--clients 9: want 1..8`},
		{[]string{"demo", "--duration", "-1s"}, `--duration -1s: want a positive duration`},
		{[]string{"coordinator", "--front", "tcp://127.0.0.1:0", "--back-output", "tcp://127.0.0.1:0", "--back-publish", "tcp://127.0.0.1:0", "--engines", "2", "--idle-interval", "0s"},
			`--idle-interval 0s: want a positive duration`},
		{[]string{"sink", "--bind", "tcp://127.0.0.1:0", "--max-message-size", "10"}, `--max-message-size 10: want at least 64 bytes`},
		{[]string{"sink", "--bind", "tcp://127.0.0.1:0", "--hwm", "-1"}, `--hwm -1: must not be negative`},
		{[]string{"outputs", "--bind", "tcp://127.0.0.1:0", "--max-frames", "0"}, `--max-frames 0: want at least 1`},
		{[]string{"kv-publish", "--bind", "tcp://127.0.0.1:0", "--dp-rank", "-2"}, `--dp-rank -2: must not be negative`},
		{[]string{"probe", "tcp://h:1", "--variant", "v1", "--tp", "2"}, `--tp 2: a v1 request names no rank: want 0`},
		{[]string{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--compat-hash", "zz"}, `--compat-hash "zz": want 64 hex digits`},
		{[]string{"handshake-listener", "--bind", "tcp://127.0.0.1:0", "--engine-id", "e", "--tp-size", "0"}, `--tp-size 0: want 1..65535`},
		{[]string{"scan", "tcp://127.0.0.1:1", "--hold", "0s"}, `--hold 0s: want a positive duration`},
		// kv-index: the bad value itself, before what a good one needs.
		{[]string{"kv-index", "--connect", "tcp://127.0.0.1:1", "--http", "127.0.0.1:0", "--vllm-hash", "md5"}, `--vllm-hash "md5": want sha256_cbor or sha256`},
		{[]string{"kv-index", "--connect", "tcp://127.0.0.1:1", "--http", "127.0.0.1:0", "--capacity", "-1"}, `--capacity -1: want 0 (the default) or more`},
		{[]string{"kv-index", "--connect", "tcp://127.0.0.1:1", "--http", "127.0.0.1:0", "--replay-timeout", "0s"}, `--replay-timeout 0s: want a positive duration`},
		{[]string{"outputs", "--bind", "tcp://127.0.0.1:0", "--heartbeat-interval", "1s", "--heartbeat-timeout", "0s"},
			`--heartbeat-timeout 0 with --heartbeat-interval 1s: want a positive timeout when heartbeats are on`},
	} {
		code, got := refusal(t, c.args...)
		want := "zmqguard " + c.args[0] + ": " + c.want + " (see 'zmqguard " + c.args[0] + " -h')\n"
		if code != 2 || got != want {
			t.Errorf("%q: exit %d, stderr\n%q\nwant exit 2 and\n%q", c.args, code, got, want)
		}
	}
}

// TestCheckDialEndpoint: the forms a client can dial pass the check; it
// checks the form only, never resolves.
func TestCheckDialEndpoint(t *testing.T) {
	for _, ok := range []string{"tcp://127.0.0.1:5600", "tcp://[::1]:1", "tcp://prefill-0.example:65535", "ipc:///tmp/x", "host:5600"} {
		if err := checkDialEndpoint(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"tcp://h:65536", "tcp://h:+80", "tcp://h", "tcp://:1", "h:-1", "", strings.Repeat("x", 300)} {
		err := checkDialEndpoint(bad)
		if err == nil || strings.Contains(err.Error(), "\n") || len(err.Error()) > 200 {
			t.Errorf("%q: %v; want a one-line refusal", bad, err)
		}
	}
}
