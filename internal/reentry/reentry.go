// Package reentry lets a method that waits for a library's goroutines
// (Close, Remove) tell whether it was called from inside a callback that
// one of those goroutines is running: waiting for that callback to return
// would then wait forever.
//
// A package that calls user code through one function of its own, a
// "marker" (a top-level function that is never inlined), asks
// [Within] whether that marker is on the current goroutine's stack. Within
// is a stack walk, meant for rare calls (Close, Remove), not for every
// message. It sees the current goroutine only: a callback that starts
// another goroutine and waits for it, which then calls Close, is not
// recognised.
package reentry

import (
	"reflect"
	"runtime"
)

// maxFrames bounds the stack walk; a deeper stack is reported as not
// within (the marker would be below it, past any sane call depth).
const maxFrames = 1 << 14

// Marker identifies a marker function for [Within].
type Marker struct {
	entry uintptr
	name  string
}

// NewMarker returns the Marker of fn, which must be a top-level function
// (not a closure or a method value) marked //go:noinline.
func NewMarker(fn any) Marker {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		panic("reentry: NewMarker needs a function")
	}
	pc := v.Pointer()
	m := Marker{entry: pc}
	if f := runtime.FuncForPC(pc); f != nil {
		m.entry, m.name = f.Entry(), f.Name()
	}
	return m
}

// Within reports whether the calling goroutine is running, at any depth,
// inside a call of one of the markers.
func Within(markers ...Marker) bool {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	for n == len(pcs) && len(pcs) < maxFrames {
		pcs = make([]uintptr, 4*len(pcs))
		n = runtime.Callers(2, pcs)
	}
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		for _, m := range markers {
			if f.Entry == m.entry || (m.name != "" && f.Function == m.name) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}
