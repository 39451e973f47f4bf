// Package dpwire holds the msgpack encoders of what vLLM's data-parallel
// coordinator sends (the stats and wave publications to front-ends and
// START_DP_WAVE's second frame), shared by package enginecore's public
// Append* functions and package coordinator's streaming encoder, so that
// one copy of each rule exists. The layouts are documented in
// docs/protocol.md and on the enginecore functions.
package dpwire

import "github.com/tinylib/msgp/msgp"

// AppendInt appends i with the smallest msgpack integer encoding, as
// Python's msgpack and msgspec choose it: positive fixint or uint
// 8/16/32/64 for non-negative values, negative fixint or int 8/16/32/64 for
// negative ones.
func AppendInt(dst []byte, i int64) []byte {
	if i >= 0 {
		return msgp.AppendUint64(dst, uint64(i))
	}
	return msgp.AppendInt64(dst, i)
}

// AppendOptInt appends v, or nil when it is not present.
func AppendOptInt(dst []byte, v int64, present bool) []byte {
	if !present {
		return msgp.AppendNil(dst)
	}
	return AppendInt(dst, v)
}

// AppendStatsHeader appends the start of a stats publication
// (counts, current_wave, engines_running) with counts holding engines
// entries; each entry follows with AppendLoad, then AppendStatsTrailer.
func AppendStatsHeader(dst []byte, engines int) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	return msgp.AppendArrayHeader(dst, uint32(engines))
}

// AppendLoad appends one engine's entry: [waiting, running], or with kv
// [waiting, running, kv_cache_usage] (vLLM PR #49204).
func AppendLoad(dst []byte, waiting, running int64, usage float64, kv bool) []byte {
	if !kv {
		dst = msgp.AppendArrayHeader(dst, 2)
		dst = AppendInt(dst, waiting)
		return AppendInt(dst, running)
	}
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = AppendInt(dst, waiting)
	dst = AppendInt(dst, running)
	return msgp.AppendFloat64(dst, usage)
}

// AppendStatsTrailer appends the publication's current_wave and
// engines_running.
func AppendStatsTrailer(dst []byte, wave int64, running bool) []byte {
	dst = AppendInt(dst, wave)
	return msgp.AppendBool(dst, running)
}

// AppendWavePublish appends (nil, current_wave, engines_running).
func AppendWavePublish(dst []byte, wave int64, running bool) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendNil(dst)
	dst = AppendInt(dst, wave)
	return msgp.AppendBool(dst, running)
}

// AppendStartDPWave appends START_DP_WAVE's second frame,
// (wave, exclude_engine_index), exclude nil when hasExclude is false.
func AppendStartDPWave(dst []byte, wave, exclude int64, hasExclude bool) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = AppendInt(dst, wave)
	return AppendOptInt(dst, exclude, hasExclude)
}

// AppendStartDPWaveIdentity appends (wave, exclude) with exclude the
// engine's 2-byte little-endian ZMQ identity as a msgpack bin: what vLLM's
// coordinator forwards when a front-end's wake named the engine that way
// (vLLM main at the golden vectors' commit: (0, b"\x00\x00") is
// 9200c4020000).
func AppendStartDPWaveIdentity(dst []byte, wave int64, engine uint16) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = AppendInt(dst, wave)
	return msgp.AppendBytes(dst, []byte{byte(engine), byte(engine >> 8)})
}
