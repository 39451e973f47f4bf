//go:build !unix

package enginecore

import "time"

func cpuTime() time.Duration { return 0 }
