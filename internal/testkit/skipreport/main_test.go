package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stream is a `go test -json` run in the shape cmd/test2json writes: a
// missing-peer skip, a skip for another reason, a passing test that logged
// a missing peer, a pass, a failure and a cached package.
const stream = `{"Action":"start","Package":"github.com/zmqguard/zmqguard/socket"}
{"Action":"run","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestInterop"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestInterop","Output":"=== RUN   TestInterop\n"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestInterop","Output":"    interop_test.go:30: MISSING PEER: TestInterop: the Python interop peer: no zmq; install it with ` + "`apt-get install python3 python3-zmq`" + `\n"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestInterop","Output":"--- SKIP: TestInterop (0.01s)\n"}
{"Action":"skip","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestInterop","Elapsed":0.01}
{"Action":"run","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestScale"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestScale","Output":"    scale_test.go:16: 1,000 sockets\n"}
{"Action":"skip","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestScale","Elapsed":0}
{"Action":"run","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestOK"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"github.com/zmqguard/zmqguard/socket","Test":"TestOK","Elapsed":0}
{"Action":"pass","Package":"github.com/zmqguard/zmqguard/socket","Elapsed":0.1}
{"Action":"run","Package":"github.com/zmqguard/zmqguard/bench","Test":"TestHarnessQuick"}
{"Action":"output","Package":"github.com/zmqguard/zmqguard/bench","Test":"TestHarnessQuick","Output":"    harness_test.go:60: MISSING PEER: TestHarnessQuick: pebbe not built; install it with ` + "`apt-get install gcc libzmq3-dev`" + `\n"}
{"Action":"pass","Package":"github.com/zmqguard/zmqguard/bench","Test":"TestHarnessQuick","Elapsed":9}
{"Action":"run","Package":"github.com/zmqguard/zmqguard/loop","Test":"TestBad"}
{"Action":"fail","Package":"github.com/zmqguard/zmqguard/loop","Test":"TestBad","Elapsed":0}
build output that is not JSON
{"Action":"output","Package":"github.com/zmqguard/zmqguard/kvindex","Output":"ok  \tgithub.com/zmqguard/zmqguard/kvindex\t(cached)\n"}
`

func TestReport(t *testing.T) {
	r, err := read(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.write(&b); err != nil {
		t.Fatal(err)
	}
	want := "MISSING PEER ./bench TestHarnessQuick: pebbe not built; install it with `apt-get install gcc libzmq3-dev`\n" +
		"MISSING PEER ./socket TestInterop: the Python interop peer: no zmq; install it with `apt-get install python3 python3-zmq`\n" +
		"SKIP         ./socket TestScale: scale_test.go:16: 1,000 sockets\n" +
		"FAILED       ./loop TestBad\n" +
		"\n4 packages, 2 tests passed, 1 failed, 3 listed above (2 for a missing peer)\n" +
		"to run what a missing peer skipped: sudo apt-get install gcc libzmq3-dev python3 python3-zmq, then go test -count=1 again\n" +
		"note: 1 packages' results came from the test cache (a peer installed since is not seen): use -count=1\n"
	if b.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestNoEvents: a pipe without go test's JSON (go test not run with -json,
// or it failed to start) is an error, not an empty report.
func TestNoEvents(t *testing.T) {
	if _, err := read(strings.NewReader("ok  \tgithub.com/zmqguard/zmqguard/socket\t1.2s\n")); err == nil {
		t.Fatal("no error for a stream without events")
	}
}
