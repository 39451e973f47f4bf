package msgpscan

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/testkit/vllmwire"
)

// fullStats is an 8-field EngineCoreOutputs carrying the minimal stats map.
var fullStats = func() []byte {
	// vecStats is [1, [], {4 pairs}, ts]; make it an 8-array with nils.
	b := append([]byte{0x98}, vecStats[1:]...)
	return append(b, 0xc0, 0xc0, 0xc0, 0xc0)
}()

func TestDecodeMsgpVectors(t *testing.T) {
	var out vllmwire.EngineCoreOutputs
	if err := DecodeMsgp(vecStartWave, nil, &out); err != nil {
		t.Fatalf("start_wave: %v", err)
	}
	if out.EngineIndex != 1 || len(out.Outputs) != 0 || out.SchedulerStats != nil ||
		out.Timestamp != 12345.678 || out.StartWave == nil || *out.StartWave != 8 || out.WaveComplete != nil {
		t.Errorf("start_wave decoded as %+v", out)
	}

	// vLLM omits trailing default fields; the generated variable-length
	// tuple decoder takes the frames as vLLM sends them.
	for name, b := range map[string][]byte{"full": fullStats, "stats (4 fields)": vecStats} {
		out = vllmwire.EngineCoreOutputs{}
		if err := DecodeMsgp(b, nil, &out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := out.SchedulerStats; s == nil || s.NumRunningReqs != 3 || s.NumWaitingReqs != 5 ||
			s.StepCounter != 42 || s.CurrentWave != 7 || out.Timestamp != 12345.678 {
			t.Errorf("%s: decoded as %+v / %+v", name, out, out.SchedulerStats)
		}
	}
	out = vllmwire.EngineCoreOutputs{}
	if err := DecodeMsgp(vecWaveComplete, nil, &out); err != nil || out.WaveComplete == nil || *out.WaveComplete != 7 {
		t.Fatalf("wave_complete (7 fields): %v, %+v", err, out)
	}

	// A field of the wrong type is a classified decode error wrapping
	// msgp's own (here outputs, an array, given as a str).
	err := DecodeMsgp(hx("92 01 a3616263"), nil, &vllmwire.EngineCoreOutputs{})
	var te msgp.TypeError
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode || !errors.As(err, &te) {
		t.Errorf("wrong field type: DecodeMsgp = %v, want decodeguard.ReasonDecode wrapping msgp.TypeError", err)
	}
}

// An int frame where an array is expected: Scan accepts it, the typed
// decode refuses it with a classified error (the engine-client seed).
func TestSeedIntFrameTypedDecode(t *testing.T) {
	err := DecodeMsgp(hx("45"), nil, &vllmwire.EngineCoreOutputs{})
	var e *decodeguard.Error
	var te msgp.TypeError
	if !errors.As(err, &e) || e.Reason != decodeguard.ReasonDecode || !errors.As(err, &te) {
		t.Fatalf("DecodeMsgp(45) = %v, want decodeguard.ReasonDecode wrapping msgp.TypeError", err)
	}
	if !decodeguard.IsBadInput(err) {
		t.Error("not bad input")
	}
}

func TestDecodeMsgpScanFirst(t *testing.T) {
	// The scan refuses before the decoder could make([]msgp.Raw, 4G).
	err := DecodeMsgp(hx("98 01 ddffffffff c0 cb40c81cd6c8b43958 c0 c0 c0 c0"), nil, &vllmwire.EngineCoreOutputs{})
	var e *decodeguard.Error
	if !errors.As(err, &e) || e.Detail != errArrayLen.Detail || e.Offset != 2 {
		t.Fatalf("DecodeMsgp = %v, want the scan's array-length error at 2", err)
	}
	if _, err := DecodeUntyped(hx("ddffffffff"), nil); !errors.As(err, &e) || e.Detail != errArrayLen.Detail {
		t.Fatalf("DecodeUntyped = %v", err)
	}
}

type panicky struct{ val any }

func (p panicky) UnmarshalMsg([]byte) ([]byte, error) { panic(p.val) }

type indexer struct{}

func (indexer) UnmarshalMsg(b []byte) ([]byte, error) { return b[len(b)+1:], nil }

type leaver struct{}

func (leaver) UnmarshalMsg(b []byte) ([]byte, error) { return b[1:], nil }

type failer struct{ err error }

func (f failer) UnmarshalMsg(b []byte) ([]byte, error) { return b, f.err }

func TestDecodeMsgpPanicBoundary(t *testing.T) {
	err := DecodeMsgp(hx("01"), nil, panicky{"boom \x1b[31mred\x1b[0m"})
	var e *decodeguard.Error
	var pe *PanicError
	if !errors.As(err, &e) || e.Reason != decodeguard.ReasonDecoderPanic || !errors.As(err, &pe) {
		t.Fatalf("DecodeMsgp = %v, want decodeguard.ReasonDecoderPanic with *PanicError", err)
	}
	if !decodeguard.IsBadInput(err) {
		t.Error("not bad input")
	}
	if s := err.Error(); strings.ContainsRune(s, 0x1b) || !strings.Contains(s, `boom \x1b[31mred`) {
		t.Errorf("Error() = %q, want the panic text with escapes escaped", s)
	}
	if pe.Value != "boom \x1b[31mred\x1b[0m" || !bytes.Contains(pe.Stack, []byte("panicky")) {
		t.Errorf("PanicError = %v / stack %q", pe.Value, pe.Stack)
	}

	err = DecodeMsgp(hx("01"), nil, indexer{})
	var re runtime.Error
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecoderPanic || !errors.As(err, &re) {
		t.Errorf("index panic: %v, want decodeguard.ReasonDecoderPanic wrapping runtime.Error", err)
	}
	if _, err := DecodeUntyped(hx("01"), nil); err != nil {
		t.Errorf("DecodeUntyped(01) = %v", err)
	}
}

func TestDecodeMsgpErrors(t *testing.T) {
	err := DecodeMsgp(hx("9101"), nil, leaver{})
	var e *decodeguard.Error
	if !errors.As(err, &e) || e.Reason != decodeguard.ReasonDecode || e.Offset != 1 {
		t.Errorf("leftover: %v", err)
	}

	// msgp puts map keys from the wire into its error context: they must
	// not reach Error() raw, and must not make it unbounded.
	key := "\x1b[2J\x1b[31m" + strings.Repeat("k", 10000)
	cause := msgp.WrapError(msgp.TypeError{Method: msgp.IntType, Encoded: msgp.StrType}, "Stats", key)
	err = DecodeMsgp(hx("01"), nil, failer{cause})
	var te msgp.TypeError
	if decodeguard.ReasonOf(err) != decodeguard.ReasonDecode || !errors.As(err, &te) || !errors.Is(err, &decodeguard.Error{Reason: decodeguard.ReasonDecode}) {
		t.Fatalf("DecodeMsgp = %v", err)
	}
	s := err.Error()
	if strings.ContainsRune(s, 0x1b) || len(s) > 400 || !strings.Contains(s, `\x1b[2J`) || !strings.HasSuffix(s, "…") {
		t.Errorf("Error() = %q (len %d)", s, len(s))
	}

	// Bad inputs from the scan are returned as is.
	if err := DecodeMsgp(nil, nil, &vllmwire.EngineCoreOutputs{}); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("empty: %v", err)
	}
	// A nil destination is a bug, not bad input.
	if err := DecodeMsgp(hx("01"), nil, nil); err == nil || decodeguard.IsBadInput(err) {
		t.Errorf("nil destination: %v", err)
	}
}

func TestDecodeUntyped(t *testing.T) {
	v, err := DecodeUntyped(vecStats, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		t.Fatalf("got %#v", v)
	}
	m, ok := a[2].(map[string]any)
	if !ok || m["num_running_reqs"] != int64(3) || a[3] != 12345.678 {
		t.Errorf("got %#v", v)
	}
	// Int keys pass the scan but not msgp's untyped decoder.
	if _, err := DecodeUntyped(hx("810102"), nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("int key: %v", err)
	}
	if _, err := DecodeUntyped(hx("a3e08080"), nil); decodeguard.ReasonOf(err) != decodeguard.ReasonDecode {
		t.Errorf("bad utf8: %v", err)
	}
}
