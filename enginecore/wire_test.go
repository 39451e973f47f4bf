package enginecore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/decodeguard"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func i32s(v ...int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// The vectors of vLLM's engine output stream, produced with Python's
// msgpack (which picks msgspec's encodings for these types).
const (
	vecOutput1     = "92a57265712d31920b0c"
	vecOutput2     = "96a57265712d32910dc0c0c001"
	vecOutputs     = "96009292a57265712d31920b0c96a57265712d32910dc0c0c001c0cb40c81cd6c8b43958c091a57265712d32"
	vecInlineI4    = "93a33c69349103c70c03010000000200000003000000"
	vecAuxF4       = "93a33c663492cc800401"
	vecTorchF32    = "93a7666c6f617433329102d7030000003f000080bf"
	vecUtilityTrue = "950090c0cb40c81cd6c8b4395893cfab54a98ceb1f0ad2c092c0c3"
	vecStats       = "94019084b06e756d5f72756e6e696e675f7265717303b06e756d5f77616974696e675f7265717305ac737465705f636f756e7465722aac63757272656e745f7761766507cb40c81cd6c8b43958"
	vecWaveDone    = "970090c0cb40c81cd6c8b43958c0c007"
	vecStartWave   = "980190c0cb40c81cd6c8b43958c0c0c008"
)

const ts = 12345.678

func twoOutputs() *Message {
	return &Message{
		Header: Header{Timestamp: ts, HasFinishedRequests: true},
		Outputs: []Output{
			{RequestID: []byte("req-1"), NewTokenIDs: []int64{11, 12}},
			{RequestID: []byte("req-2"), NewTokenIDs: []int64{13}, HasFinishReason: true, FinishReason: FinishLength},
		},
		FinishedRequestIDs: [][]byte{[]byte("req-2")},
	}
}

// TestEncodeVectors: the short hand-built vectors (trailing defaults
// dropped, as Python's msgpack was told to write them) decode to the same
// message the encoder writes at full length, as msgspec does (every field of
// an array_like struct). The byte-exact comparison with vLLM's own bytes is
// TestGoldenEngineOutputs.
func TestEncodeVectors(t *testing.T) {
	var e Encoder
	check := func(name string, m *Message, short string) {
		t.Helper()
		frames := e.Encode(m)
		if len(frames) != 1 {
			t.Fatalf("%s: %d frames, want 1", name, len(frames))
		}
		got := append([]byte(nil), frames[0]...)
		if got[0] != 0x98 {
			t.Errorf("%s: array header %#x, want 0x98 (all 8 fields)", name, got[0])
		}
		var d Message
		if err := Decode([][]byte{unhex(t, short)}, &d, nil); err != nil {
			t.Fatalf("%s: short form: %v", name, err)
		}
		d.StatsRaw = nil // re-encode from the typed fields, not the bytes received
		if again := e.Encode(&d)[0]; !bytes.Equal(again, got) {
			t.Errorf("%s: short form re-encoded\n got %x\nwant %x", name, again, got)
		}
	}
	check("two outputs", twoOutputs(), vecOutputs)
	check("stats", &Message{Header: Header{EngineIndex: 1, HasStats: true, Timestamp: ts,
		Stats: SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7}}}, vecStats)
	check("wave complete", &Message{Header: Header{Timestamp: ts, HasWaveComplete: true, WaveComplete: 7}}, vecWaveDone)
	check("start wave", &Message{Header: Header{EngineIndex: 1, Timestamp: ts, HasStartWave: true, StartWave: 8}}, vecStartWave)
	check("utility", &Message{Header: Header{Timestamp: ts, HasUtilityOutput: true},
		Utility: UtilityOutput{CallID: 0xab54a98ceb1f0ad2, HasResult: true, ResultType: []byte{0xc0}, Result: []byte{0xc3}}}, vecUtilityTrue)

	// Single outputs: 14 fields, the defaults included.
	const full1 = "9ea57265712d31920b0cc0c0c0c0c0c0c0c0c0c0c000"
	if got := hex.EncodeToString(e.appendOutput(nil, &twoOutputs().Outputs[0])); got != full1 {
		t.Errorf("output 1: %s", got)
	}
	e.OutputFields = outputFieldsMax
	if got := hex.EncodeToString(e.appendOutput(nil, &twoOutputs().Outputs[0])); got != "dc0011"+full1[2:]+"c0c0c0" {
		t.Errorf("output 1 with 17 fields: %s", got)
	}
	e.OutputFields = 0
	// Arrays, through the internal appenders.
	e.frames = e.frames[:1]
	if got := hex.EncodeToString(e.appendArray(nil, &Array{DType: dtInt32, Shape: []int{3}, Data: i32s(1, 2, 3)})); got != vecInlineI4 {
		t.Errorf("inline <i4: %s", got)
	}
	if got := hex.EncodeToString(e.appendArray(nil, &Array{DType: dtFloat32, Torch: true, Shape: []int{2}, Data: f32s(0.5, -1)})); got != vecTorchF32 {
		t.Errorf("torch float32: %s", got)
	}
	big := make([]byte, 128*4*4)
	if got := hex.EncodeToString(e.appendArray(nil, &Array{DType: dtFloat32, Shape: []int{128, 4}, Data: big})); got != vecAuxF4 {
		t.Errorf("aux <f4: %s", got)
	}
	if len(e.frames) != 2 || &e.frames[1][0] != &big[0] {
		t.Errorf("aux frame not appended zero-copy: %d frames", len(e.frames))
	}
}

func TestAppendHeaderVectors(t *testing.T) {
	h := Header{EngineIndex: 1, HasStats: true, Timestamp: ts, OutputsLen: 9, HasUtilityOutput: true,
		Stats: SchedulerStats{NumRunningReqs: 3, NumWaitingReqs: 5, StepCounter: 42, CurrentWave: 7}}
	var e Encoder
	want := e.Encode(&Message{Header: Header{EngineIndex: 1, HasStats: true, Timestamp: ts, Stats: h.Stats}})[0]
	if got := appendHeader(nil, &h); !bytes.Equal(got, want) {
		t.Errorf("got %x\nwant %x", got, want)
	}
}

func TestDecodeVectors(t *testing.T) {
	var m Message
	if err := Decode([][]byte{unhex(t, vecOutputs)}, &m, nil); err != nil {
		t.Fatal(err)
	}
	if m.OutputsLen != 2 || len(m.Outputs) != 2 || m.Timestamp != ts || !m.HasFinishedRequests ||
		len(m.FinishedRequestIDs) != 1 || string(m.FinishedRequestIDs[0]) != "req-2" {
		t.Fatalf("header: %+v", m.Header)
	}
	o := m.Outputs[1]
	if string(o.RequestID) != "req-2" || len(o.NewTokenIDs) != 1 || o.NewTokenIDs[0] != 13 ||
		!o.HasFinishReason || o.FinishReason != FinishLength || o.Fields != 6 {
		t.Fatalf("output 2: %+v", o)
	}
	if err := Decode([][]byte{unhex(t, vecUtilityTrue)}, &m, nil); err != nil {
		t.Fatal(err)
	}
	if !m.HasUtilityOutput || m.Utility.CallID != 0xab54a98ceb1f0ad2 || !m.Utility.HasResult ||
		!bytes.Equal(m.Utility.Result, []byte{0xc3}) || len(m.Outputs) != 0 {
		t.Fatalf("utility: %+v", m.Utility)
	}
	for _, v := range []string{vecStats, vecWaveDone, vecStartWave} {
		var h Header
		if err := DecodeHeader(unhex(t, v), nil, &h); err != nil {
			t.Fatal(v, err)
		}
		if err := Decode([][]byte{unhex(t, v)}, &m, nil); err != nil || m.Header != h {
			t.Fatalf("%s: full decode %v, header %+v vs %+v", v, err, m.Header, h)
		}
	}
}

// arrayMsg wraps an array body as the pooling_output of one output.
func arrayMsg(t testing.TB, arr string) []byte {
	return unhex(t, "94009195a17890c0c0"+arr+"c0cb40c81cd6c8b43958")
}

func TestDecodeArrays(t *testing.T) {
	var m Message
	if err := Decode([][]byte{arrayMsg(t, vecInlineI4)}, &m, nil); err != nil {
		t.Fatal(err)
	}
	a := &m.Outputs[0].PoolingOutput
	if a.DType != dtInt32 || a.Torch || len(a.Shape) != 1 || a.Shape[0] != 3 || a.Len() != 3 || a.Int(2) != 3 || a.Frame != 0 {
		t.Fatalf("inline: %+v", a)
	}
	if got := a.appendInts(nil); len(got) != 3 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("AppendInts: %v", got)
	}
	if err := Decode([][]byte{arrayMsg(t, vecTorchF32)}, &m, nil); err != nil {
		t.Fatal(err)
	}
	a = &m.Outputs[0].PoolingOutput
	if a.DType != dtFloat32 || !a.Torch || a.Float(0) != 0.5 || a.Float(1) != -1 {
		t.Fatalf("torch: %+v", a)
	}
	aux := f32s(make([]float32, 512)...)
	binary.LittleEndian.PutUint32(aux[4*511:], math.Float32bits(2.5))
	if err := Decode([][]byte{arrayMsg(t, vecAuxF4), aux}, &m, nil); err != nil {
		t.Fatal(err)
	}
	a = &m.Outputs[0].PoolingOutput
	if a.Frame != 1 || a.Len() != 512 || a.Float(511) != 2.5 || &a.Data[0] != &aux[0] {
		t.Fatalf("aux: %+v", a.Shape)
	}
	if v, ok := a.float32s(); !ok || len(v) != 512 || v[511] != 2.5 {
		t.Fatalf("Float32s view: %v", ok)
	}
	if _, ok := a.int32s(); ok {
		t.Fatal("Int32s on float32 data")
	}
	// Unaligned inline data: the view refuses, the accessor reads.
	var aa Array
	d := decoder{m: &Message{used: make([]uint64, 1)}, frames: [][]byte{nil}, budget: 1000}
	buf := append([]byte{0}, unhex(t, vecInlineI4)...)
	if _, err := d.array(buf[1:], buf[1:], &aa, "x"); err != nil {
		t.Fatal(err)
	}
	if uintptr(unsafePointer(aa.Data))%4 != 0 {
		if _, ok := aa.int32s(); ok {
			t.Fatal("Int32s accepted unaligned data")
		}
	}
	if aa.Int(0) != 1 {
		t.Fatal("accessor on unaligned data")
	}
}

func TestDTypes(t *testing.T) {
	for d := dtBool; d < numDTypes; d++ {
		for _, torch := range []bool{false, true} {
			name := d.numpy()
			if torch || name == "" {
				name = d.String()
			}
			got, gotTorch, ok := parseDType([]byte(name))
			if !ok || got != d || gotTorch != (torch || d.numpy() == "") {
				t.Errorf("%q -> %v %v %v", name, got, gotTorch, ok)
			}
		}
	}
	for _, bad := range []string{">i4", "<i3", "object", "", "|O", "<M8", "float32\x1b[2J"} {
		if _, _, ok := parseDType([]byte(bad)); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	bf := Array{DType: dtBFloat16, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0x00, 0xc0}} // 1.0, -2.0
	if bf.Float(0) != 1 || bf.Float(1) != -2 {
		t.Errorf("bfloat16: %v %v", bf.Float(0), bf.Float(1))
	}
	h := Array{DType: dtFloat16, Shape: []int{3}, Data: []byte{0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00}} // 1, -2, 2^-24
	if h.Float(0) != 1 || h.Float(1) != -2 || h.Float(2) != math.Ldexp(1, -24) {
		t.Errorf("float16: %v %v %v", h.Float(0), h.Float(1), h.Float(2))
	}
}

func TestRoundTripFull(t *testing.T) {
	m := fullMessage()
	var e Encoder
	frames := e.Encode(m)
	if len(frames) != 3 {
		t.Fatalf("%d frames, want 3 (two aux)", len(frames))
	}
	var got Message
	if err := Decode(frames, &got, nil); err != nil {
		t.Fatal(err)
	}
	frames2 := (&Encoder{}).Encode(&got)
	if len(frames2) != len(frames) {
		t.Fatalf("re-encode: %d frames", len(frames2))
	}
	for i := range frames {
		if !bytes.Equal(frames[i], frames2[i]) {
			t.Fatalf("frame %d differs after a round trip:\n%x\n%x", i, frames[i], frames2[i])
		}
	}
	o := &got.Outputs[0]
	if !o.NewLogprobs.Present || o.NewLogprobs.TokenIDs.Frame != 1 || o.NewLogprobs.Logprobs.Frame != 2 ||
		o.StopReason.Kind != StopStr || string(o.StopReason.Str) != "</s>" || len(o.Events) != 2 ||
		o.Events[1].Type != EventScheduled || o.NumNaNsInLogits != 2 || !o.NewSamplingMask.Present ||
		o.RoutedExperts.DType != dtInt16 || got.Outputs[1].StopReason.Int != 7 {
		t.Fatalf("decoded: %+v", o)
	}
}

// fullMessage has every field set: two outputs, logprobs in two aux
// frames, stats, utility output, finished requests.
func fullMessage() *Message {
	ids := make([]int32, 16*6)
	lps := make([]float32, 16*6)
	for i := range ids {
		ids[i], lps[i] = int32(i*7), -float32(i)/8
	}
	return &Message{
		Header: Header{EngineIndex: 3, HasStats: true, Timestamp: ts, HasUtilityOutput: true,
			HasFinishedRequests: true, Stats: SchedulerStats{NumRunningReqs: 1, KVCacheUsage: 0.5}},
		Outputs: []Output{{
			RequestID: []byte("cmpl-α"), NewTokenIDs: []int64{1, 300, 70000},
			NewLogprobs: Logprobs{Present: true, Fields: 4,
				TokenIDs:     Array{DType: dtInt32, Shape: []int{16, 6}, Data: i32s(ids...)},
				Logprobs:     Array{DType: dtFloat32, Shape: []int{16, 6}, Data: f32s(lps...)},
				SampledRanks: Array{DType: dtInt64, Shape: []int{1}, Data: make([]byte, 8)}},
			NewPromptLogprobs: Logprobs{Present: true, Fields: 3,
				TokenIDs:     Array{DType: dtInt64, Torch: true, Shape: []int{1, 1}, Data: make([]byte, 8)},
				Logprobs:     Array{DType: dtBFloat16, Torch: true, Shape: []int{1, 1}, Data: []byte{0x80, 0x3f}},
				SampledRanks: Array{DType: dtInt64, Torch: true, Shape: []int{1}, Data: make([]byte, 8)}},
			PoolingOutput:   Array{DType: dtFloat32, Torch: true, Shape: []int{}, Data: f32s(1.5)},
			HasFinishReason: true, FinishReason: FinishStop,
			StopReason: StopReason{Kind: StopStr, Str: []byte("</s>")},
			HasEvents:  true, Events: []Event{{EventQueued, 1.5}, {EventScheduled, 2.5}},
			KVTransferParams: []byte{0x81, 0xa1, 'k', 0x01}, TraceHeaders: []byte{0x80},
			RoutedExperts:   Array{DType: dtInt16, Shape: []int{1, 2}, Data: []byte{1, 0, 2, 0}},
			NumNaNsInLogits: 2, MMCacheMissHashes: []byte{0x91, 0xa1, 'h'},
			NewSamplingMask: SamplingMask{Present: true, TokenIDs: Array{DType: dtInt64, Shape: []int{1}, Data: make([]byte, 8)},
				HasCuNumGenerated: true, CuNumGenerated: []int64{0, 1}},
			SpecDecodeMetrics: []byte{0x90},
		}, {
			RequestID: []byte("r2"), NewTokenIDs: []int64{}, StopReason: StopReason{Kind: StopInt, Int: 7},
		}},
		Utility:            UtilityOutput{CallID: 9, HasFailure: true, FailureMessage: []byte("boom")},
		FinishedRequestIDs: [][]byte{[]byte("cmpl-α"), []byte("old")},
	}
}

func TestHostile(t *testing.T) {
	out := func(arr string) []byte { return arrayMsg(t, arr) }
	aux := make([]byte, 2048)
	cases := []struct {
		name   string
		frames [][]byte
		reason decodeguard.Reason
		detail string
	}{
		{"no frames", nil, decodeguard.ReasonEnvelope, "no frames"},
		{"bare int (the seed)", [][]byte{{0x45}}, decodeguard.ReasonDecode, "want an array"},
		{"frame count bomb", make([][]byte, defaultMaxFrames+1), decodeguard.ReasonOversize, "frames"},
		{"aux index out of range", [][]byte{out("93a33c663492cc800405"), aux}, decodeguard.ReasonDecode, "out of range"},
		{"aux index zero", [][]byte{out("93a33c663492cc800400"), aux}, decodeguard.ReasonDecode, "out of range"},
		{"aux index negative", [][]byte{out("93a33c663492cc8004ff"), aux}, decodeguard.ReasonDecode, "out of range"},
		{"aux frame unused", [][]byte{out(vecInlineI4), aux}, decodeguard.ReasonDecode, "not referenced"},
		{"shape/len mismatch", [][]byte{out("93a33c663492cc800401"), aux[:100]}, decodeguard.ReasonDecode, "need 2048"},
		{"shape overflow", [][]byte{out("93a33c663492cf7fffffffffffffffcf7fffffffffffffff01"), aux}, decodeguard.ReasonOversize, "overflows"},
		{"empty array, huge extent", [][]byte{out("93a33c69349200ce40000000c403000000")}, decodeguard.ReasonOversize, "maxEmptyExtent"},
		{"negative dim", [][]byte{out("93a33c693491ffc70c03010000000200000003000000")}, decodeguard.ReasonDecode, "negative"},
		{"too many dims", [][]byte{out("93a33c693499010101010101010101c70c03010000000200000003000000")}, decodeguard.ReasonOversize, "dimensions"},
		{"big-endian dtype", [][]byte{out("93a33e69349103c70c03010000000200000003000000")}, decodeguard.ReasonDecode, "unknown dtype"},
		{"dtype with escapes", [][]byte{out("93a51b5b324a349103c70c03010000000200000003000000")}, decodeguard.ReasonDecode, `\x1b`},
		{"pickle ext 1", [][]byte{out("93a33c69349103c70c01010000000200000003000000")}, decodeguard.ReasonDecode, "ext type"},
		{"pickle ext 2", [][]byte{out("93a33c69349103c70c02010000000200000003000000")}, decodeguard.ReasonDecode, "ext type"},
		{"array of 2", [][]byte{out("92a33c69349103")}, decodeguard.ReasonDecode, "[dtype, shape, data]"},
		{"output missing token ids", [][]byte{unhex(t, "94009191a178c0cb40c81cd6c8b43958")}, decodeguard.ReasonDecode, "at least"},
		{"negative engine", [][]byte{unhex(t, "91ff")}, decodeguard.ReasonValidate, "negative"},
		{"trailing bytes", [][]byte{unhex(t, "9100c0")}, decodeguard.ReasonDecode, "bytes left"},
		{"invalid UTF-8 request id", [][]byte{unhex(t, "94009192a2c32890c0cb40c81cd6c8b43958")}, decodeguard.ReasonDecode, "UTF-8"},
		{"invalid UTF-8 in a stop str", [][]byte{unhex(t, "94009197a17890c0c0c0c0a2c328c0cb40c81cd6c8b43958")}, decodeguard.ReasonDecode, "UTF-8"},
		{"pickle in kv_transfer_params", [][]byte{unhex(t, "94009199a17890c0c0c0c0c0c0d40100c0cb40c81cd6c8b43958")}, decodeguard.ReasonDecode, "ext type"},
		{"deep kv_transfer_params", [][]byte{append(append(unhex(t, "94009199a17890c0c0c0c0c0c0"), bytes.Repeat([]byte{0x91}, 40)...), unhex(t, "c0c0cb40c81cd6c8b43958")...)}, decodeguard.ReasonOversize, "deeper"},
		{"finished id not UTF-8", [][]byte{unhex(t, "960090c0cb40c81cd6c8b43958c091a2c328")}, decodeguard.ReasonDecode, "UTF-8"},
		{"token count beyond bytes", [][]byte{unhex(t, "9400919"+"2a178dcffff01c0cb40c81cd6c8b43958")}, decodeguard.ReasonDecode, "bytes left"},
	}
	for _, c := range cases {
		var m Message
		err := Decode(c.frames, &m, nil)
		if r := decodeguard.ReasonOf(err); r != c.reason || !strings.Contains(err.Error(), c.detail) {
			t.Errorf("%s: got %v (%v), want %v containing %q", c.name, err, r, c.reason, c.detail)
		}
		if err != nil && strings.ContainsRune(err.Error(), 0x1b) {
			t.Errorf("%s: raw escape in the error", c.name)
		}
	}
	// The same aux frame twice.
	m := &Message{Header: Header{Timestamp: 1}, Outputs: []Output{{RequestID: []byte("a"), NewTokenIDs: []int64{1},
		PoolingOutput: Array{DType: dtUint8, Shape: []int{300}, Data: make([]byte, 300)},
		RoutedExperts: Array{DType: dtUint8, Shape: []int{300}, Data: make([]byte, 300)}}}}
	frames := (&Encoder{}).Encode(m)
	body := bytes.Replace(frames[0], []byte{0xcd, 0x01, 0x2c, 0x02}, []byte{0xcd, 0x01, 0x2c, 0x01}, 1)
	if err := Decode([][]byte{body, frames[1], frames[2]}, &Message{}, nil); !strings.Contains(errString(err), "twice") {
		t.Errorf("aux twice: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestDecodeReuseNoAlloc(t *testing.T) {
	frames := (&Encoder{}).Encode(fullMessage())
	frames = append([][]byte(nil), frames...)
	var m Message
	if err := Decode(frames, &m, nil); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(50, func() {
		if err := Decode(frames, &m, nil); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per decode into a reused Message", n)
	}
	// A smaller message after a larger one leaves no stale values.
	if err := Decode([][]byte{unhex(t, vecOutputs)}, &m, nil); err != nil {
		t.Fatal(err)
	}
	if m.Outputs[0].NewLogprobs.Present || m.HasUtilityOutput || m.Outputs[0].HasEvents || m.EngineIndex != 0 {
		t.Fatal("stale fields after reuse")
	}
	// A value built by hand is cleared in full too.
	h := fullMessage()
	if err := Decode([][]byte{unhex(t, vecOutputs)}, h, nil); err != nil {
		t.Fatal(err)
	}
	if o := h.Outputs[0]; o.NewLogprobs.Present || !o.PoolingOutput.IsNil() || o.StopReason.Kind != StopNone ||
		o.KVTransferParams != nil || o.NumNaNsInLogits != 0 || o.NewSamplingMask.Present || h.Utility.HasFailure {
		t.Fatalf("stale fields in a hand-built value: %+v", o)
	}
}

func TestDecodeHeaderRefusesArrays(t *testing.T) {
	var h Header
	err := DecodeHeader(arrayMsg(t, vecInlineI4), nil, &h)
	if !errors.Is(err, &decodeguard.Error{Reason: decodeguard.ReasonDecode}) {
		t.Fatalf("got %v", err)
	}
	n := testing.AllocsPerRun(50, func() { _ = DecodeHeader(unhex(t, vecStats), nil, &h) })
	if n > 1 { // unhex allocates once
		t.Errorf("%v allocations", n)
	}
}

func TestAppendHeaderNoAlloc(t *testing.T) {
	h := Header{EngineIndex: 1, HasStats: true, Timestamp: ts}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = appendHeader(buf[:0], &h) }); n != 0 {
		t.Errorf("%v allocations per appendHeader", n)
	}
	var e Encoder
	m := fullMessage()
	e.Encode(m)
	if n := testing.AllocsPerRun(100, func() { e.Encode(m) }); n != 0 {
		t.Errorf("%v allocations per Encode into a warm Encoder", n)
	}
}

// TestSignedCallIDs: negative call ids (vLLM's notifications) decode into
// Special and re-encode as negative fixints; a signed width holding a
// non-negative id is an ordinary id; uint64 ids above 2^63 stay CallID.
func TestSignedCallIDs(t *testing.T) {
	var e Encoder
	for _, tc := range []struct {
		name    string
		id      string // msgpack of call_id
		callID  uint64
		special int64
	}{
		{"eep -1", "ff", 0, callIDEEPNotification},
		{"ft -2", "fe", 0, callIDFTStatus},
		{"int8 -100", "d09c", 0, -100},
		{"int64 min", "d38000000000000000", 0, math.MinInt64},
		{"int8 5", "d005", 5, 0},
		{"uint64 high", "cfab54a98ceb1f0ad2", 0xab54a98ceb1f0ad2, 0},
	} {
		body := unhex(t, "980090c0cb40c81cd6c8b4395893"+tc.id+"c092c0c0c0c0c0")
		var m Message
		if err := Decode([][]byte{body}, &m, nil); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !m.HasUtilityOutput || m.Utility.CallID != tc.callID || m.Utility.Special != tc.special {
			t.Fatalf("%s: call id %d special %d", tc.name, m.Utility.CallID, m.Utility.Special)
		}
		again := e.Encode(&m)[0]
		var m2 Message
		if err := Decode([][]byte{again}, &m2, nil); err != nil || m2.Utility.CallID != tc.callID || m2.Utility.Special != tc.special {
			t.Fatalf("%s: re-encoded %x: %+v %v", tc.name, again, m2.Utility, err)
		}
		if tc.special < 0 && tc.special >= -32 && !bytes.Contains(again, []byte{0x93, byte(tc.special)}) {
			t.Fatalf("%s: not a negative fixint: %x", tc.name, again)
		}
	}
}

// TestDecodeReuseFieldByField decodes, into one reused Message, outputs
// that set one field after new_token_ids at a time (vLLM's full-length
// struct with the others nil), each followed by the common all-nil output,
// and checks every decode against a fresh one: the decoder's nil fast
// paths and clean-output reset leave nothing stale and miss nothing.
func TestDecodeReuseFieldByField(t *testing.T) {
	full := fullMessage().Outputs[0]
	plain := Output{RequestID: []byte("cmpl-1"), NewTokenIDs: []int64{300}}
	only := func(i int) Output {
		o := plain
		switch i {
		case 2:
			o.NewLogprobs = full.NewLogprobs
		case 3:
			o.NewPromptLogprobs = full.NewPromptLogprobs
		case 4:
			o.PoolingOutput = full.PoolingOutput
		case 5:
			o.HasFinishReason, o.FinishReason = true, full.FinishReason
		case 6:
			o.StopReason = full.StopReason
		case 7:
			o.HasEvents, o.Events = true, full.Events
		case 8:
			o.KVTransferParams = full.KVTransferParams
		case 9:
			o.ECTransferParams = []byte{0x80}
		case 10:
			o.TraceHeaders = full.TraceHeaders
		case 11:
			o.PrefillStats = []byte{0x80}
		case 12:
			o.RoutedExperts = full.RoutedExperts
		case 13:
			o.NumNaNsInLogits = full.NumNaNsInLogits
		case 14:
			o.MMCacheMissHashes = full.MMCacheMissHashes
		case 15:
			o.NewSamplingMask = full.NewSamplingMask
		case 16:
			o.SpecDecodeMetrics = full.SpecDecodeMetrics
		}
		return o
	}
	var reused Message
	// new_logprobs with cu_num_generated_tokens, then without it (three
	// fields), then none, in the same output slot.
	lpCu, lp3 := plain, plain
	lpCu.NewLogprobs = full.NewLogprobs
	lpCu.NewLogprobs.Fields, lpCu.NewLogprobs.HasCuNumGenerated, lpCu.NewLogprobs.CuNumGenerated = 4, true, []int64{0, 1}
	lp3.NewLogprobs = full.NewLogprobs
	lp3.NewLogprobs.Fields = 3
	for _, o := range []Output{lpCu, lp3, lpCu, plain, lpCu, only(5), lp3} {
		m := &Message{Header: Header{EngineIndex: 1, Timestamp: ts}, Outputs: []Output{o}}
		m.OutputsLen = 1
		frames := append([][]byte(nil), (&Encoder{}).Encode(m)...)
		var fresh Message
		if err := Decode(frames, &fresh, nil); err != nil {
			t.Fatal(err)
		}
		if err := Decode(frames, &reused, nil); err != nil {
			t.Fatal(err)
		}
		assertSameEncoding(t, &fresh, &reused)
	}
	for i := 2; i <= 16; i++ {
		for _, outs := range [][]Output{{only(i), plain}, {plain, only(i)}, {plain, plain}} {
			m := &Message{Header: Header{EngineIndex: 1, Timestamp: ts}, Outputs: outs}
			m.OutputsLen = len(outs)
			frames := append([][]byte(nil), (&Encoder{}).Encode(m)...)
			var fresh Message
			if err := Decode(frames, &fresh, nil); err != nil {
				t.Fatalf("field %d: %v", i, err)
			}
			if err := Decode(frames, &reused, nil); err != nil {
				t.Fatalf("field %d, reused: %v", i, err)
			}
			assertSameEncoding(t, &fresh, &reused)
			if n := fresh.Outputs[0].Fields; i < 14 && n != 14 {
				t.Fatalf("field %d: the encoder wrote %d fields, want vLLM's 14", i, n)
			}
		}
	}
}

// TestClearKeep: Logprobs.clearKeep leaves every field zero (slices empty,
// capacity kept), so a field added to Logprobs later and not cleared there
// fails here.
func TestClearKeep(t *testing.T) {
	l := fullMessage().Outputs[0].NewLogprobs
	l.HasCuNumGenerated, l.CuNumGenerated = true, []int64{1, 2}
	l.clearKeep()
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.Slice:
			if v.Len() != 0 {
				t.Errorf("%s: %d elements left", path, v.Len())
			}
		default:
			if !v.IsZero() {
				t.Errorf("%s: %v left", path, v)
			}
		}
	}
	walk("Logprobs", reflect.ValueOf(l))
	if cap(l.TokenIDs.Shape) == 0 || cap(l.CuNumGenerated) == 0 {
		t.Error("capacity not kept")
	}
}
