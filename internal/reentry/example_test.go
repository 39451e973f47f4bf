package reentry_test

import (
	"fmt"

	"github.com/zmqguard/zmqguard/internal/reentry"
)

// callback calls user code; it is the marker.
//
//go:noinline
func callback(f func()) { f() }

var marker = reentry.NewMarker(callback)

// A Close that would wait for the callback's goroutine asks Within first.
func Example() {
	closeIt := func() string {
		if reentry.Within(marker) {
			return "inside the callback: mark closed and return"
		}
		return "outside: close and wait"
	}
	fmt.Println(closeIt())
	callback(func() { fmt.Println(closeIt()) })
	// Output:
	// outside: close and wait
	// inside the callback: mark closed and return
}
