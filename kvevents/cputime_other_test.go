//go:build !linux

package kvevents

import "time"

// threadCPU is not measured off Linux: benchmarks report 0.
func threadCPU() time.Duration { return 0 }
