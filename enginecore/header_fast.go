package enginecore

import (
	"encoding/binary"
	"math"
)

// headerFast is DecodeHeader's fast path for the forms an engine core sends
// its stats and idle messages in (vLLM's EngineCoreOutputs, msgspec
// array_like, with the SchedulerStats dataclass as a map; the 101-byte
// vector of docs/protocol.md §2):
//
//	fixarray of 4..8 elements:
//	  engine_index      positive fixint
//	  outputs           [] (0x90)
//	  scheduler_stats   nil, or a fixmap whose keys are fixstrs naming the
//	                    fields SchedulerStats reads, counts as positive
//	                    fixints, usages as float64
//	  timestamp         float64
//	  utility_output    nil
//	  finished_requests nil
//	  wave_complete     nil or positive fixint
//	  start_wave        nil or positive fixint
//
// and nothing after it, under limits that let the general one pass accept
// it (the frame within MaxBytes, MaxDepth at least 2, its objects within
// MaxElements). It decodes such a frame into h and reports true; for any
// other input it reports false having changed nothing but h, which the
// general decoder then resets and fills from the first byte, so every
// refusal, its reason, detail and offset, is still the general decoder's.
// The values are those the general decoder gives (FuzzDecodeHeaderOnePass
// and TestHeaderFastSame compare them), and they pass Header.Validate, which
// DecodeHeader then skips: the form's integers are positive fixints, and
// headerFast refuses a usage that is not finite and non-negative (the
// general pass then returns Validate's error). Each byte is looked at once:
// 255 instructions for the stats vector against the general pass's 1,254
// (callgrind, issue 41).
func (h *Header) headerFast(b []byte, d *decoder) bool {
	if noFastPaths || len(b) < 13 || b[0] < 0x94 || b[0] > 0x98 || b[1] > 0x7f || b[2] != 0x90 {
		return false
	}
	n := int(b[0] & 0x0f)
	c := b[3]
	k := 0 // map entries
	if c != 0xc0 {
		if c&0xf0 != 0x80 {
			return false
		}
		k = int(c & 0x0f)
	}
	// The general pass charges the array's n elements and the map's 2k
	// (the top-level array is charged already), and refuses nesting (the
	// outputs array, the map) under MaxDepth 2.
	if n+2*k > d.budget || d.rawLim.MaxDepth < 2 {
		return false
	}
	*h = Header{Fields: n, EngineIndex: int64(b[1]), HasStats: c != 0xc0}
	s := &h.Stats
	p := 4
	for range k {
		if p >= len(b) || b[p]&0xe0 != 0xa0 {
			return false
		}
		end := p + 1 + int(b[p]&0x1f) // the key's end: its value's first byte
		if end >= len(b) {
			return false
		}
		key, v := b[p+1:end], b[end]
		var f *float64
		switch string(key) {
		case keyNumRunningReqs:
			if v > 0x7f {
				return false
			}
			s.NumRunningReqs = int64(v)
		case keyNumWaitingReqs:
			if v > 0x7f {
				return false
			}
			s.NumWaitingReqs = int64(v)
		case keyStepCounter:
			if v > 0x7f {
				return false
			}
			s.StepCounter = int64(v)
		case keyCurrentWave:
			if v > 0x7f {
				return false
			}
			s.CurrentWave = int64(v)
		case keyNumSkippedWaitingReqs:
			if v > 0x7f {
				return false
			}
			s.NumSkippedWaitingReqs = int64(v)
		case keyKVCacheUsage:
			f = &s.KVCacheUsage
		case keyEncoderCacheUsage:
			f = &s.EncoderCacheUsage
		default:
			return false
		}
		if f == nil {
			p = end + 1
			continue
		}
		if v != 0xcb || len(b)-end < 9 {
			return false
		}
		*f = math.Float64frombits(binary.BigEndian.Uint64(b[end+1 : end+9]))
		if !usageOK(*f) {
			return false
		}
		p = end + 9
	}
	// timestamp (n >= 4 always)
	if len(b)-p < 9 || b[p] != 0xcb {
		return false
	}
	h.Timestamp = math.Float64frombits(binary.BigEndian.Uint64(b[p+1 : p+9]))
	p += 9
	// utility_output and finished_requests nil; wave_complete and
	// start_wave nil or a positive fixint.
	for i := 4; i < n; i++ {
		if p >= len(b) {
			return false
		}
		v := b[p]
		p++
		switch {
		case v == 0xc0:
		case i >= 6 && v <= 0x7f:
			if i == 6 {
				h.HasWaveComplete, h.WaveComplete = true, int64(v)
			} else {
				h.HasStartWave, h.StartWave = true, int64(v)
			}
		default:
			return false
		}
	}
	return p == len(b)
}
