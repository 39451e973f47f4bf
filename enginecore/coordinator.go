package enginecore

import (
	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/dpwire"
)

// The DP coordinator protocol's messages besides EngineCoreOutputs: what
// API front-ends send the coordinator (wake-ups, elastic-EP scale notices),
// what the coordinator publishes to them (stats, wave state) and broadcasts
// to the engines (START_DP_WAVE), and the engines' back-publish
// subscriptions. Package coordinator speaks the protocol with these
// encoders; Go engines, front-ends and tests use them directly.

// scaleElasticEP is the command string of a front-end's elastic-EP scale
// notice.
const scaleElasticEP = "SCALE_ELASTIC_EP"

// AppendScaleElasticEP appends the front-end's elastic-EP scale notice
// ("SCALE_ELASTIC_EP", n).
func AppendScaleElasticEP(dst []byte, n int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = msgp.AppendString(dst, scaleElasticEP)
	return appendInt(dst, int64(n))
}

// AppendWake appends a front-end's wake-up (engine_to_exclude, wave) with the
// excluded engine as an int, or nil when exclude is nil (vLLM releases before
// the 2-byte identities sent ints).
func AppendWake(dst []byte, exclude *int, wave int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	if exclude == nil {
		dst = msgp.AppendNil(dst)
	} else {
		dst = appendInt(dst, int64(*exclude))
	}
	return appendInt(dst, int64(wave))
}

// AppendWakeIdentity appends a front-end's wake-up (engine_to_exclude, wave)
// as current vLLM front-ends send it: the excluded engine as its 2-byte
// little-endian identity, a msgpack bin.
func AppendWakeIdentity(dst []byte, engine uint16, wave int) []byte {
	dst = msgp.AppendArrayHeader(dst, 2)
	dst = msgp.AppendBytes(dst, []byte{byte(engine), byte(engine >> 8)})
	return appendInt(dst, int64(wave))
}

// EngineLoad is one engine's entry in the DP coordinator's stats
// publication.
type EngineLoad struct {
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
		dst = appendInt(dst, int64(c[0]))
		dst = appendInt(dst, int64(c[1]))
	}
	dst = appendInt(dst, int64(wave))
	return msgp.AppendBool(dst, running)
}

// AppendStatsPublishKV appends the publication as current vLLM sends it and
// its front-ends unpack it: counts is a list of [waiting, running,
// kv_cache_usage] per engine, the usage a float64. A front-end of either
// generation fails to unpack the other's layout, so a coordinator must use
// the one its front-ends expect (see coordinator.Config.Release; vLLM PR #49204).
func AppendStatsPublishKV(dst []byte, loads []EngineLoad, wave int, running bool) []byte {
	return appendStats(dst, loads, true, int64(wave), running)
}

func appendStats(dst []byte, loads []EngineLoad, kv bool, wave int64, running bool) []byte {
	dst = dpwire.AppendStatsHeader(dst, len(loads))
	for i := range loads {
		l := &loads[i]
		dst = dpwire.AppendLoad(dst, l.Waiting, l.Running, l.KVCacheUsage, kv)
	}
	return dpwire.AppendStatsTrailer(dst, wave, running)
}

// AppendWavePublish appends the publication sent to front-ends at once when
// the wave or the running state changes: (nil, current_wave,
// engines_running). (nil, 7, False) is 93c007c2.
func AppendWavePublish(dst []byte, wave int, running bool) []byte {
	return dpwire.AppendWavePublish(dst, int64(wave), running)
}

// AppendStartDPWaveIdentity appends the second frame of a START_DP_WAVE
// broadcast whose excluded engine is named by its 2-byte little-endian ZMQ
// identity (a bin), as vLLM's coordinator forwards a current front-end's
// wake: (0, identity of engine 0) is 9200c4020000.
func AppendStartDPWaveIdentity(dst []byte, wave int, engine uint16) []byte {
	return dpwire.AppendStartDPWaveIdentity(dst, int64(wave), engine)
}

// AppendStartDPWave appends the second frame of a START_DP_WAVE broadcast,
// (wave, exclude_engine_index), with exclude nil when no engine is left out;
// the first frame is the single byte 0x02 (vLLM's
// EngineCoreRequestType.START_DP_WAVE). (7, 2) is 920702.
func AppendStartDPWave(dst []byte, wave int, exclude *int) []byte {
	if exclude == nil {
		return dpwire.AppendStartDPWave(dst, int64(wave), 0, false)
	}
	return dpwire.AppendStartDPWave(dst, int64(wave), int64(*exclude), true)
}

var (
	errBackEmpty = decodeguard.NewError(decodeguard.ReasonDecode, "empty back-publish message")
	errBackTopic = decodeguard.NewError(decodeguard.ReasonValidate, "back-publish subscription with a topic: not an engine")
	errBackOther = decodeguard.NewError(decodeguard.ReasonDecode, "back-publish message is not a subscription")
)

// CheckBackMessage classifies one frame received on the coordinator's back
// publish socket: nil for an engine's subscription "\x01" or unsubscription
// "\x00", a ReasonValidate error for a (un)subscription with a topic
// (engines subscribe to everything: this is some other peer) and a
// ReasonDecode error for anything else. A runtime can run it in the receive
// loop's Validate hook, so that every refused frame is counted there.
func CheckBackMessage(b []byte) error {
	switch {
	case len(b) == 0:
		return errBackEmpty
	case len(b) == 1 && (b[0] == 0x01 || b[0] == 0x00):
		return nil
	case b[0] == 0x01 || b[0] == 0x00:
		return errBackTopic
	}
	return errBackOther
}
