// Package missingpeer is the one rule for a test whose external peer is not
// installed (pyzmq, redis-server, nmap, promtool, network namespaces ...):
// on a developer's machine the test skips with a message that starts with
// [Marker] and names the Debian packages to install; under CI (CI set in
// the environment) it fails. A skip is never silent: every one can be
// listed after a run with
//
//	go test -json ./... | go run ./internal/testkit/skipreport
//
// (or found with `go test -v ./... | grep 'MISSING PEER:'`).
package missingpeer

import (
	"os"
	"strings"
	"testing"
)

// Marker starts the message of every skip for a missing peer.
const Marker = "MISSING PEER:"

// Message is the line Skip reports: Marker, the test, what is missing and
// the install command for the Debian packages named.
func Message(test, what string, debianPackages ...string) string {
	msg := Marker + " " + test + ": " + what
	if len(debianPackages) > 0 {
		msg += "; install it with `apt-get install " + strings.Join(debianPackages, " ") + "`"
	}
	return msg
}

// Skip ends t because the peer described by what is missing: it fails t
// under CI (CI set) and skips it elsewhere, with [Message].
func Skip(t testing.TB, what string, debianPackages ...string) {
	t.Helper()
	msg := Message(t.Name(), what, debianPackages...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: a missing peer is a failure, not a skip)")
		return
	}
	t.Skip(msg)
}
