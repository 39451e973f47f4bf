package enginecore

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// splitFrames turns a fuzz input into frames: a sequence of [uint16
// little-endian length][bytes], the rest of the input as the last frame.
func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) >= 2 && len(frames) < defaultMaxFrames+8 {
		n := int(binary.LittleEndian.Uint16(b))
		if n > len(b)-2 {
			break
		}
		frames = append(frames, b[2:2+n])
		b = b[2+n:]
	}
	return append(frames, b)
}

// joinFrames is splitFrames' inverse (for seeds).
func joinFrames(frames [][]byte) []byte {
	var b []byte
	for _, f := range frames[:len(frames)-1] {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return append(b, frames[len(frames)-1]...)
}

func fuzzSeeds(t testing.TB) [][][]byte {
	full := (&Encoder{}).Encode(fullMessage())
	full = append([][]byte(nil), full...)
	aux := make([]byte, 2048)
	// vLLM's full-length outputs (14 fields, most nil), one with logprobs
	// in aux frames, one with num_nans_in_logits set.
	short := &Message{Header: Header{EngineIndex: 1, Timestamp: ts}, Outputs: []Output{
		{RequestID: []byte("cmpl-1"), NewTokenIDs: []int64{1, 1000, 70000}},
		{RequestID: []byte("cmpl-2"), NewTokenIDs: []int64{5}, NewLogprobs: fullMessage().Outputs[0].NewLogprobs},
		{RequestID: []byte("cmpl-3"), NewTokenIDs: []int64{}, NumNaNsInLogits: 1},
	}}
	short.OutputsLen = len(short.Outputs)
	full14 := append([][]byte(nil), (&Encoder{Threshold: 1}).Encode(short)...)
	return [][][]byte{
		full14,
		{unhex(t, vecOutputs)},
		{unhex(t, vecUtilityTrue)},
		{unhex(t, vecStats)},
		{arrayMsg(t, vecInlineI4)},
		{arrayMsg(t, vecTorchF32)},
		{arrayMsg(t, vecAuxF4), aux},
		{arrayMsg(t, "93a33c663492cc800405"), aux}, // aux index out of range
		{arrayMsg(t, "93a33c663492cf7fffffffffffffffcf7fffffffffffffff01"), aux}, // shape overflow
		{arrayMsg(t, "93a51b5b324a349103c70c03010000000200000003000000")},        // dtype with escapes
		{{0x45}},                           // the seed's junk frame
		{unhex(t, "91ff"), {}, {}, {}, {}}, // aux frames nobody references
		full,
		append([][]byte{unhex(t, vecOutputs)}, make([][]byte, defaultMaxFrames+4)...), // aux count bomb
		{unhex(t, "94009199a17890c0c0c0c0c0c0d40100c0cb40c81cd6c8b43958")},            // pickle in kv_transfer_params
	}
}

// FuzzDecode feeds multi-frame inputs to Decode: it must not panic (a
// recovered decoder panic is a failure too), every error must be
// classified, and an accepted message must re-encode to frames that decode
// and re-encode to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(joinFrames(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		frames := splitFrames(in)
		var m Message
		err := Decode(frames, &m, nil)
		// The same input decoded into a Message reused after a message with
		// every field set (reset keeps capacity and skips clean outputs):
		// the same outcome and, if accepted, the same re-encoding.
		reused := reusedAfterFull(t)
		rerr := Decode(frames, reused, nil)
		if (err == nil) != (rerr == nil) || decodeguard.ReasonOf(err) != decodeguard.ReasonOf(rerr) {
			t.Fatalf("fresh decode: %v; into a reused message: %v", err, rerr)
		}
		if err == nil {
			assertSameEncoding(t, &m, reused)
		}
		if err != nil {
			if r := decodeguard.ReasonOf(err); !r.Valid() || r == decodeguard.ReasonDecoderPanic {
				t.Fatalf("unclassified or panic: %v", err)
			}
			return
		}
		// The one-pass checks are never weaker than msgpscan.Scan's.
		scanLim := decodeguard.Limits{AllowExt: []int8{extRawView}}
		if err := msgpscan.Scan(frames[0], &scanLim); err != nil {
			t.Fatalf("Decode accepted a body msgpscan.Scan refuses: %v", err)
		}
		if len(m.Outputs) != m.OutputsLen {
			t.Fatalf("%d outputs, header says %d", len(m.Outputs), m.OutputsLen)
		}
		var e1, e2 Encoder
		f1 := e1.Encode(&m)
		var m2 Message
		if err := Decode(f1, &m2, nil); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		f2 := e2.Encode(&m2)
		if len(f1) != len(f2) {
			t.Fatalf("re-encode: %d frames then %d", len(f1), len(f2))
		}
		for i := range f1 {
			if !bytes.Equal(f1[i], f2[i]) {
				t.Fatalf("frame %d unstable:\n%x\n%x", i, f1[i], f2[i])
			}
		}
	})
}

// FuzzSpecialValue: a utility result under call id -1 or -2 never panics
// the typed decoders; what they accept re-decodes to itself.
func FuzzSpecialValue(f *testing.F) {
	f.Add(int8(-1), []byte("\x92\xb4RECONFIGURE_FINISHED\x01"))
	f.Add(int8(-2), []byte("\x83\xa2id\x00\xa6status\xa9unhealthy\xaafault_info\xacRuntimeError"))
	f.Add(int8(-2), []byte("\x82\xa2id\x00\xa6status\xa7healthy"))
	f.Add(int8(-1), []byte("\x92\x01\xa1x"))
	f.Fuzz(func(t *testing.T, special int8, result []byte) {
		u := UtilityOutput{Special: int64(special), HasResult: true, ResultType: []byte{0xc0}, Result: result}
		v, ok, err := u.SpecialValue()
		if ok != (err == nil && v != nil) {
			t.Fatalf("ok %v with value %v, err %v", ok, v, err)
		}
		if err != nil && decodeguard.ReasonOf(err) != decodeguard.ReasonValidate {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

// reusedAfterFull returns a Message into which fullMessage's frames (every
// field set, in both outputs' worth of slots) were decoded.
func reusedAfterFull(t testing.TB) *Message {
	t.Helper()
	frames := append([][]byte(nil), (&Encoder{}).Encode(fullMessage())...)
	var m Message
	if err := Decode(frames, &m, nil); err != nil {
		t.Fatal(err)
	}
	// The reuse must see slots decoded dirty: make more of them, each a
	// copy of the full output.
	big := fullMessage()
	for len(big.Outputs) < 8 {
		big.Outputs = append(big.Outputs, big.Outputs[0])
	}
	big.OutputsLen = len(big.Outputs)
	if err := Decode(append([][]byte(nil), (&Encoder{}).Encode(big)...), &m, nil); err != nil {
		t.Fatal(err)
	}
	return &m
}

// assertSameEncoding fails unless a and b encode to the same frames.
func assertSameEncoding(t testing.TB, a, b *Message) {
	t.Helper()
	var ea, eb Encoder
	fa := append([][]byte(nil), ea.Encode(a)...)
	fb := eb.Encode(b)
	if len(fa) != len(fb) {
		t.Fatalf("fresh decode encodes to %d frames, reused decode to %d", len(fa), len(fb))
	}
	for i := range fa {
		if !bytes.Equal(fa[i], fb[i]) {
			t.Fatalf("frame %d: fresh decode and reused decode differ:\n%x\n%x", i, fa[i], fb[i])
		}
	}
}
