package loop

import (
	"context"
	"encoding/hex"
	"os/exec"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// TestPythonProducersLeaveZMQ4 is the "wrap" migration path against real
// libzmq peers: a zmq4 PULL on the guarded transport behind socket.FromZMQ4, fed
// by pyzmq producer processes that each send and exit. Every exit ends one
// connection, never the loop: messages from the producers that come later
// are still delivered, and the junk is counted.
func TestPythonProducersLeaveZMQ4(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull, rcv, l, got := guardedZMQ4Loop(t, 8)
	defer rcv.Close()
	runErr := make(chan error, 1)
	go func() { runErr <- l.Run(ctx) }()

	ep := "tcp://" + pull.Addr().String()
	valid := hex.EncodeToString(statsFrame)
	for i := range 3 {
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := exec.CommandContext(pctx, py, "testdata/push_once.py", ep, "45", valid).CombinedOutput()
		pcancel()
		if err != nil {
			t.Fatalf("producer %d: %v\n%s", i, err, out)
		}
		select {
		case <-got:
		case err := <-runErr:
			t.Fatalf("Run ended after producer %d: %v", i, err)
		case <-ctx.Done():
			t.Fatalf("producer %d's message not delivered: %+v", i, l.Stats())
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if st := l.Stats(); st.Delivered != 3 || st.Dropped[decodeguard.ReasonDecode] != 3 {
		t.Fatalf("stats %+v", st)
	}
}
