package socket

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestIdlePeersBuffersReclaimed: 64 peers each send a burst that grows
// their connection's read buffer to 256 KiB (DefaultReadBufferSize), then
// stay connected and silent. The buffers are given back once the peers are
// idle, and the socket counts them toward ReclaimBytes, so the heap in use
// drops without the test collecting and without a peer leaving (before, the
// 16 MiB of buffers stayed for as long as the peers did).
func TestIdlePeersBuffersReclaimed(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	// The peers never answer PINGs: no heartbeat within the test, or the
	// heap would drop because they are timed out.
	s := mustSocket(t, NewPull, func(o *Options) { o.HeartbeatInterval = 5 * time.Minute })
	addr := mustBind(t, s)[len("tcp://"):]
	const n = 64
	const perPeer = 384
	frame := append(longHeader(0, 1000), make([]byte, 1000)...)
	stream := bytes.Repeat(frame, perPeer) // 378 KiB
	var got sync.WaitGroup
	got.Add(1)
	go func() {
		defer got.Done()
		for range n * perPeer {
			if _, err := s.Recv(ctx); err != nil {
				return
			}
		}
	}()
	runtime.GC()
	base := heapInuse()
	var conns []net.Conn
	defer func() { // reachable until the end: a collected net.Conn closes
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		conns = append(conns, handshaken(t, ctx, addr, zmq4.Push)...)
	}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			c.Write(stream)
		}()
	}
	wg.Wait()
	got.Wait()
	if ctx.Err() != nil {
		t.Fatal("messages not all received")
	}
	during := heapInuse()
	if during < base+n*128<<10 {
		t.Fatalf("heap in use %d MiB after the bursts (baseline %d MiB): the read buffers did not grow, the test measures nothing",
			during>>20, base>>20)
	}
	deadline := time.Now().Add(20 * time.Second)
	// Grown, the buffers are 16 MiB on top of the rest (about 6 MiB: the
	// peers' connections, queues and recycled messages, measured after a
	// forced collection); idle, each peer keeps a 4 KiB read buffer.
	for heapInuse() > base+12<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("heap in use %d MiB 20 s after %d peers went idle (baseline %d MiB, %d MiB after the bursts; reclaims %d)",
				heapInuse()>>20, n, base>>20, during>>20, s.Stats().Reclaims)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p := len(s.Peers()); p != n {
		t.Fatalf("%d peers connected, want %d: the heap dropped because peers left", p, n)
	}
	if s.Stats().Reclaims == 0 {
		t.Fatal("heap dropped without a reclaim: the test did not exercise it")
	}
	t.Logf("heap in use: baseline %d MiB, %d MiB after the bursts, %d MiB with the peers idle", base>>20, during>>20, heapInuse()>>20)
}
