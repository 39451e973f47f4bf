package kvevents

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/poll"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// Issue 37 ("memory as stated"): subscribers that never read hold their
// shares of the send budget in the same payload bytes, not a copy each.
// Twelve raw SUB peers subscribe and never read while 300 batches of
// 48 KiB are published: each queue holds up to 12 MiB (its SendQueueBytes),
// so the queues count well over 64 MiB together, while the heap grows by
// what the publisher holds once (its replay buffer: 14 MiB) plus the
// queues' small per-message records. Copying the payload into every queue
// (what the XPUB did before SendShared) made the heap grow by the queued
// bytes.
func TestPublisherSharesPayloadAmongSlowSubscribers(t *testing.T) {
	const subs, batches, size = 12, 300, 48 << 10
	pub, err := NewPublisher(PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Bind: true, Logger: quiet,
		QueueSize: batches, Socket: socket.Options{WriteTimeout: -1, HeartbeatInterval: -1,
			SendQueueBytes: 12 << 20, SendTotalBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range subs {
		nc, err := net.Dial("tcp", strings.TrimPrefix(pub.Endpoint(), "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		nc.(*net.TCPConn).SetReadBuffer(4 << 10) // read nothing, buffer little
		c, err := zmtpguard.Handshake(ctx, nc, "SUB", nil, nil)
		if err != nil {
			nc.Close()
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.WriteMessage([]byte{1}); err != nil { // subscribe to everything
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	poll.WaitFor(t, waitTimeout, "12 subscribers connected", func() bool { return pub.Stats().Subscribers == subs })
	// A probe subscriber that receives a warm-up batch shows the XPUB
	// serves subscriptions (the raw peers' were sent before it dialed).
	probe, err := socket.New("SUB", socket.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	probe.Subscribe(nil)
	if err := probe.Dial(pub.Endpoint()); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		if _, err := probe.Recv(ctx); err == nil {
			close(got)
		}
	}()
warm:
	for {
		pub.PublishRaw([]byte{0x90}) // an empty array: a tiny batch
		select {
		case <-got:
			break warm
		case <-ctx.Done():
			t.Fatal("the probe subscriber got no batch in 30 s")
		case <-time.After(10 * time.Millisecond):
		}
	}
	probe.Close()
	poll.WaitFor(t, waitTimeout, "probe gone", func() bool { return pub.Stats().Subscribers == subs })
	warmed := pub.Stats().Published
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	payload := make([]byte, size)
	for i := range batches {
		p := append([]byte(nil), payload...)
		p[0] = byte(i)
		for pub.PublishRaw(p) == ErrQueueFull {
			time.Sleep(time.Millisecond)
		}
	}
	poll.WaitFor(t, waitTimeout, "every batch published", func() bool { return pub.Stats().Published == warmed+batches })
	queued := pub.pub.Stats().QueuedSendBytes
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(base)
	t.Logf("queued %d MiB for %d subscribers; heap grew %d MiB", queued>>20, subs, grown>>20)
	if queued < 64<<20 {
		t.Fatalf("only %d bytes queued for the silent subscribers: the test did not load the queues", queued)
	}
	if grown > queued/2 {
		t.Fatalf("heap grew %d bytes with %d bytes queued: the payloads are copied per subscriber", grown, queued)
	}
}
