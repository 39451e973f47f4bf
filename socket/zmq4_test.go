package socket

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// zmq4Pull returns a zmq4 PULL listening on 127.0.0.1 (port 0) and a PUSH
// dialled to it.
func zmq4Pull(t *testing.T) (pull, push zmq4.Socket) {
	t.Helper()
	pull = zmq4.NewPull(context.Background())
	if err := pull.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	push = zmq4.NewPush(context.Background())
	if err := push.Dial("tcp://" + pull.Addr().String()); err != nil {
		pull.Close()
		t.Fatal(err)
	}
	return pull, push
}

// TestZMQ4ReceiverCancelBlocked: cancelling the context of a Recv blocked
// in zmq4 closes the socket, which unblocks it; later Recvs report closed.
func TestZMQ4ReceiverCancelBlocked(t *testing.T) {
	pull, push := zmq4Pull(t)
	defer push.Close()
	rcv := FromZMQ4(pull).(*zmq4Receiver)
	defer rcv.Close()
	ctx, cancel := context.WithCancel(testCtx(t, 30*time.Second))
	done := make(chan error, 1)
	go func() {
		_, err := rcv.Recv(ctx)
		done <- err
	}()
	// Wait until the Recv is blocked in zmq4.
	for {
		rcv.mu.Lock()
		in := rcv.inRecv
		rcv.mu.Unlock()
		if in {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Recv = %v", err)
	}
	if _, err := rcv.Recv(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after cancel = %v", err)
	}
}

// TestZMQ4ReceiverDisconnect: a zmq4 peer that leaves cleanly is counted as
// a disconnect, not returned: Recv goes on with the other peer's messages.
func TestZMQ4ReceiverDisconnect(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	pull, stay := zmq4Pull(t)
	defer stay.Close()
	rcv := FromZMQ4(pull).(*zmq4Receiver)
	defer rcv.Close()
	leave := zmq4.NewPush(context.Background())
	if err := leave.Dial("tcp://" + pull.Addr().String()); err != nil {
		t.Fatal(err)
	}
	recv := func(what string) {
		t.Helper()
		m, err := rcv.Recv(ctx)
		if err != nil || len(m.Frames) != 1 || string(m.Frames[0]) != what || m.Peer != nil {
			t.Fatalf("Recv = %q %v, want %q", m.Frames, err, what)
		}
	}
	if err := leave.Send(zmq4.NewMsg([]byte("leaving"))); err != nil {
		t.Fatal(err)
	}
	recv("leaving")
	if err := leave.Close(); err != nil {
		t.Fatal(err)
	}
	// The EOF reaches zmq4's Recv whenever its reader sees it; a message
	// from the staying peer sent after it is received either way, and the
	// disconnect is counted by then or at the next message.
	for i := 0; rcv.disconnectCount() == 0; i++ {
		if err := stay.Send(zmq4.NewMsg([]byte("staying"))); err != nil {
			t.Fatal(err)
		}
		recv("staying")
		if ctx.Err() != nil {
			t.Fatalf("no disconnect counted after %d messages", i+1)
		}
	}
	if n := rcv.disconnectCount(); n != 1 {
		t.Fatalf("disconnects = %d, want 1", n)
	}
}

// TestZMQ4ReceiverClosedErrors: Recv after Close, and on a zmq4 socket
// closed behind the receiver's back, reports an error matching
// net.ErrClosed (a Loop then stops), never a classified drop.
func TestZMQ4ReceiverClosedErrors(t *testing.T) {
	pull, push := zmq4Pull(t)
	defer push.Close()
	rcv := FromZMQ4(pull).(*zmq4Receiver)
	if err := pull.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := rcv.Recv(testCtx(t, 30*time.Second))
	if !errors.Is(err, net.ErrClosed) || decodeguard.IsBadInput(err) {
		t.Fatalf("Recv on an externally closed socket = %v", err)
	}
	_ = rcv.Close()
	if _, err := rcv.Recv(context.Background()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv after Close = %v", err)
	}
}
