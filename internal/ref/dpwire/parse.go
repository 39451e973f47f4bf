package dpwire

import (
	"math"

	"github.com/tinylib/msgp/msgp"

	"github.com/zmqguard/zmqguard/decodeguard"
	"github.com/zmqguard/zmqguard/internal/stack/msgpscan"
)

// StartDPWave is a START_DP_WAVE broadcast to the engines: every engine
// except Exclude (when HasExclude) moves to Wave and starts running.
type StartDPWave struct {
	Wave       int64
	HasExclude bool
	Exclude    int64
	// ExcludeIdentity reports that the exclusion travels as the engine's
	// 2-byte little-endian ZMQ identity (a msgpack bin), as current vLLM
	// front-ends name the engine in their wake message and vLLM's
	// coordinator forwards it unchanged; Exclude is then the index that
	// identity encodes. vLLM's engines compare it with their int index, so
	// no engine skips such a wave (vLLM main at the golden vectors'
	// commit).
	ExcludeIdentity bool
}

// startWaveLimits bounds the pre-scan of a START_DP_WAVE payload, (wave,
// exclude): at most 19 bytes, one level deep.
var startWaveLimits = decodeguard.Limits{MaxDepth: 2, MaxElements: 8, MaxBytes: 256}

// ParseStartDPWave parses the second frame of a START_DP_WAVE broadcast,
// msgpack (wave, exclude_engine_index) with exclude nil, an int, or the
// engine's 2-byte little-endian ZMQ identity as a bin (what vLLM's
// coordinator forwards from a current front-end's wake; StartDPWave.
// ExcludeIdentity is then set), as an engine receives it. Errors are classified *[decodeguard.Error]s:
// ReasonDecode for malformed msgpack or a wrong shape or type,
// ReasonOversize for a frame over 256 bytes, ReasonValidate for a negative
// or too large wave or a negative exclusion. It allocates nothing on
// success.
func ParseStartDPWave(b []byte) (StartDPWave, error) {
	if err := msgpscan.Scan(b, &startWaveLimits); err != nil {
		return StartDPWave{}, err
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 2 {
		return StartDPWave{}, frontError(decodeguard.ReasonDecode, b, b, "START_DP_WAVE: want a 2-element array", nil)
	}
	at := rest
	var sw StartDPWave
	sw.Wave, rest, err = msgp.ReadInt64Bytes(rest)
	if err != nil {
		return StartDPWave{}, intError(b, at, "START_DP_WAVE: wave", err)
	}
	if sw.Wave < 0 || sw.Wave > MaxWave {
		return StartDPWave{}, frontError(decodeguard.ReasonValidate, b, at, "START_DP_WAVE: wave out of range", nil)
	}
	at = rest
	if msgp.IsNil(rest) {
		rest = rest[1:]
	} else if msgp.NextType(rest) == msgp.BinType {
		var id []byte
		id, rest, err = msgp.ReadBytesZC(rest)
		if err != nil || len(id) != 2 {
			return StartDPWave{}, frontError(decodeguard.ReasonDecode, b, at, "START_DP_WAVE: exclude engine identity is not 2 bytes", nil)
		}
		sw.HasExclude, sw.ExcludeIdentity = true, true
		sw.Exclude = int64(id[0]) | int64(id[1])<<8
	} else {
		sw.HasExclude = true
		sw.Exclude, rest, err = msgp.ReadInt64Bytes(rest)
		if err != nil {
			return StartDPWave{}, intError(b, at, "START_DP_WAVE: exclude_engine_index", err)
		}
		if sw.Exclude < 0 {
			return StartDPWave{}, frontError(decodeguard.ReasonValidate, b, at, "START_DP_WAVE: exclude_engine_index is negative", nil)
		}
	}
	if len(rest) != 0 { // Scan refuses trailing bytes; kept for safety
		return StartDPWave{}, frontError(decodeguard.ReasonDecode, b, rest, "bytes left after START_DP_WAVE", nil)
	}
	return sw, nil
}

// Publication is one message a coordinator publishes to its front-ends:
// either the periodic stats (counts, current_wave, engines_running), or,
// at a wave change, (nil, current_wave, engines_running).
type Publication struct {
	// HasCounts reports a stats publication; Loads is then the per-engine
	// [waiting, running] (and kv_cache_usage when KV is set), by engine
	// index. A wave publication has HasCounts false and no Loads.
	HasCounts bool
	Loads     []Load
	// KV reports that the entries had three elements, the third the KV
	// cache usage (the layout of releases with vllm.Rules.StatsKVCacheUsage).
	KV bool
	// Wave is the current wave, Running whether the engines run.
	Wave    int64
	Running bool
}

// Counts returns the [waiting, running] pairs of a stats publication (nil
// for a wave publication).
func (p *Publication) Counts() [][2]int {
	if !p.HasCounts {
		return nil
	}
	out := make([][2]int, len(p.Loads))
	for i, l := range p.Loads {
		out[i] = [2]int{int(l.Waiting), int(l.Running)}
	}
	return out
}

// publicationLimits bounds the pre-scan of a publication: three levels
// deep (the message, counts, an entry), MaxEngines entries of 4 objects.
var publicationLimits = decodeguard.Limits{MaxDepth: 3, MaxElements: 4*MaxEngines + 8}

// ParsePublication parses one message received from a coordinator's front
// publish socket into dst, reusing dst.Loads' capacity. Every engine entry
// must have the same layout, [waiting, running] or [waiting, running,
// kv_cache_usage], with non-negative integer counts and a finite
// non-negative float usage. Errors are classified *[decodeguard.Error]s
// (ReasonDecode for a wrong shape or type, ReasonOversize for a frame over
// 1 MiB or more than MaxEngines entries, ReasonValidate for values out of
// range); dst is then reset.
func ParsePublication(b []byte, dst *Publication) error {
	loads := dst.Loads[:0]
	*dst = Publication{}
	err := parsePublication(b, dst, loads)
	if err != nil {
		*dst = Publication{Loads: loads[:0]}
	}
	return err
}

func parsePublication(b []byte, dst *Publication, loads []Load) error {
	if err := msgpscan.Scan(b, &publicationLimits); err != nil {
		return err
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil || n != 3 {
		return frontError(decodeguard.ReasonDecode, b, b, "publication: want a 3-element array", nil)
	}
	at := rest
	if msgp.IsNil(rest) {
		rest = rest[1:]
		dst.Loads = loads
	} else {
		var k uint32
		k, rest, err = msgp.ReadArrayHeaderBytes(rest)
		if err != nil {
			return frontError(decodeguard.ReasonDecode, b, at, "publication: counts: want nil or an array", nil)
		}
		if k > MaxEngines {
			return frontError(decodeguard.ReasonOversize, b, at, "publication: more engines than MaxEngines", nil)
		}
		dst.HasCounts = true
		for i := uint32(0); i < k; i++ {
			at = rest
			var m uint32
			m, rest, err = msgp.ReadArrayHeaderBytes(rest)
			if err != nil || m < 2 || m > 3 || (i > 0 && (m == 3) != dst.KV) {
				return frontError(decodeguard.ReasonDecode, b, at, "publication: engine entry: want [waiting, running] or [waiting, running, kv_cache_usage] throughout", nil)
			}
			dst.KV = m == 3
			var l Load
			if l.Waiting, rest, err = msgp.ReadInt64Bytes(rest); err != nil {
				return intError(b, at, "publication: waiting", err)
			}
			if l.Running, rest, err = msgp.ReadInt64Bytes(rest); err != nil {
				return intError(b, at, "publication: running", err)
			}
			if m == 3 {
				if l.KVCacheUsage, rest, err = msgpscan.ReadFloat(rest); err != nil {
					return frontError(decodeguard.ReasonDecode, b, at, "publication: kv_cache_usage: want a float", nil)
				}
			}
			if l.Waiting < 0 || l.Running < 0 || !usageOK(l.KVCacheUsage) {
				return frontError(decodeguard.ReasonValidate, b, at, "publication: engine entry out of range", nil)
			}
			loads = append(loads, l)
		}
		dst.Loads = loads
	}
	at = rest
	if dst.Wave, rest, err = msgp.ReadInt64Bytes(rest); err != nil {
		return intError(b, at, "publication: current_wave", err)
	}
	if dst.Wave < 0 {
		return frontError(decodeguard.ReasonValidate, b, at, "publication: current_wave out of range", nil)
	}
	at = rest
	if dst.Running, rest, err = msgp.ReadBoolBytes(rest); err != nil {
		return frontError(decodeguard.ReasonDecode, b, at, "publication: engines_running: want a bool", nil)
	}
	if len(rest) != 0 {
		return frontError(decodeguard.ReasonDecode, b, rest, "bytes left after publication", nil)
	}
	return nil
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

// usageOK reports whether a cache usage is a finite non-negative number.
func usageOK(f float64) bool { return f >= 0 && f <= math.MaxFloat64 }
