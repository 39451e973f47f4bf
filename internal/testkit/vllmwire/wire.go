// Package vllmwire is a test fixture: a msgp-generated codec of the
// EngineCoreOutputs message engines push to the DP coordinator, for the
// tests and benchmarks of decodeguard and loop (one generated type for
// both, not a copy in each). It is not the wire's home: the coordinator's
// messages live in internal/ref/dpwire and EngineCoreOutputs in enginecore,
// whose decoders validate values and tolerate what msgspec tolerates.
// It imports nothing of the module, because decodeguard's own tests use
// it and enginecore imports decodeguard.
package vllmwire

//go:generate go run github.com/tinylib/msgp -tests=false

import "github.com/tinylib/msgp/msgp"

// EngineCoreOutputs is vLLM's array-like engine output struct:
// [engine_index, outputs, scheduler_stats, timestamp, utility_output,
// finished_requests, wave_complete, start_wave]. vLLM omits trailing fields
// equal to their defaults, so it is a variable-length tuple: fields missing
// from a frame keep whatever value the destination held, which is why a
// decoder that reuses its destination must reset it first.
//
//msgp:vartuple EngineCoreOutputs
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

// SchedulerStats is the map-encoded subset of vLLM's scheduler statistics a
// DP coordinator reads. Unknown keys are skipped, missing keys stay zero.
type SchedulerStats struct {
	NumRunningReqs        int64    `msg:"num_running_reqs"`
	NumWaitingReqs        int64    `msg:"num_waiting_reqs"`
	NumSkippedWaitingReqs int64    `msg:"num_skipped_waiting_reqs"`
	StepCounter           int64    `msg:"step_counter"`
	CurrentWave           int64    `msg:"current_wave"`
	KVCacheUsage          float64  `msg:"kv_cache_usage"`
	PrefixCacheStats      msgp.Raw `msg:"prefix_cache_stats"`
}
