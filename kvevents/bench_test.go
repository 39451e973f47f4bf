package kvevents

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/socket"
)

// realisticBatch is one vLLM map-form batch: 16 BlockStored events of 4
// block hashes and 64 token ids (block size 16), plus 4 BlockRemoved.
func realisticBatch(n uint64) ([]byte, int) {
	var evs []Event
	for i := uint64(0); i < 16; i++ {
		base := n*64 + i*4
		ev := Event{Type: BlockStored, BlockSize: 16, Medium: Some("GPU"),
			ParentBlockHash: Opt[Hash]{V: IntHash(base * 0x9e3779b97f4a7c15), Valid: i > 0}}
		for j := uint64(0); j < 4; j++ {
			ev.BlockHashes = append(ev.BlockHashes, IntHash((base+j+1)*0x9e3779b97f4a7c15))
		}
		for j := int64(0); j < 64; j++ {
			ev.TokenIDs = append(ev.TokenIDs, (int64(base)*64+j*7919)%151000)
		}
		evs = append(evs, ev)
	}
	for i := uint64(0); i < 4; i++ {
		evs = append(evs, Event{Type: BlockRemoved, Medium: Some("GPU"), BlockHashes: []Hash{IntHash(n*0x9e3779b97f4a7c15 + i)}})
	}
	return AppendBatch(nil, 1.7e9+float64(n), evs, Some[int64](0), true), len(evs)
}

// BenchmarkDecodeBatch decodes a realistic batch into a reused Batch.
func BenchmarkDecodeBatch(b *testing.B) {
	p, n := realisticBatch(1)
	benchDecode(b, p, n, decodeBatch)
}

// BenchmarkDecodeBatchShuffled is the same batch with its token ids in a
// random order: realisticBatch's ids step by 7919, so ids of one msgpack
// width come in runs of about ten, while vLLM's own batches (the golden
// vectors) mix uint16 and uint32 ids in runs of one to three.
func BenchmarkDecodeBatchShuffled(b *testing.B) {
	p, n := shuffledBatch(1)
	benchDecode(b, p, n, decodeBatch)
}

// shuffledBatch is realisticBatch(n) with each event's token ids shuffled
// (a fixed seed).
func shuffledBatch(n uint64) ([]byte, int) {
	p, k := realisticBatch(n)
	var bt Batch
	if err := decodeBatch(p, limits{}, &bt, nil); err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(n, 41))
	for i := range bt.Events {
		ts := bt.Events[i].TokenIDs
		r.Shuffle(len(ts), func(x, y int) { ts[x], ts[y] = ts[y], ts[x] })
	}
	return AppendBatch(nil, bt.TS, bt.Events, bt.DataParallelRank, true), k
}

// BenchmarkDecodeBatchOracle is the same batch through the oracle, the
// two-pass path (pre-scan, then msgp's readers) that DecodeBatch used
// before the one-pass decoder, for comparison in the same run.
func BenchmarkDecodeBatchOracle(b *testing.B) {
	p, n := realisticBatch(1)
	benchDecode(b, p, n, decodeChecked)
}

// benchDecode reports, besides wall time, the CPU time of the benchmark's
// own thread per batch and per event (cpu-ns/op, cpu-ns/event): on a shared
// machine those stay put while wall time grows with the load.
func benchDecode(b *testing.B, p []byte, n int, dec func([]byte, limits, *Batch, func(eventDrop)) error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var bt Batch
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := threadCPU()
	for range b.N {
		if err := dec(p, limits{}, &bt, nil); err != nil || len(bt.Events) != n {
			b.Fatal(err)
		}
	}
	cpu := threadCPU() - cpu0
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/event")
}

// BenchmarkEncodeBatch encodes a realistic batch (the Publisher's cost).
func BenchmarkEncodeBatch(b *testing.B) {
	var bt Batch
	p, _ := realisticBatch(1)
	decodeBatch(p, limits{}, &bt, nil)
	buf := make([]byte, 0, len(p))
	b.ReportAllocs()
	for range b.N {
		buf = AppendBatch(buf[:0], bt.TS, bt.Events, bt.DataParallelRank, true)
	}
}

// benchBase is where BenchmarkSubscriber's counted sequence numbers start.
const benchBase = 1 << 32

// BenchmarkSubscriber measures one Subscriber following 8 XPUB
// publishers of realistic batches, end to end through loopback TCP. Each
// publisher stays at most 256 batches ahead of what was delivered, so
// nothing is dropped.
func BenchmarkSubscriber(b *testing.B) {
	const sources = 8
	p, n := realisticBatch(1)
	delivered := map[string]*atomic.Int64{}
	var pubs []*socket.Socket
	for i := 0; i < sources; i++ {
		xp, err := socket.New("XPUB", socket.DefaultOptions())
		if err != nil {
			b.Fatal(err)
		}
		defer xp.Close()
		if err := xp.Bind("tcp://127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				if _, err := xp.Recv(context.Background()); err != nil {
					return
				}
			}
		}()
		delivered[xp.Endpoint()] = new(atomic.Int64)
		pubs = append(pubs, xp)
	}
	sub, err := NewSubscriber(Config{Logger: quiet, Handler: func(_ context.Context, u Update) error {
		if u.Kind == UpdateBatch && u.Seq >= benchBase {
			delivered[u.Source].Add(1)
		}
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	for _, xp := range pubs {
		if err := sub.Add(Source{Name: xp.Endpoint(), Live: xp.Endpoint()}); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	// Wait until every publisher's batches arrive (subscriptions in);
	// warm-up batches have small seqs and are not counted.
	for _, xp := range pubs {
		d := delivered[xp.Endpoint()]
		var seq [8]byte
		for w := uint64(0); d.Load() == 0 && ctx.Err() == nil; w++ {
			binary.BigEndian.PutUint64(seq[:], w)
			xp.Send(ctx, []byte("t"), seq[:], p)
			binary.BigEndian.PutUint64(seq[:], benchBase)
			xp.Send(ctx, []byte("t"), seq[:], p)
			time.Sleep(5 * time.Millisecond)
		}
		d.Store(0)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, xp := range pubs {
		d := delivered[xp.Endpoint()]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seq [8]byte
			for k := 1; k <= b.N && ctx.Err() == nil; k++ {
				for int64(k)-d.Load() > 256 && ctx.Err() == nil {
					time.Sleep(50 * time.Microsecond)
				}
				binary.BigEndian.PutUint64(seq[:], benchBase+uint64(k))
				xp.Send(ctx, []byte("t"), seq[:], p)
			}
			for d.Load() < int64(b.N) && ctx.Err() == nil {
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if ctx.Err() != nil {
		b.Fatal("timed out")
	}
	b.ReportMetric(float64(b.N*sources*n)/b.Elapsed().Seconds(), "events/s")
	cancel()
	<-done
}

// BenchmarkPayloadDigest is Batch.Digest's cost on the batch
// BenchmarkDecodeBatch decodes (compare the two ns/op in one run).
func BenchmarkPayloadDigest(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p, _ := realisticBatch(1)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := threadCPU()
	var sink uint64
	for range b.N {
		sink ^= payloadDigest(p)
	}
	b.ReportMetric(float64((threadCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if sink == 1 {
		b.Log(sink)
	}
}
