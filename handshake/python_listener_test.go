package handshake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/ref/nixlwire"
)

// TestPythonClientAgainstGoListener: pyzmq REQ clients (libzmq) handshake
// with the Go listener in every variant and decode the replies with
// Python's msgpack; the metadata Python decodes, re-encoded by Python,
// must equal Go's encoding byte for byte. An unknown rank, with error
// replies on, shows what a Python client sees.
func TestPythonClientAgainstGoListener(t *testing.T) {
	requirePython(t, "zmq, msgpack")
	l := startListener(t, ListenerConfig{ErrorReplies: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonPath, "testdata/req_client.py", l.Endpoint(),
		"v1", "v2:0", "v2:1", "v3:0:1", "v3:1:0", "v3:0:7", "v2:7")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("req_client.py: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		t.Logf("python client: %.140s", line)
	}
	want := []struct {
		rank   Rank
		frames int
		hash   string
		ts     string
	}{
		{Rank{0, 0}, 1, "-", "-"},
		{Rank{0, 0}, 1, testHash, "-"},
		{Rank{0, 1}, 1, testHash, "-"},
		{Rank{0, 1}, 2, testHash, "float"},
		{Rank{1, 0}, 2, testHash, "float"},
	}
	if len(lines) != len(want)+2 {
		t.Fatalf("python printed %d lines", len(lines))
	}
	for i, w := range want {
		f := fields(lines[i])
		m := rankMetadata("prefill-7", w.rank)
		goMeta, _ := m.MarshalMsg(nil)
		if f["frames"] != strconv.Itoa(w.frames) || f["hash"] != w.hash || f["ts"] != w.ts ||
			f["engine"] != "prefill-7" || f["meta"] != hex.EncodeToString(goMeta) {
			t.Errorf("line %d: %s\nwant rank %v, frames %d, hash %s, ts %s", i, lines[i], w.rank, w.frames, w.hash, w.ts)
		}
	}
	// The error replies: the hash field carries the reason, and the empty
	// agent_metadata_bytes does not decode (msgspec raises DecodeError
	// where Python's msgpack raises one of its own).
	for i, w := range []struct{ frames, ts string }{{"2", "float"}, {"1", "-"}} {
		f := fields(lines[len(want)+i])
		if f["frames"] != w.frames || f["ts"] != w.ts || !strings.HasPrefix(f["hash"], "zmqguard-error:_unknown_rank") ||
			!strings.HasPrefix(f["meta"], "ERROR:") {
			t.Errorf("error reply line: %s", lines[len(want)+i])
		}
	}
	if st := l.Stats(); totalServed(st) != 5 || st.ErrorReplies != 2 {
		t.Errorf("listener stats %+v", st)
	}
}

// fields parses "spec k=v k=v ..." into a map.
func fields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// pyListenerMetadata is the metadata testdata/vllm_v3_listener.py serves.
func pyListenerMetadata(engine string, pp, tp int) nixlwire.NixlAgentMetadata {
	return nixlwire.NixlAgentMetadata{
		EngineID:                        engine,
		AgentMetadata:                   []byte("nixl-agent-" + strconv.Itoa(pp) + "-" + strconv.Itoa(tp)),
		KVCachesBaseAddr:                []uint64{0x7f3a00000000 + uint64(tp)<<20, 4096 + uint64(pp)},
		DeviceID:                        nixlwire.Int(tp),
		NumBlocks:                       nixlwire.Int(1000 + 100*pp + tp),
		BlockLens:                       []nixlwire.Int{65536, 65536},
		BlockStrides:                    []nixlwire.Int{65536, 65536},
		KVCacheLayout:                   "HND",
		BlockSize:                       16,
		AttnBackendName:                 "FLASH_ATTN",
		PhysicalBlocksPerLogicalKVBlock: 1,
		DCPSize:                         1,
		PCPSize:                         1,
		RegionMembers:                   [][]string{},
	}
}

// TestGoClientAgainstPythonListener: Fetch and Probe against a pyzmq
// ROUTER that serves like vLLM's V3 listener, with a payload and metadata
// encoded by Python's msgpack.
func TestGoClientAgainstPythonListener(t *testing.T) {
	requirePython(t, "zmq, msgpack")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	engine := "0f6c1e9a-prefill-dp0"
	cmd := exec.CommandContext(ctx, pythonPath, "testdata/vllm_v3_listener.py", engine, testHash, "2", "2")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			stdin.Close()
			cmd.Wait()
		}
	}()
	rd := bufio.NewReader(stdout)
	line, err := rd.ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT ")
	if err != nil || !ok {
		t.Fatalf("listener start: %q %v\n%s", line, err, stderr.String())
	}
	ep := "tcp://127.0.0.1:" + port

	served := 0
	for _, r := range []Rank{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
		rep, err := Fetch(ctx, ep, Request{Variant: V3, PP: r.PP, TP: r.TP},
			ClientOptions{ExpectedHash: testHash, ExpectedEngineID: engine, Socket: fastOpts()})
		if err != nil {
			t.Fatalf("Fetch %v from the Python listener: %v\n%s", r, err, stderr.String())
		}
		served++
		if want := pyListenerMetadata(engine, r.PP, r.TP); !sameMetadata(t, toWire(&rep.Metadata), want) {
			t.Errorf("%v: metadata %+v\nwant %+v", r, rep.Metadata, want)
		}
		if rep.CompatibilityHash != testHash || rep.RemoteTime <= 0 {
			t.Errorf("%v: hash %q, perf counter %v", r, rep.CompatibilityHash, rep.RemoteTime)
		}
	}
	// A different hash is told apart from everything else.
	_, err = Fetch(ctx, ep, Request{Variant: V3}, ClientOptions{ExpectedHash: "0" + testHash[1:], Socket: fastOpts()})
	if _, ok := err.(*hashMismatchError); !ok {
		t.Errorf("hash mismatch against Python: %v", err)
	}
	served++

	var out strings.Builder
	rep, err := Probe(ctx, ep, Request{Variant: V3, PP: 1, TP: 1}, ProbeOptions{Timeout: 5 * time.Second, Out: &out})
	t.Logf("probe of the Python listener:\n%s", out.String())
	if err != nil || !rep.OK || rep.EngineID != engine || len(rep.ReplyFrames) != 3 || rep.ReplyFrames[2] != 9 {
		t.Errorf("probe: %v, %+v", err, rep)
	}
	served++

	stdin.Close()
	rest, _ := io.ReadAll(rd)
	werr := cmd.Wait()
	exited = true
	if werr != nil || strings.TrimSpace(string(rest)) != "SERVED "+strconv.Itoa(served) {
		t.Errorf("listener exit: %v, %q\n%s", werr, rest, stderr.String())
	}
}
