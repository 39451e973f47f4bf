package loop

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"

	"github.com/go-zeromq/zmq4"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/vllmwire"
)

// TestZMQ4Receiver runs a loop over a real zmq4 PULL on 127.0.0.1: the
// seeds are dropped, the valid message delivered, and cancelling the
// context ends Run.
func TestZMQ4Receiver(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := FromZMQ4(pull)
	defer rcv.Close()

	for _, sd := range typedSeeds {
		if len(sd.frame) == 0 {
			continue
		}
		if err := push.Send(zmq4.NewMsg(sd.frame)); err != nil {
			t.Fatal(err)
		}
	}
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	l := newStatsLoop(t, rcv, func(_ context.Context, d Delivery[vllmwire.Message]) error {
		checkStats(t, d.Value)
		cancel()
		return nil
	}, nil)
	if err := l.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	st := l.Stats()
	if st.Delivered != 1 || st.TotalDropped() != uint64(len(typedSeeds)-1) ||
		st.Dropped[decodeguard.ReasonOversize] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// No Recv was blocked when ctx ended: the socket still works.
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Recv(testCtx(t)); err != nil || len(m.Frames) != 1 {
		t.Fatalf("Recv after Run = %v", err)
	}
}

// TestZMQ4ReceiverCancelBlocked: cancelling the context of a Recv blocked
// in zmq4 closes the socket, which unblocks it.
func TestZMQ4ReceiverCancelBlocked(t *testing.T) {
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := FromZMQ4(pull)
	defer rcv.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
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
	if _, err := rcv.Recv(context.Background()); !errors.Is(err, ErrReceiverClosed) {
		t.Fatalf("Recv after cancel = %v", err)
	}
}

// TestZMQ4ReceiverClosed: closing the receiver (from any goroutine) ends
// Run with an error wrapping net.ErrClosed.
func TestZMQ4ReceiverClosed(t *testing.T) {
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := FromZMQ4(pull)
	if err := push.Send(zmq4.NewMsg(statsFrame)); err != nil {
		t.Fatal(err)
	}
	l := newStatsLoop(t, rcv, func(context.Context, Delivery[vllmwire.Message]) error {
		go rcv.Close() // unblocks the next Recv
		return nil
	}, nil)
	err := l.Run(testCtx(t))
	if !errors.Is(err, net.ErrClosed) || !errors.Is(err, ErrReceiverClosed) {
		t.Fatalf("Run = %v", err)
	}
	if err := rcv.Close(); err != nil {
		t.Fatal(err)
	}
	// Recv on a cancelled context returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rcv.Recv(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// TestZMQ4ReceiverExternalClose: a zmq4 socket closed behind the adapter's
// back reads as closed too.
func TestZMQ4ReceiverExternalClose(t *testing.T) {
	pull, push := zmq4Pair(t, context.Background())
	defer push.Close()
	rcv := FromZMQ4(pull)
	if err := pull.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rcv.Recv(testCtx(t)); !errors.Is(err, ErrReceiverClosed) {
		t.Fatalf("Recv = %v", err)
	}
	_ = rcv.Close()
}
