package handshake

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/vllm"
)

// TestReleaseHashInterop: a pyzmq stand-in for vLLM's V3 listener serves
// the compatibility hash that each release's Python computes
// (pyReleaseHash) for one deployment; a Go decode client whose Factors name
// the same release completes the handshake, one whose Factors name the
// other release fails it with ErrHashMismatch, as a real pairing of those
// releases would. Under the oldest profile and under latest.
func TestReleaseHashInterop(t *testing.T) {
	requirePython(t, "zmq, msgpack")
	factors := Factors{VLLMVersion: "0.26.0", Model: "Qwen/Qwen3-8B", Dtype: "torch.bfloat16", NumKVHeads: 8,
		HeadSize: 128, NumHiddenLayers: 36, AttnBackendName: "FLASH_ATTN", CacheDtype: "auto", IsHMAEnabled: true}
	releases := []vllm.Release{vllm.Releases()[0], vllm.Latest()}
	var in bytes.Buffer
	for _, r := range releases {
		writePyFactors(&in, r, &factors)
	}
	pyHashes := strings.Fields(string(runPython(t, pyReleaseHash, in.Bytes())))
	if len(pyHashes) != len(releases) || pyHashes[0] == pyHashes[1] {
		t.Fatalf("python hashes %v", pyHashes)
	}
	for i, r := range releases {
		t.Run(r.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			engine := "prefill-" + r.String()
			cmd := exec.CommandContext(ctx, pythonPath, "testdata/vllm_v3_listener.py", engine, pyHashes[i], "1", "1")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); cmd.Wait() }()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			port, ok := strings.CutPrefix(strings.TrimSpace(line), "PORT ")
			if err != nil || !ok {
				t.Fatalf("listener start: %q %v\n%s", line, err, stderr.String())
			}
			ep := "tcp://127.0.0.1:" + port
			for _, client := range releases {
				f := factors
				f.Release = client
				want, err := f.Hash()
				if err != nil {
					t.Fatal(err)
				}
				_, err = Fetch(ctx, ep, Request{Variant: V3}, ClientOptions{ExpectedHash: want, ExpectedEngineID: engine, Socket: fastOpts()})
				switch {
				case client == r && err != nil:
					t.Errorf("a %s client against a %s listener: %v\n%s", client, r, err, stderr.String())
				case client != r && !errors.Is(err, ErrHashMismatch):
					t.Errorf("a %s client against a %s listener: %v, want a hash mismatch", client, r, err)
				}
			}
		})
	}
}
