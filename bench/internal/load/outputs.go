package load

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/zmqguard/zmqguard/enginecore"
)

// OutputsMessage returns the outputs comparison's message, as vLLM's engine
// core sends it to a front-end: EngineCoreOutputs with 256 request outputs
// of one new token each, one in five (52) with 5-wide logprobs (token ids
// [1, 6] int32, logprobs [1, 6] float32, ranks [1] int64), every array in an
// aux frame: 157 frames (enginecore's BenchmarkDecode256 message).
func OutputsMessage() [][]byte {
	m := &enginecore.Message{Header: enginecore.Header{EngineIndex: 0, Timestamp: 12345.678}}
	for i := range 256 {
		o := enginecore.Output{RequestID: []byte("cmpl-" + strconv.Itoa(100000+i)), NewTokenIDs: []int64{int64(1000 + i)}}
		if i%5 == 0 {
			ids := make([]byte, 24)
			lps := make([]byte, 24)
			for k := range 6 {
				binary.LittleEndian.PutUint32(ids[4*k:], uint32(1000+i+k))
				binary.LittleEndian.PutUint32(lps[4*k:], math.Float32bits(-float32(k)/3))
			}
			o.NewLogprobs = enginecore.Logprobs{Present: true, Fields: 4,
				TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{1, 6}, Data: ids},
				Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{1, 6}, Data: lps},
				SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int64"), Shape: []int{1}, Data: make([]byte, 8)}}
		}
		m.Outputs = append(m.Outputs, o)
	}
	e := enginecore.Encoder{Threshold: 1}
	frames := e.Encode(m)
	out := make([][]byte, len(frames))
	for i, f := range frames {
		out[i] = append([]byte(nil), f...)
	}
	return out
}

// ChunkMultipart returns count repetitions of the multipart message frames
// as one ZMTP byte stream.
func ChunkMultipart(frames [][]byte, count int) []byte {
	var one []byte
	for i, f := range frames {
		one = AppendFrame(one, f, i < len(frames)-1)
	}
	buf := make([]byte, 0, len(one)*count)
	for range count {
		buf = append(buf, one...)
	}
	return buf
}
