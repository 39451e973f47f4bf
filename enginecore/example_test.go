package enginecore_test

import (
	"encoding/binary"
	"fmt"

	"github.com/zmqguard/zmqguard/enginecore"
)

// A Go engine encodes an EngineCoreOutputs with logprobs (as vLLM would,
// the large array in an aux frame) and a front-end decodes it.
func Example() {
	ids := make([]byte, 4*6*16) // 16 positions x (1 sampled + 5 top) token ids, int32
	for i := 0; i < 6*16; i++ {
		binary.LittleEndian.PutUint32(ids[4*i:], uint32(100+i))
	}
	msg := &enginecore.Message{
		Header: enginecore.Header{EngineIndex: 1, Timestamp: 12345.678},
		Outputs: []enginecore.Output{{
			RequestID:   []byte("req-1"),
			NewTokenIDs: []int64{100},
			NewLogprobs: enginecore.Logprobs{Present: true, Fields: 4,
				TokenIDs:     enginecore.Array{DType: enginecore.DTypeOf("int32"), Shape: []int{16, 6}, Data: ids},
				Logprobs:     enginecore.Array{DType: enginecore.DTypeOf("float32"), Shape: []int{1, 1}, Data: make([]byte, 4)},
				SampledRanks: enginecore.Array{DType: enginecore.DTypeOf("int64"), Shape: []int{1}, Data: make([]byte, 8)}},
		}},
	}
	var enc enginecore.Encoder
	frames := enc.Encode(msg)

	var got enginecore.Message // reuse it: later decodes allocate nothing
	if err := enginecore.Decode(frames, &got, nil); err != nil {
		fmt.Println("dropped:", err)
		return
	}
	o := &got.Outputs[0]
	lp := &o.NewLogprobs.TokenIDs
	fmt.Println(len(frames), "frames; engine", got.EngineIndex, string(o.RequestID), o.NewTokenIDs)
	fmt.Println(lp.DType, lp.Shape, "from frame", lp.Frame, "last id", lp.Int(lp.Len()-1))

	// Junk is a classified error, never a panic.
	fmt.Println(enginecore.Decode([][]byte{{0x45}}, &got, nil))
	// Output:
	// 2 frames; engine 1 req-1 [100]
	// int32 [16 6] from frame 1 last id 195
	// zmqguard: decode: EngineCoreOutputs: want an array at offset 0
}
