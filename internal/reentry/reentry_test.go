package reentry

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

//go:noinline
func invoke(f func()) { f() }

//go:noinline
func other(f func()) { f() }

var invokeMarker = NewMarker(invoke)

// deep recurses n times and then calls f, so that the marker lies under a
// stack deeper than Within's first buffer.
func deep(n int, f func()) {
	if n == 0 {
		f()
		return
	}
	deep(n-1, f)
}

func TestWithin(t *testing.T) {
	if Within(invokeMarker) {
		t.Fatal("Within outside any marker call")
	}
	var got bool
	invoke(func() { got = Within(invokeMarker) })
	if !got {
		t.Fatal("Within inside the marker: false")
	}
	invoke(func() { deep(500, func() { got = Within(invokeMarker) }) })
	if !got {
		t.Fatal("Within 500 frames under the marker: false")
	}
	other(func() { got = Within(invokeMarker) })
	if got {
		t.Fatal("Within inside another function: true")
	}
	// Another goroutine started by the callback is not inside it.
	done := make(chan bool)
	invoke(func() { go func() { done <- Within(invokeMarker) }() })
	if <-done {
		t.Fatal("Within on another goroutine: true")
	}
}

func TestNewMarkerRefusesNonFunctions(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewMarker(42) did not panic")
		}
	}()
	NewMarker(42)
}
