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

// AppendWavePublish appends the publication sent to front-ends at once
// when the wave or the running state changes: (nil, current_wave,
// engines_running). (nil, 7, False) is 93c007c2.
func AppendWavePublish(dst []byte, wave int64, running bool) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendNil(dst)
	dst = AppendInt(dst, wave)
	return msgp.AppendBool(dst, running)
}

// AppendStartDPWaveIndex appends START_DP_WAVE's second frame,
// (wave, exclude_engine_index), exclude nil when hasExclude is false.
func AppendStartDPWaveIndex(dst []byte, wave, exclude int64, hasExclude bool) []byte {
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

// AppendScaleElasticEP appends the front-end's elastic-EP scale notice
// ("SCALE_ELASTIC_EP", n).
func AppendScaleElasticEP(dst []byte, n int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = msgp.AppendString(dst, ScaleElasticEP)
	return AppendInt(dst, int64(n))
}

// AppendWake appends a front-end's wake-up (engine_to_exclude, wave) with the
// excluded engine as an int, or nil when exclude is nil (vLLM releases before
// the 2-byte identities sent ints).
func AppendWake(dst []byte, exclude *int, wave int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	if exclude == nil {
		dst = msgp.AppendNil(dst)
	} else {
		dst = AppendInt(dst, int64(*exclude))
	}
	return AppendInt(dst, int64(wave))
}

// AppendWakeIdentity appends a front-end's wake-up (engine_to_exclude, wave)
// as current vLLM front-ends send it: the excluded engine as its 2-byte
// little-endian identity, a msgpack bin.
func AppendWakeIdentity(dst []byte, engine uint16, wave int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = msgp.AppendBytes(dst, []byte{byte(engine), byte(engine >> 8)})
	return AppendInt(dst, int64(wave))
}

// Load is one engine's entry in the DP coordinator's stats publication.
type Load struct {
	Waiting      int64   `json:"waiting"`
	Running      int64   `json:"running"`
	KVCacheUsage float64 `json:"kv_cache_usage"`
}

// AppendStatsPublish appends the coordinator's periodic publication to
// front-ends, (counts, current_wave, engines_running), with counts a list of
// [waiting, running] per engine, as vLLM releases up to the one that added
// KV cache usage send it. ([[5,3],[0,1]], 7, True) is 939292050392000107c3.
func AppendStatsPublish(dst []byte, counts [][2]int, wave int, running bool) []byte {
	dst = msgp.AppendArrayHeader(dst, 3)
	dst = msgp.AppendArrayHeader(dst, uint32(len(counts)))
	for _, c := range counts {
		dst = msgp.AppendArrayHeader(dst, 2)
		dst = AppendInt(dst, int64(c[0]))
		dst = AppendInt(dst, int64(c[1]))
	}
	dst = AppendInt(dst, int64(wave))
	return msgp.AppendBool(dst, running)
}

// AppendStatsPublishKV appends the publication as current vLLM sends it and
// its front-ends unpack it: counts is a list of [waiting, running,
// kv_cache_usage] per engine, the usage a float64. A front-end of either
// generation fails to unpack the other's layout, so a coordinator must use
// the one its front-ends expect (see the coordinator's Config.Release; vLLM PR #49204).
func AppendStatsPublishKV(dst []byte, loads []Load, wave int, running bool) []byte {
	return appendStats(dst, loads, true, int64(wave), running)
}

func appendStats(dst []byte, loads []Load, kv bool, wave int64, running bool) []byte {
	dst = AppendStatsHeader(dst, len(loads))
	for i := range loads {
		l := &loads[i]
		dst = AppendLoad(dst, l.Waiting, l.Running, l.KVCacheUsage, kv)
	}
	return AppendStatsTrailer(dst, wave, running)
}

// AppendStartDPWave appends the second frame of a START_DP_WAVE broadcast,
// (wave, exclude_engine_index), with exclude nil when no engine is left out;
// the first frame is the single byte 0x02 (vLLM's
// EngineCoreRequestType.START_DP_WAVE). (7, 2) is 920702.
func AppendStartDPWave(dst []byte, wave int, exclude *int) []byte {
	if exclude == nil {
		return AppendStartDPWaveIndex(dst, int64(wave), 0, false)
	}
	return AppendStartDPWaveIndex(dst, int64(wave), int64(*exclude), true)
}
