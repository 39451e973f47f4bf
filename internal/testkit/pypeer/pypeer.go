// Package pypeer finds the Python interpreter that interop tests drive as a
// real libzmq peer (Debian's /usr/bin/python3 with python3-zmq, libzmq 4.3.4)
// and enforces the project's rule for a missing peer (package missingpeer):
// a skip marked "MISSING PEER:" on a developer's machine, a failure under CI
// (CI set in the environment).
package pypeer

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/missingpeer"
)

// Python is the interpreter the interop tests run.
const Python = "/usr/bin/python3"

// debianPackage maps a Python module to the Debian package that ships it.
var debianPackage = map[string]string{
	"zmq":               "python3-zmq",
	"msgpack":           "python3-msgpack",
	"numpy":             "python3-numpy",
	"prometheus_client": "python3-prometheus-client",
	"matplotlib":        "python3-matplotlib",
}

// Require returns [Python] when it can import every module named; otherwise
// it fails the test under CI and skips it elsewhere (missingpeer.Skip),
// naming the Debian packages to install.
func Require(t testing.TB, modules ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := "import " + strings.Join(modules, ", ")
	out, err := exec.CommandContext(ctx, Python, "-c", code).CombinedOutput()
	if err == nil {
		return Python
	}
	if ctx.Err() != nil { // installed, but too slow to answer: not a missing peer
		t.Fatalf("%s -c %q did not finish within 30 s: %v", Python, code, err)
	}
	pkgs := []string{"python3"}
	for _, m := range modules {
		if p, ok := debianPackage[m]; ok {
			pkgs = append(pkgs, p)
		}
	}
	missingpeer.Skip(t, "the Python interop peer: "+Python+" cannot "+code+" ("+err.Error()+": "+
		lastLine(out)+")", pkgs...)
	return ""
}

// lastLine is the last non-empty line of a Python error's output (the
// exception, without its traceback).
func lastLine(out []byte) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return string(bytes.TrimSpace(lines[len(lines)-1]))
}
