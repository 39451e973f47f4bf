package enginecore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/zmqguard/zmqguard/internal/testkit/pypeer"
)

// benchOutputs is the benchmark message: 256 outputs of one token each, one
// in five (52) with 5-wide logprobs (token ids [1, 6] int32, logprobs
// [1, 6] float32, ranks [1] int64) in aux frames: 157 frames.
func benchFrames(tb testing.TB) [][]byte {
	m := &Message{Header: Header{EngineIndex: 1, Timestamp: 12345.678}}
	for i := range 256 {
		o := Output{RequestID: []byte("cmpl-" + strconv.Itoa(100000+i)), NewTokenIDs: []int64{int64(1000 + i)}}
		if i%5 == 0 {
			ids := make([]byte, 24)
			lps := make([]byte, 24)
			for k := range 6 {
				binary.LittleEndian.PutUint32(ids[4*k:], uint32(1000+i+k))
				binary.LittleEndian.PutUint32(lps[4*k:], math.Float32bits(-float32(k)/3))
			}
			o.NewLogprobs = Logprobs{Present: true, Fields: 4,
				TokenIDs:     Array{DType: dtInt32, Shape: []int{1, 6}, Data: ids},
				Logprobs:     Array{DType: dtFloat32, Shape: []int{1, 6}, Data: lps},
				SampledRanks: Array{DType: dtInt64, Shape: []int{1}, Data: make([]byte, 8)}}
		}
		m.Outputs = append(m.Outputs, o)
	}
	e := Encoder{Threshold: 1} // every array in an aux frame
	frames := e.Encode(m)
	out := make([][]byte, len(frames))
	for i, f := range frames {
		out[i] = append([]byte(nil), f...)
	}
	if len(out) != 1+3*52 {
		tb.Fatalf("%d frames", len(out))
	}
	return out
}

// BenchmarkDecode256 decodes the 256-output message into a reused Message:
// ns/op is per message; ns/output, allocs/op (0 in steady state) and
// cpu-ns/msg (process CPU time per message, the figure to compare with
// BenchmarkDecode256Python's on a loaded machine) are reported too.
func BenchmarkDecode256(b *testing.B) {
	frames := benchFrames(b)
	var m Message
	if err := Decode(frames, &m, nil); err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	for range b.N {
		if err := Decode(frames, &m, nil); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime() - c0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/256, "ns/output")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
}

// BenchmarkDecodeHeader is the coordinator's one-frame fast path.
func BenchmarkDecodeHeader(b *testing.B) {
	frame := appendHeader(nil, &Header{EngineIndex: 1, HasStats: true, Timestamp: 12345.678,
		Stats: SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7}})
	var h Header
	b.ReportAllocs()
	for range b.N {
		if err := DecodeHeader(frame, nil, &h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode256 encodes the same message.
func BenchmarkEncode256(b *testing.B) {
	frames := benchFrames(b)
	var m Message
	if err := Decode(frames, &m, nil); err != nil {
		b.Fatal(err)
	}
	e := Encoder{Threshold: 1}
	b.ReportAllocs()
	e.Encode(&m)
	b.ResetTimer()
	for range b.N {
		e.Encode(&m)
	}
}

// BenchmarkDecode256Python runs testdata/unpack_bench.py on the same frames
// (for 0.5 s of CPU per variant, whatever b.N is) and reports its CPU
// ns/msg: msgpack.unpackb of the body, and vLLM's decode (unpackb plus numpy
// views of the arrays).
func BenchmarkDecode256Python(b *testing.B) {
	py := pypeer.Require(b, "msgpack", "numpy")
	path := filepath.Join(b.TempDir(), "frames.bin")
	var buf []byte
	for _, f := range benchFrames(b) {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "unpack_bench.py"), path, "0.5").Output()
	if err != nil {
		b.Fatalf("python: %v", err)
	}
	var r struct {
		Unpackb float64 `json:"unpackb_ns_per_msg"`
		VLLM    float64 `json:"vllm_ns_per_msg"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		b.Fatalf("python printed %q: %v", out, err)
	}
	b.ReportMetric(r.Unpackb, "py-unpackb-ns/msg")
	b.ReportMetric(r.VLLM, "py-vllm-ns/msg")
	b.ReportMetric(0, "ns/op")
}
