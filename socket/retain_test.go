package socket

import (
	"math/rand/v2"
	"testing"
	"time"
)

// freeListBytes drains s's free list, sums what its batches keep and puts
// them back. The socket must be quiet (no reader taking batches).
func freeListBytes(t *testing.T, s *Socket) (batches, total, largest int) {
	t.Helper()
	var held []*batch
	for {
		select {
		case b := <-s.free:
			held = append(held, b)
			continue
		default:
		}
		break
	}
	for _, b := range held {
		n := 0
		for i := range b.slots {
			n += b.slots[i].footprint()
		}
		if n != b.kept {
			t.Errorf("a free batch keeps %d bytes, its record says %d", n, b.kept)
		}
		total += n
		largest = max(largest, n)
		s.free <- b
	}
	return len(held), total, largest
}

// TestRecycledBuffersStayBounded sends a stream of mixed sizes (mostly
// small, some up to 200 KiB) through a PULL socket: the buffers its free
// list keeps afterwards must respect batchRetain per batch and freeRetain in
// all, and the free list's own count must match. Before the cap, each slot
// kept the largest message it had ever held, and the free list grew to tens
// of MiB.
func TestRecycledBuffersStayBounded(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	pull := mustSocket(t, NewPull)
	ep := mustBind(t, pull)
	const senders = 4
	const perSender = 1500
	for i := range senders {
		push := mustSocket(t, NewPush)
		mustDial(t, push, ep)
		go func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			body := make([]byte, 200<<10)
			for range perSender {
				n := 1 + rng.IntN(200)
				if rng.IntN(8) == 0 {
					n = 1 + rng.IntN(len(body))
				}
				if err := push.Send(ctx, body[:n]); err != nil {
					return
				}
			}
		}()
	}
	for got := 0; got < senders*perSender; got++ {
		if _, err := pull.Recv(ctx); err != nil {
			t.Fatalf("after %d messages: %v", got, err)
		}
	}
	pull.recvMu.Lock()
	pull.releaseCur()
	pull.recvMu.Unlock()

	n, total, largest := freeListBytes(t, pull)
	t.Logf("free list: %d batches keep %d bytes (largest batch %d)", n, total, largest)
	if n == 0 {
		t.Fatal("no batch was recycled: the test exercised nothing")
	}
	if total > freeRetain {
		t.Errorf("the free list keeps %d bytes, over freeRetain %d", total, freeRetain)
	}
	if largest > batchRetain {
		t.Errorf("a free batch keeps %d bytes, over batchRetain %d", largest, batchRetain)
	}
	if got := pull.freeBytes.Load(); got != int64(total) {
		t.Errorf("freeBytes = %d, the batches keep %d", got, total)
	}
}

// TestPutBatchAccounting checks putBatch's bookkeeping directly: batches
// past the free list's budget are let go, and getBatch gives back what a
// batch kept.
func TestPutBatchAccounting(t *testing.T) {
	s, err := NewPull(DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill := func(b *batch, size int) {
		for i := range b.slots {
			sl := &b.slots[i]
			sl.scratch = make([]byte, 0, size)
		}
		b.n = len(b.slots)
	}
	// Each batch keeps 128 × 3 KiB = 384 KiB: under batchRetain, so the
	// free list takes ten of them (3.75 MiB) and lets the eleventh go.
	var bs []*batch
	for range 11 {
		b := s.getBatch(nil)
		fill(b, 3<<10)
		bs = append(bs, b)
	}
	for _, b := range bs {
		s.putBatch(b)
	}
	if got, want := len(s.free), freeRetain/(batchMsgs*(3<<10)); got != want {
		t.Errorf("free list holds %d batches, want %d", got, want)
	}
	if got := s.freeBytes.Load(); got > freeRetain {
		t.Errorf("freeBytes %d over freeRetain", got)
	}
	// A batch of larger slots keeps only batchRetain of them.
	for len(s.free) > 0 {
		s.getBatch(nil)
	}
	if got := s.freeBytes.Load(); got != 0 {
		t.Errorf("freeBytes = %d with an empty free list", got)
	}
	b := s.getBatch(nil)
	fill(b, 64<<10)
	s.putBatch(b)
	if b.kept > batchRetain || b.kept == 0 {
		t.Errorf("a batch of 128 × 64 KiB slots keeps %d bytes, want (0, %d]", b.kept, batchRetain)
	}
}
