// Package testwire holds msgp-generated message types used only by
// decodeguard's tests. It mirrors the shape of vLLM's EngineCoreOutputs
// (PROTOCOL.md §2) closely enough to exercise a typed, tuple-encoded decode
// of hostile bytes; it is not a production codec.
package testwire

//go:generate go run github.com/tinylib/msgp -tests=false

import "github.com/tinylib/msgp/msgp"

// EngineCoreOutputs is the array-like struct an engine core sends on its
// output socket: [engine_index, outputs, scheduler_stats, timestamp,
// utility_output, finished_requests, wave_complete, start_wave].
//
// vLLM omits trailing fields that equal their defaults; the generated tuple
// decoder requires all eight, so shorter frames fail with a decode error.
//
//msgp:tuple EngineCoreOutputs
type EngineCoreOutputs struct {
	EngineIndex      int64
	Outputs          []msgp.Raw
	SchedulerStats   *SchedulerStats
	Timestamp        float64
	UtilityOutput    msgp.Raw
	FinishedRequests []string `msg:",allownil"`
	WaveComplete     *int64
	StartWave        *int64
}

// SchedulerStats is the map-encoded subset of vLLM's scheduler statistics
// that the DP coordinator reads. Unknown keys are skipped; missing keys keep
// their zero value.
type SchedulerStats struct {
	NumRunningReqs        int64    `msg:"num_running_reqs"`
	NumWaitingReqs        int64    `msg:"num_waiting_reqs"`
	NumSkippedWaitingReqs int64    `msg:"num_skipped_waiting_reqs"`
	StepCounter           int64    `msg:"step_counter"`
	CurrentWave           int64    `msg:"current_wave"`
	KVCacheUsage          float64  `msg:"kv_cache_usage"`
	PrefixCacheStats      msgp.Raw `msg:"prefix_cache_stats"`
}
