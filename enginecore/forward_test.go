package enginecore

import (
	"testing"

	"github.com/tinylib/msgp/msgp"
)

// engineNotifications appends a hand-built engine_notifications value as
// vLLM PR #51433 (open) proposes it: a list of a tagged msgspec union,
// CustomNotification(key, payload). The PR does not fix whether the tagged
// structs are array_like, so form selects the tagged array
// ["CustomNotification", key, payload] or the tagged map
// {"type": "CustomNotification", "key": key, "payload": payload}. These
// bytes are hand-built, not vLLM's: no merged vLLM writes this field.
func engineNotifications(b []byte, form string) []byte {
	b = msgp.AppendArrayHeader(b, 2)
	for _, key := range []string{"lora", "drain"} {
		switch form {
		case "array":
			b = msgp.AppendArrayHeader(b, 3)
			b = msgp.AppendString(b, "CustomNotification")
			b = msgp.AppendString(b, key)
		default:
			b = msgp.AppendMapHeader(b, 3)
			b = msgp.AppendString(b, "type")
			b = msgp.AppendString(b, "CustomNotification")
			b = msgp.AppendString(b, "key")
			b = msgp.AppendString(b, key)
			b = msgp.AppendString(b, "payload")
		}
		// payload: {"adapters": ["a", "b"], "remaining": 3}
		b = msgp.AppendMapHeader(b, 2)
		b = msgp.AppendString(b, "adapters")
		b = msgp.AppendArrayHeader(b, 2)
		b = msgp.AppendString(b, "a")
		b = msgp.AppendString(b, "b")
		b = msgp.AppendString(b, "remaining")
		b = msgp.AppendInt64(b, 3)
	}
	return b
}

// outputsWithNotifications is a hand-built EngineCoreOutputs of 9
// elements: the 8 fields of vLLM main of 2026-08-07 (one request output,
// scheduler stats, start_wave 4), then engine_notifications (vLLM PR
// #51433, also #54830 and #54833, which build on it; all open).
func outputsWithNotifications(form string, outputFields int) []byte {
	b := msgp.AppendArrayHeader(nil, 9)
	b = msgp.AppendInt64(b, 1) // engine_index
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendArrayHeader(b, uint32(outputFields)) // EngineCoreOutput
	b = msgp.AppendString(b, "req-1")
	b = msgp.AppendArrayHeader(b, 2)
	b = msgp.AppendInt64(b, 11)
	b = msgp.AppendInt64(b, 12)
	for i := 2; i < outputFields; i++ {
		switch {
		case i == 13:
			b = msgp.AppendInt64(b, 0) // num_nans_in_logits
		case i < 17:
			b = msgp.AppendNil(b) // every optional field None
		default:
			b = msgp.AppendString(b, "a field of a newer vLLM") // trailing EngineCoreOutput field
		}
	}
	b = msgp.AppendMapHeader(b, 3) // scheduler_stats
	b = msgp.AppendString(b, "num_running_reqs")
	b = msgp.AppendInt64(b, 1)
	b = msgp.AppendString(b, "num_waiting_reqs")
	b = msgp.AppendInt64(b, 2)
	b = msgp.AppendString(b, "a_stat_of_a_newer_vllm")
	b = msgp.AppendArrayHeader(b, 1)
	b = msgp.AppendFloat64(b, 0.5)
	b = msgp.AppendFloat64(b, 12.5) // timestamp
	b = msgp.AppendNil(b)           // utility_output
	b = msgp.AppendNil(b)           // finished_requests
	b = msgp.AppendNil(b)           // wave_complete
	b = msgp.AppendInt64(b, 4)      // start_wave
	return engineNotifications(b, form)
}

// TestTrailingEngineNotifications: an EngineCoreOutputs with the
// engine_notifications element vLLM PR #51433 appends (hand-built, both
// possible tagged forms), an EngineCoreOutput with an 18th element and
// SchedulerStats with an unknown key decode with everything known intact;
// Fields counts what was read past. Both decoders, the full one (Decode)
// and the coordinator's (DecodeHeader).
func TestTrailingEngineNotifications(t *testing.T) {
	for _, form := range []string{"array", "map"} {
		for _, outFields := range []int{14, 18} {
			b := outputsWithNotifications(form, outFields)
			var m Message
			if err := Decode([][]byte{b}, &m, nil); err != nil {
				t.Fatalf("%s, %d output fields: Decode: %v", form, outFields, err)
			}
			if m.Fields != 9 || m.EngineIndex != 1 || !m.HasStartWave || m.StartWave != 4 || m.Timestamp != 12.5 ||
				!m.HasStats || m.Stats.NumRunningReqs != 1 || m.Stats.NumWaitingReqs != 2 || len(m.Outputs) != 1 {
				t.Fatalf("%s: decoded %+v", form, m.Header)
			}
			if o := &m.Outputs[0]; o.Fields != outFields || string(o.RequestID) != "req-1" || len(o.NewTokenIDs) != 2 {
				t.Fatalf("%s: output fields %d id %q tokens %v", form, o.Fields, o.RequestID, o.NewTokenIDs)
			}
			// The coordinator's decoder refuses request outputs by rule,
			// not by shape: check it on the same message without them.
			hb := msgp.AppendArrayHeader(nil, 9)
			hb = msgp.AppendInt64(hb, 1)
			hb = msgp.AppendArrayHeader(hb, 0)
			hb = msgp.AppendMapHeader(hb, 1)
			hb = msgp.AppendString(hb, "num_waiting_reqs")
			hb = msgp.AppendInt64(hb, 2)
			hb = msgp.AppendFloat64(hb, 12.5)
			hb = msgp.AppendNil(hb)
			hb = msgp.AppendNil(hb)
			hb = msgp.AppendNil(hb)
			hb = msgp.AppendInt64(hb, 4)
			hb = engineNotifications(hb, form)
			var h Header
			if err := DecodeHeader(hb, nil, &h); err != nil {
				t.Fatalf("%s: DecodeHeader: %v", form, err)
			}
			if h.Fields != 9 || !h.HasStartWave || h.StartWave != 4 || h.Stats.NumWaitingReqs != 2 {
				t.Fatalf("%s: header %+v", form, h)
			}
		}
	}
}
