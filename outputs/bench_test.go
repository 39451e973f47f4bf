package outputs

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/enginecore"
	"github.com/zmqguard/zmqguard/socket"
)

// benchMessage is enginecore's benchmark message: 256 outputs of one token,
// one in five with 5-wide logprobs in aux frames (157 frames).
func benchMessage() [][]byte {
	m := &enginecore.Message{Header: enginecore.Header{EngineIndex: 0, Timestamp: 1.5}}
	for i := range 256 {
		o := enginecore.Output{RequestID: []byte("cmpl-" + strconv.Itoa(100000+i)), NewTokenIDs: []int64{int64(i)}}
		if i%5 == 0 {
			ids, lps := make([]byte, 24), make([]byte, 24)
			for k := range 6 {
				binary.LittleEndian.PutUint32(ids[4*k:], uint32(i+k))
				binary.LittleEndian.PutUint32(lps[4*k:], math.Float32bits(-float32(k)))
			}
			o.NewLogprobs = enginecore.Logprobs{Present: true, Fields: 4,
				TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1, 6}, Data: ids},
				Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{1, 6}, Data: lps},
				SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int64"), Shape: []int{1}, Data: make([]byte, 8)}}
		}
		m.Outputs = append(m.Outputs, o)
	}
	e := enginecore.Encoder{Threshold: 1}
	return append([][]byte(nil), e.Encode(m)...)
}

// BenchmarkReceiver pushes the 256-output message over loopback TCP from a
// Go PUSH to a Receiver: ns/op is per message received, decoded and
// handled; allocs/op counts the whole process (sender included).
func BenchmarkReceiver(b *testing.B) {
	frames := benchMessage()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make(chan struct{}, 1)
	var n int
	target := b.N + 1
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	so := socket.Options{}
	so.Logger = quiet
	r, err := New(Config{Logger: quiet, Socket: so, Handler: func(_ context.Context, m *enginecore.Message, _ *socket.Peer) error {
		if len(m.Outputs) != 256 {
			b.Errorf("%d outputs", len(m.Outputs))
		}
		if n++; n == 1 || n == target {
			got <- struct{}{}
		}
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	if err := r.Bind("tcp://127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(rctx) }()
	p := pusher(b, r.Endpoint())
	defer p.Close()
	if err := p.Send(ctx, frames...); err != nil { // warm-up
		b.Fatal(err)
	}
	<-got
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	go func() {
		for range b.N {
			if p.Send(ctx, frames...) != nil {
				return
			}
		}
	}()
	select {
	case <-got:
	case <-ctx.Done():
		b.Fatal("timed out")
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(b.N), "allocs/msg")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/output")
	stop()
	<-errc
}
