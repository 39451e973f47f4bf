//go:build !linux

package kvindex_test

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }
