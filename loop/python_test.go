package loop

import (
	"context"
	"encoding/hex"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/pypeer"
	"github.com/zmqguard/zmqguard/internal/vllmwire"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// TestPythonProducersLeaveZMQ4 is the "wrap" migration path against real
// libzmq peers: a zmq4 PULL on the guarded transport behind FromZMQ4, fed
// by pyzmq producer processes that each send and exit. Every exit ends one
// connection, never the loop: messages from the producers that come later
// are still delivered, and the junk is counted.
func TestPythonProducersLeaveZMQ4(t *testing.T) {
	py := pypeer.Require(t, "zmq")
	const scheme = "zmqguard-loop-test"
	if !slices.Contains(zmq4.Transports(), scheme) {
		if err := zmtpguard.RegisterTransport(scheme, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull := zmq4.NewPull(context.Background())
	if err := pull.Listen(scheme + "://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	rcv := FromZMQ4(pull)
	defer rcv.Close()
	got := make(chan struct{}, 8)
	l := newStatsLoop(t, rcv, func(context.Context, Delivery[vllmwire.Message]) error {
		got <- struct{}{}
		return nil
	}, nil)
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
