package main

import (
	"runtime/debug"
	"testing"
)

// The CLI's memory limits are derived from the budgets they hold
// (issue 37): kv-events' from the Subscriber's receive budget (320 MiB by
// default), kv-publish's from the send budgets; GOMEMLIMIT wins.
func TestMemoryLimitsFromBudgets(t *testing.T) {
	if got, want := kvEventsMemLimit(0), int64(2*2*(64<<20+64<<10)+64<<20); got != want {
		t.Errorf("kv-events default limit %d, want %d (2 × MemoryBudget + 64 MiB)", got, want)
	}
	if got, want := kvEventsMemLimit(512<<20), int64(2*2*512<<20+64<<20); got != want {
		t.Errorf("kv-events limit for 512 MiB messages %d, want %d", got, want)
	}
	if got, want := kvPublishMemLimit(0), int64(640<<20); got != want {
		t.Errorf("kv-publish default limit %d, want %d", got, want)
	}
	prev := debug.SetMemoryLimit(-1)
	t.Setenv("GOMEMLIMIT", "")
	set, restore := setMemoryLimit(123 << 20)
	if set != 123<<20 || debug.SetMemoryLimit(-1) != 123<<20 {
		t.Errorf("limit not set: returned %d, runtime %d", set, debug.SetMemoryLimit(-1))
	}
	restore()
	if got := debug.SetMemoryLimit(-1); got != prev {
		t.Errorf("limit not restored: %d, want %d", got, prev)
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	set, restore = setMemoryLimit(123 << 20)
	defer restore()
	if set != 0 || debug.SetMemoryLimit(-1) != prev {
		t.Errorf("GOMEMLIMIT set, yet the limit became %d", debug.SetMemoryLimit(-1))
	}
}
