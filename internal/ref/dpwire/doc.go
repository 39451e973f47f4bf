// Package dpwire is the one home of vLLM's data-parallel coordinator wire:
// every message the coordinator, its engines and its API front-ends
// exchange, with its encoder (Append*) and its guarded parser (Parse*).
// Package coordinator speaks the protocol with it; the reference peers
// (internal/ref/dppeer), the CLI and the tests build and read messages with it.
//
//	b := dpwire.AppendWakeIdentity(nil, 2, 7)     // front-end -> coordinator
//	m, err := dpwire.ParseFrontMessage(b)         // m.Kind == dpwire.FrontWake
//	p := dpwire.AppendStatsPublishKV(nil, loads, 7, true) // coordinator -> front-ends
//	var pub dpwire.Publication
//	err = dpwire.ParsePublication(p, &pub)
//
// The sockets and messages (docs/protocol.md describes them with the vLLM
// pull requests they come from):
//
//   - front publish (XPUB, front-ends' XSUB connect): front-ends send
//     subscriptions, wake-ups (engine_to_exclude, wave) and
//     ("SCALE_ELASTIC_EP", n) ([ParseFrontMessage]); the coordinator
//     publishes stats (counts, current_wave, engines_running) and wave
//     changes (nil, current_wave, engines_running) ([ParsePublication]).
//   - back output (PULL, engines' PUSH connect): engines push
//     EngineCoreOutputs, decoded by enginecore.DecodeHeader and written by
//     [AppendHeader].
//   - back publish (XPUB, engines' XSUB connect): engines subscribe
//     ([CheckBackMessage]); the coordinator sends [ReadyFrame] and
//     START_DP_WAVE, the frames [StartDPWaveFrame] and (wave,
//     exclude_engine_index) ([ParseStartDPWave]).
//
// Every parser refuses bad input with a classified *decodeguard.Error
// before it allocates, and never panics.
package dpwire

import "math"

// Frames, commands and bounds of the coordinator protocol.
const (
	// ReadyFrame is the single frame the coordinator sends on its back
	// publish socket once every engine has subscribed (and again whenever
	// an engine re-subscribes later).
	ReadyFrame = "READY"
	// StartDPWaveFrame is the first frame of a START_DP_WAVE message:
	// vLLM's EngineCoreRequestType.START_DP_WAVE, the single byte 0x02.
	StartDPWaveFrame = "\x02"
	// ScaleElasticEP is the command string of a front-end's elastic-EP
	// scale notice ("SCALE_ELASTIC_EP", n).
	ScaleElasticEP = "SCALE_ELASTIC_EP"
	// MaxEngines is the most engines the protocol can address: vLLM names
	// an engine by a 2-byte little-endian identity.
	MaxEngines = 1 << 16
	// MaxWave is the largest wave number accepted from the wire (the bound
	// enginecore's Header.Validate applies too): a wave_complete of w moves
	// the coordinator to wave w+1, so w must leave room for that.
	MaxWave = math.MaxInt64 - 1
)
