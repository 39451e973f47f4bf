package socket

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestSlowRouterPeer: one ROUTER peer never reads while another is served
// request by request. The healthy peer gets every reply, the slow peer's
// messages are dropped at its HWM, and memory stays bounded.
func TestSlowRouterPeer(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	const hwm = 200
	router := mustSocket(t, NewRouter, func(o *Options) { o.HWM = hwm })
	ep := mustBind(t, router)
	rawPeer(t, ctx, ep, zmq4.Dealer, []byte("slow")) // never reads
	healthy := mustSocket(t, NewDealer, func(o *Options) { o.Identity = []byte("healthy") })
	mustDial(t, healthy, ep)
	waitPeers(t, ctx, router, 2)

	base := heapAlloc()
	var peak uint64
	junk := make([]byte, 16<<10)
	const rounds = 2000
	for i := 0; i < rounds; i++ {
		if err := healthy.Send(ctx, []byte("req")); err != nil {
			t.Fatal(err)
		}
		m, err := router.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Frames[0]) != "healthy" {
			t.Fatalf("from %q", m.Frames[0])
		}
		// Every round floods the slow peer, then answers the healthy one.
		for j := 0; j < 4; j++ {
			if err := router.Send(ctx, []byte("slow"), junk); err != nil {
				t.Fatal(err)
			}
		}
		if err := router.Send(ctx, []byte("healthy"), []byte("rep")); err != nil {
			t.Fatal(err)
		}
		if got := recvString(t, ctx, healthy); !eq(got, "rep") {
			t.Fatalf("healthy got %q", got)
		}
		if i%100 == 0 {
			peak = max(peak, heapInuse())
		}
	}
	st := router.Stats()
	if st.DroppedHWM == 0 {
		t.Fatalf("slow peer never hit its HWM: %+v", st)
	}
	// Queue bound: hwm messages of 16 KiB (plus buffers) per slow peer.
	if limit := base + hwm*(16<<10)*2 + 32<<20; peak > limit {
		t.Fatalf("heap in use peaked at %d bytes (base %d, limit %d)", peak, base, limit)
	}
	t.Logf("dropped %d of %d slow-peer messages; heap base %d peak %d", st.DroppedHWM, 4*rounds, base, peak)
}

// TestSlowXPubSubscriber: one subscriber never reads while another receives
// every message.
func TestSlowXPubSubscriber(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	const hwm = 200
	xpub := mustSocket(t, NewXPub, func(o *Options) { o.HWM = hwm })
	ep := mustBind(t, xpub)
	slow := rawPeer(t, ctx, ep, zmq4.XSub, nil)
	slow.WriteMessage([]byte("\x01"))
	slow.Flush()
	healthy := mustSocket(t, NewSub)
	healthy.Subscribe(nil)
	mustDial(t, healthy, ep)
	for i := 0; i < 2; i++ {
		if got := recvString(t, ctx, xpub); !eq(got, "\x01") {
			t.Fatalf("xpub got %q", got)
		}
	}
	base := heapAlloc()
	var peak uint64
	payload := make([]byte, 16<<10)
	const windows, per = 80, 100 // healthy queue never exceeds per < hwm
	for w := 0; w < windows; w++ {
		for i := 0; i < per; i++ {
			payload[0] = byte(i)
			if err := xpub.Send(ctx, payload); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < per; i++ {
			m, err := healthy.Recv(ctx)
			if err != nil {
				t.Fatalf("window %d message %d: %v", w, i, err)
			}
			if m.Frames[0][0] != byte(i) || len(m.Frames[0]) != len(payload) {
				t.Fatalf("window %d: got message %d, want %d", w, m.Frames[0][0], i)
			}
		}
		peak = max(peak, heapInuse())
	}
	st := xpub.Stats()
	if st.DroppedHWM == 0 {
		t.Fatalf("slow subscriber never hit its HWM: %+v", st)
	}
	if limit := base + hwm*(16<<10)*2 + 32<<20; peak > limit {
		t.Fatalf("heap in use peaked at %d bytes (base %d, limit %d)", peak, base, limit)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := healthy.Recv(short); err == nil {
		t.Fatal("healthy subscriber got an extra message")
	}
	t.Logf("dropped %d of %d for the slow subscriber; heap base %d peak %d", st.DroppedHWM, windows*per, base, peak)
}
