package socket

import (
	"github.com/zmqguard/zmqguard/internal/reentry"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// The socket calls user code (Options.OnEvent, and the OnViolation and
// OnRelease hooks of Options.Guard) only through these functions, on its
// own goroutines. Close looks for them on its caller's stack: called from
// inside one, it must not wait for the socket's goroutines, one of which is
// its caller.

//go:noinline
func callOnEvent(f func(Event), e Event) { f(e) }

//go:noinline
func callOnViolation(f func(zmtpguard.Violation), v zmtpguard.Violation) { f(v) }

//go:noinline
func callOnRelease(f func(int), n int) { f(n) }

var callbackMarkers = []reentry.Marker{
	reentry.NewMarker(callOnEvent),
	reentry.NewMarker(callOnViolation),
	reentry.NewMarker(callOnRelease),
}

// insideCallback reports whether the caller runs inside one of the
// socket's calls of user code.
func insideCallback() bool { return reentry.Within(callbackMarkers...) }
