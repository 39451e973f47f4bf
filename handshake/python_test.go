package handshake

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
)

// pythonPath is Debian's interpreter, which has python3-msgpack; a python3
// earlier on PATH (pyenv, a venv) may not.
const pythonPath = "/usr/bin/python3"

// requirePython skips the test, loudly, when /usr/bin/python3 or one of
// modules (Debian's python3-msgpack, python3-zmq for pyzmq) is missing;
// under CI (CI set) it fails instead, because .ci/run installs them.
func requirePython(t *testing.T, modules string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, pythonPath, "-c", "import "+modules).CombinedOutput()
	if err == nil {
		return
	}
	pkgs := []string{"python3", "python3-msgpack"}
	if strings.Contains(modules, "zmq") {
		pkgs = append(pkgs, "python3-zmq")
	}
	out = bytes.TrimSpace(out)
	last := out[bytes.LastIndexByte(out, '\n')+1:] // the exception, without its traceback
	missingpeer.Skip(t, "the Python interop peer: "+pythonPath+" cannot import "+modules+" ("+err.Error()+": "+
		string(last)+")", pkgs...)
}

// runPython runs script with /usr/bin/python3, feeding stdin, and returns
// its standard output. The script's standard error is shown on failure.
func runPython(t *testing.T, script string, stdin []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pythonPath, "-c", script)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("python failed: %v\nstderr:\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}
