package enginecore

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime/debug"
	"unicode/utf8"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// outputsFields is the number of fields of vLLM's EngineCoreOutputs struct
// the decoders know: engine_index, outputs, scheduler_stats, timestamp,
// utility_output, finished_requests, wave_complete, start_wave.
const outputsFields = 8

// maxWave is the largest wave number accepted from the wire. A wave_complete
// of w moves the coordinator to wave w+1, so w must leave room for that.
const maxWave = math.MaxInt64 - 1

// Header is the coordinator's view of vLLM's EngineCoreOutputs: every
// top-level field, with the request outputs, the utility output and the
// finished request ids counted or flagged rather than kept. [Message]
// embeds it and keeps them.
//
// On the wire EngineCoreOutputs is a msgspec Struct with array_like=True:
// an array of every field in order (msgspec ignores omit_defaults for
// array-like structs),
//
//	[engine_index int = 0, outputs [EngineCoreOutput] = [],
//	 scheduler_stats SchedulerStats|nil = nil, timestamp float = 0.0,
//	 utility_output UtilityOutput|nil = nil, finished_requests [str]|nil = nil,
//	 wave_complete int|nil = nil, start_wave int|nil = nil]
//
// which vLLM always sends with all 8 elements. Shorter arrays (fields
// missing at the end take their defaults) and longer ones decode too.
//
// The zero value is the message with every field at its default. Decoding
// into a reused value allocates nothing.
type Header struct {
	// Fields is the number of array elements the frame carried (0 to 8 for
	// the current struct; more from a newer vLLM, whose extra trailing
	// fields are skipped as msgspec does). Encoders ignore it.
	Fields int

	// EngineIndex is the sending engine's data-parallel rank.
	EngineIndex int64
	// OutputsLen is the number of request outputs (EngineCoreOutput).
	OutputsLen int

	// HasStats reports whether scheduler_stats was present (not nil).
	HasStats bool
	// Stats is the decoded scheduler_stats when HasStats is set.
	Stats SchedulerStats

	// Timestamp is the engine's time.monotonic() when it built the message,
	// in seconds.
	Timestamp float64

	// HasUtilityOutput reports whether utility_output was present (not nil).
	HasUtilityOutput bool

	// HasFinishedRequests reports whether finished_requests was present (an
	// array, possibly empty); FinishedRequests is its length.
	HasFinishedRequests bool
	FinishedRequests    int

	// HasWaveComplete reports whether wave_complete was present; rank 0 sends
	// it when the engines have paused at the end of wave WaveComplete.
	HasWaveComplete bool
	WaveComplete    int64

	// HasStartWave reports whether start_wave was present; an engine sends it
	// when it got a request for wave StartWave while paused or behind.
	HasStartWave bool
	StartWave    int64
}

// SchedulerStats is the part of vLLM's SchedulerStats (vllm/v1/metrics/
// stats.py) that zmqguard reads. On the wire it is a Python dataclass,
// which msgspec encodes as a map keyed by field name with every field. It is
// decoded by key: unknown keys are skipped (the field set changes between
// vLLM releases: prefix_cache_stats, spec_decoding_stats, kv_connector_stats,
// cudagraph_stats, perf_stats and the rest are skipped without being
// inspected), missing keys keep their zero value (the dataclass defaults),
// and a repeated key's last value wins.
type SchedulerStats struct {
	// NumRunningReqs is num_running_reqs, the length of the running queue.
	NumRunningReqs int64
	// NumWaitingReqs is num_waiting_reqs, the length of the waiting queue.
	NumWaitingReqs int64
	// NumSkippedWaitingReqs is num_skipped_waiting_reqs (newer releases).
	NumSkippedWaitingReqs int64
	// StepCounter is step_counter, the engine's step within its current wave
	// (reset to 0 when the wave ends).
	StepCounter int64
	// CurrentWave is current_wave, the engine's wave when it took the stats.
	CurrentWave int64
	// KVCacheUsage is kv_cache_usage, the fraction of KV cache blocks in use.
	KVCacheUsage float64
	// EncoderCacheUsage is encoder_cache_usage (some releases).
	EncoderCacheUsage float64
}

// The SchedulerStats keys zmqguard reads.
const (
	keyNumRunningReqs        = "num_running_reqs"
	keyNumWaitingReqs        = "num_waiting_reqs"
	keyNumSkippedWaitingReqs = "num_skipped_waiting_reqs"
	keyStepCounter           = "step_counter"
	keyCurrentWave           = "current_wave"
	keyKVCacheUsage          = "kv_cache_usage"
	keyEncoderCacheUsage     = "encoder_cache_usage"
)

// wireError classifies a decode failure of the object starting at `at`, a
// suffix of orig. The reason is ReasonValidate for an integer too large for
// int64 (the shape is right, the value is not) and ReasonDecode otherwise.
// detail names the field, never its bytes; cause is msgp's error, whose
// text names msgpack types only.
func wireError(orig, at []byte, detail string, cause error) error {
	r := decodeguard.ReasonDecode
	if _, ok := cause.(msgp.UintOverflow); ok {
		r = decodeguard.ReasonValidate
		detail += ": integer out of range"
		cause = nil
	}
	return &decodeguard.Error{Reason: r, Detail: detail, Offset: len(orig) - len(at), Err: cause}
}

// rebase moves the offset of a classified error from a sub-decoder, relative
// to at, to be relative to orig.
func rebase(err error, orig, at []byte) error {
	var e *decodeguard.Error
	if errors.As(err, &e) && e.Offset >= 0 {
		e.Offset += len(orig) - len(at)
	}
	return err
}

// readMapHeader reads a map header, fixmap inline.
func readMapHeader(b []byte) (uint32, []byte, error) {
	if len(b) > 0 && b[0]&0xf0 == 0x80 {
		return uint32(b[0] & 0x0f), b[1:], nil
	}
	return msgp.ReadMapHeaderBytes(b)
}

// readInt reads an integer (any msgpack width, not bool, not float).
func readInt(b []byte) (int64, []byte, error) {
	if len(b) > 0 {
		// The widths a token id, an index or a count takes, read here
		// rather than through msgp's general reader (same results).
		switch c := b[0]; {
		case c <= 0x7f: // positive fixint, the common case
			return int64(c), b[1:], nil
		case c == 0xcd && len(b) >= 3: // uint16
			return int64(binary.BigEndian.Uint16(b[1:3])), b[3:], nil
		case c == 0xce && len(b) >= 5: // uint32
			return int64(binary.BigEndian.Uint32(b[1:5])), b[5:], nil
		case c == 0xcc && len(b) >= 2: // uint8
			return int64(b[1]), b[2:], nil
		}
	}
	return msgp.ReadInt64Bytes(b)
}

// readOptInt reads nil (present=false) or an integer.
func readOptInt(b []byte) (v int64, present bool, o []byte, err error) {
	if msgp.IsNil(b) {
		return 0, false, b[1:], nil
	}
	v, o, err = readInt(b)
	return v, err == nil, o, err
}

// unmarshalMsg decodes one EngineCoreOutputs from the front of b and returns
// the bytes after it. It resets h first, so fields the frame omits read as
// vLLM's defaults rather than the previous message's values.
//
// It accepts an array of any length: missing trailing fields take their
// defaults, and fields beyond the eight it knows are skipped, as msgspec's
// array_like decoding does. Types are checked as msgspec checks them:
// engine_index, wave_complete and start_wave are integers (any msgpack
// width, not bool, not float); timestamp is a float or an integer; outputs
// is an array (its elements are skipped); scheduler_stats is nil or a map
// decoded by SchedulerStats's decoder; utility_output is nil or any
// object (skipped); finished_requests is nil or an array of str.
//
// Errors are *[decodeguard.Error]s: ReasonDecode for a wrong shape or type,
// ReasonValidate for an integer beyond int64. Values are not range-checked
// here; see [Header.Validate]. UnmarshalMsg does not check str contents for
// valid UTF-8: [DecodeHeader] runs msgpscan.Scan, which does. On error,
// h is partly filled and the returned slice is b.
func (h *Header) unmarshalMsg(b []byte) ([]byte, error) {
	return h.unmarshal(b, nil)
}

// unmarshal is unmarshalMsg; with a non-nil full it also decodes the
// outputs, the utility output and the finished request ids into full.
func (h *Header) unmarshal(b []byte, full *decoder) ([]byte, error) {
	*h = Header{}
	orig := b
	if len(b) > 0 && b[0]&0xf0 != 0x90 && b[0] != 0xdc && b[0] != 0xdd {
		// The common junk frame (a port scanner's int, say): no msgp error
		// value to build.
		return orig, wireError(orig, orig, "EngineCoreOutputs: want an array", nil)
	}
	n, b, err := readArrayHeader(b)
	if err != nil {
		return orig, wireError(orig, orig, "EngineCoreOutputs: want an array", err)
	}
	h.Fields = int(n)
	if full != nil {
		if err := full.take(orig, orig, int(n), len(b)); err != nil {
			return orig, err
		}
	}
	for i := uint32(0); i < n; i++ {
		at := b
		var detail string
		switch i {
		case 0:
			detail = "EngineCoreOutputs.engine_index: want an int"
			h.EngineIndex, b, err = readInt(b)
		case 1:
			detail = "EngineCoreOutputs.outputs: want an array"
			var k uint32
			k, b, err = readArrayHeader(b)
			h.OutputsLen = int(k)
			if err == nil && full != nil {
				if err = full.nested(orig, at); err != nil {
					return orig, err
				}
				if err = full.take(orig, at, int(k), len(b)); err != nil {
					return orig, err
				}
				if full.exact {
					for j := uint32(0); j < k; j++ {
						if b, err = full.sub(orig, b, 3); err != nil {
							return orig, err
						}
					}
					break
				}
				b, err = full.outputs(orig, b, int(k))
				if err != nil {
					return orig, err
				}
				break
			}
			for j := uint32(0); err == nil && j < k; j++ {
				b, err = msgp.Skip(b)
			}
		case 2:
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			h.HasStats = true
			b, err = h.Stats.unmarshal(b, full)
			if err != nil {
				return orig, rebase(err, orig, at)
			}
			if full != nil && full.m != nil {
				full.m.StatsRaw = []byte(at[:len(at)-len(b)])
			}
		case 3:
			detail = "EngineCoreOutputs.timestamp: want a float"
			h.Timestamp, b, err = msgpscan.ReadFloat(b)
		case 4:
			detail = "EngineCoreOutputs.utility_output: malformed"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			h.HasUtilityOutput = true
			if full != nil && full.exact {
				if b, err = full.sub(orig, b, 2); err != nil {
					return orig, err
				}
				break
			}
			if full != nil {
				b, err = full.utility(orig, b)
				if err != nil {
					return orig, err
				}
				break
			}
			b, err = msgp.Skip(b)
		case 5:
			detail = "EngineCoreOutputs.finished_requests: want nil or an array of str"
			if msgp.IsNil(b) {
				b = b[1:]
				break
			}
			var k uint32
			k, b, err = msgp.ReadArrayHeaderBytes(b)
			if full != nil && err == nil {
				if err = full.nested(orig, at); err != nil {
					return orig, err
				}
				if !full.exact {
					full.m.FinishedRequestIDs = full.m.FinishedRequestIDs[:0]
				}
				if err = full.take(orig, at, int(k), len(b)); err != nil {
					return orig, err
				}
			}
			for j := uint32(0); err == nil && j < k; j++ {
				var s []byte
				s, b, err = msgp.ReadStringZC(b)
				if full != nil && err == nil {
					if !utf8.Valid(s) {
						return orig, failf(orig, at, decodeguard.ReasonDecode, "EngineCoreOutputs.finished_requests: str is not valid UTF-8")
					}
					if !full.exact {
						full.m.FinishedRequestIDs = append(full.m.FinishedRequestIDs, s)
					}
				}
			}
			h.HasFinishedRequests, h.FinishedRequests = true, int(k)
		case 6:
			detail = "EngineCoreOutputs.wave_complete: want nil or an int"
			h.WaveComplete, h.HasWaveComplete, b, err = readOptInt(b)
		case 7:
			detail = "EngineCoreOutputs.start_wave: want nil or an int"
			h.StartWave, h.HasStartWave, b, err = readOptInt(b)
		default:
			// A field a newer vLLM appended (vLLM PR #51433, open, appends
			// engine_notifications as the 9th): skipped as msgspec does,
			// never a refusal; h.Fields tells the caller it was there.
			detail = "EngineCoreOutputs: malformed extra field"
			if full != nil && full.exact {
				if b, err = full.sub(orig, b, 2); err != nil {
					return orig, err
				}
				break
			}
			if full != nil {
				b, err = full.skip(orig, b)
				if err != nil {
					return orig, err
				}
				break
			}
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return orig, wireError(orig, at, detail, err)
		}
	}
	return b, nil
}

// unmarshal decodes one SchedulerStats map; with a non-nil full (whose input was not
// pre-scanned) keys are checked for UTF-8 and skipped values are scanned.
func (s *SchedulerStats) unmarshal(b []byte, full *decoder) ([]byte, error) {
	*s = SchedulerStats{}
	orig := b
	n, b, err := readMapHeader(b)
	if err != nil {
		return orig, wireError(orig, orig, "EngineCoreOutputs.scheduler_stats: want nil or a map", err)
	}
	if full != nil {
		if err := full.nested(orig, orig); err != nil {
			return orig, err
		}
		if err := full.take(orig, orig, 2*int(n), len(b)); err != nil {
			return orig, err
		}
	}
	for i := uint32(0); i < n; i++ {
		at := b
		var key []byte
		key, b, err = readStr(b)
		if err != nil {
			return orig, wireError(orig, at, "SchedulerStats: key is not a str", err)
		}
		keyAt := at // a known key is valid UTF-8: only others are checked
		at = b
		var detail string
		switch string(key) {
		case keyNumRunningReqs:
			detail = "SchedulerStats.num_running_reqs: want an int"
			s.NumRunningReqs, b, err = readInt(b)
		case keyNumWaitingReqs:
			detail = "SchedulerStats.num_waiting_reqs: want an int"
			s.NumWaitingReqs, b, err = readInt(b)
		case keyNumSkippedWaitingReqs:
			detail = "SchedulerStats.num_skipped_waiting_reqs: want an int"
			s.NumSkippedWaitingReqs, b, err = readInt(b)
		case keyStepCounter:
			detail = "SchedulerStats.step_counter: want an int"
			s.StepCounter, b, err = readInt(b)
		case keyCurrentWave:
			detail = "SchedulerStats.current_wave: want an int"
			s.CurrentWave, b, err = readInt(b)
		case keyKVCacheUsage:
			detail = "SchedulerStats.kv_cache_usage: want a float"
			s.KVCacheUsage, b, err = msgpscan.ReadFloat(b)
		case keyEncoderCacheUsage:
			detail = "SchedulerStats.encoder_cache_usage: want a float"
			s.EncoderCacheUsage, b, err = msgpscan.ReadFloat(b)
		default:
			detail = "SchedulerStats: malformed value"
			if full != nil && !utf8.Valid(key) {
				return orig, failf(orig, keyAt, decodeguard.ReasonDecode, "SchedulerStats: key is not valid UTF-8")
			}
			if full != nil && full.exact {
				if b, err = full.sub(orig, b, 3); err != nil {
					return orig, err
				}
				break
			}
			if full != nil {
				if _, b, err = full.raw(orig, b); err != nil {
					return orig, err
				}
				break
			}
			b, err = msgp.Skip(b)
		}
		if err != nil {
			return orig, wireError(orig, at, detail, err)
		}
	}
	return b, nil
}

// Validate checks the values the coordinator and front-ends rely on and
// returns a ReasonValidate *[decodeguard.Error] for the first one out of
// range: a negative engine_index, a wave_complete or start_wave outside
// [0, maxWave], or scheduler stats with a negative count, step counter or
// wave, or a cache usage that is NaN, infinite or negative.
func (h *Header) Validate() error {
	switch {
	case h.EngineIndex < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.engine_index is negative")
	case h.HasWaveComplete && (h.WaveComplete < 0 || h.WaveComplete > maxWave):
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.wave_complete out of range")
	case h.HasStartWave && (h.StartWave < 0 || h.StartWave > maxWave):
		return decodeguard.NewError(decodeguard.ReasonValidate, "EngineCoreOutputs.start_wave out of range")
	case h.HasStats:
		return h.Stats.validate()
	}
	return nil
}

// validate returns a ReasonValidate *[decodeguard.Error] when a count, the
// step counter or the wave is negative, or a cache usage is NaN, infinite or
// negative.
func (s *SchedulerStats) validate() error {
	switch {
	case s.NumRunningReqs < 0, s.NumWaitingReqs < 0, s.NumSkippedWaitingReqs < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats: negative request count")
	case s.StepCounter < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.step_counter is negative")
	case s.CurrentWave < 0:
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.current_wave is negative")
	case !usageOK(s.KVCacheUsage):
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.kv_cache_usage is not a finite non-negative number")
	case !usageOK(s.EncoderCacheUsage):
		return decodeguard.NewError(decodeguard.ReasonValidate, "SchedulerStats.encoder_cache_usage is not a finite non-negative number")
	}
	return nil
}

func usageOK(f float64) bool { return f >= 0 && f <= math.MaxFloat64 }

var errNilDestination = errors.New("enginecore: decode called with a nil destination")

// DecodeHeader is the guarded one-frame decode the coordinator uses: b into
// dst (which it resets) under lim (nil means decodeguard's defaults, which
// refuse every ext type, so a message with arrays is refused), then
// [Header.Validate]. It decodes in one pass that makes msgpscan.Scan's
// checks as it goes: the frame's length against MaxBytes first; every str
// it reads (stats keys, finished request ids) must be valid UTF-8; the
// typed containers' depth and counts are charged exactly as Scan charges
// them; and every sub-object it does not interpret (the request outputs,
// the utility output, unknown stats values, extra trailing fields) is
// checked by msgpscan.ScanPrefix at the depth of its position. So it
// accepts exactly what msgpscan.Scan followed by Header.unmarshalMsg
// and Validate accepts (FuzzDecodeHeaderOnePass checks this), in about half
// the time. It returns nil or a classified *[decodeguard.Error]:
//
//   - ReasonDecode: not well-formed msgpack, invalid UTF-8, a composite map
//     key, an ext type not in lim.AllowExt, trailing bytes, a wrong shape or
//     type;
//   - ReasonOversize: over MaxBytes (1 MiB), nested deeper than MaxDepth
//     (32), more objects than MaxElements;
//   - ReasonValidate for a value out of range (an integer beyond int64, a
//     negative index, count or wave, a NaN usage);
//   - ReasonDecoderPanic if the decoder panicked (it is not known to; the
//     recover is the frame boundary).
//
// A refused frame gets the very error the two passes give it (Scan's when
// Scan refuses it, else the typed decoder's): the one pass re-runs Scan on
// refusal only. A valid frame into a reused dst
// allocates nothing. A nil dst is a programming error and yields an
// unclassified error.
func DecodeHeader(b []byte, lim *decodeguard.Limits, dst *Header) error {
	if dst == nil {
		return errNilDestination
	}
	err := decodeHeaderOnePass(b, lim, dst)
	if err == nil || decodeguard.ReasonOf(err) == decodeguard.ReasonDecoderPanic {
		return err
	}
	// Refused: report what the two passes would, Scan's error first, so
	// that the reason and offset do not depend on which fault the one pass
	// met first. Only refused frames pay for this.
	return decodeHeaderTwoPass(b, lim, dst)
}

// decodeHeaderOnePass is DecodeHeader's one pass, without the second look
// at a refused frame.
func decodeHeaderOnePass(b []byte, lim *decodeguard.Limits, dst *Header) error {
	d := decoder{exact: true}
	if lim != nil {
		d.rawLim = *lim
	}
	if d.rawLim.MaxDepth <= 0 {
		d.rawLim.MaxDepth = msgpscan.DefaultMaxDepth
	}
	if d.rawLim.MaxElements <= 0 {
		d.rawLim.MaxElements = msgpscan.DefaultMaxElements
	}
	if len(b) > scanMaxBytes(&d.rawLim) {
		*dst = Header{}
		return decodeguard.NewError(decodeguard.ReasonOversize, "EngineCoreOutputs: frame longer than MaxBytes")
	}
	d.budget = d.rawLim.MaxElements - 1 // the top-level object
	fast, err := unmarshalHeader(b, dst, &d)
	if err != nil || fast {
		return err // headerFast's values pass Validate (it checks the usages)
	}
	return dst.Validate()
}

// decodeHeaderTwoPass is the reference [DecodeHeader] is measured and
// fuzzed against: msgpscan.Scan under lim, then Header.unmarshalMsg
// (which must consume the frame), then [Header.Validate].
func decodeHeaderTwoPass(b []byte, lim *decodeguard.Limits, dst *Header) error {
	if dst == nil {
		return errNilDestination
	}
	if err := msgpscan.Scan(b, lim); err != nil {
		*dst = Header{}
		return err
	}
	if _, err := unmarshalHeader(b, dst, nil); err != nil {
		return err
	}
	return dst.Validate()
}

// unmarshalHeader decodes b into dst (one pass when d is set, see
// decodeHeaderOnePass); fast reports that headerFast decoded it.
func unmarshalHeader(b []byte, dst *Header, d *decoder) (fast bool, err error) {
	defer recoverPanic(&err)
	if d != nil && d.exact && dst.headerFast(b, d) {
		return true, nil
	}
	rest, err := dst.unmarshal(b, d)
	if err == nil && len(rest) != 0 {
		err = &decodeguard.Error{Reason: decodeguard.ReasonDecode, Detail: "bytes left after EngineCoreOutputs", Offset: len(b) - len(rest)}
	}
	return false, err
}

// recoverPanic, deferred, turns a decoder panic into a ReasonDecoderPanic
// error: the frame boundary, as in package loop.
func recoverPanic(err *error) {
	if r := recover(); r != nil {
		*err = &decodeguard.Error{
			Reason: decodeguard.ReasonDecoderPanic,
			Detail: "EngineCoreOutputs decoder panicked",
			Offset: -1,
			Err:    &msgpscan.PanicError{Value: r, Stack: debug.Stack()},
		}
	}
}
