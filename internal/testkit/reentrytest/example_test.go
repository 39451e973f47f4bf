package reentrytest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/zmqguard/zmqguard/internal/testkit/reentrytest"
)

// printT stands in for the *testing.T a test passes.
type printT struct{}

func (printT) Helper()                      {}
func (printT) Fatalf(f string, args ...any) { fmt.Printf("FATAL "+f+"\n", args...) }
func (printT) Errorf(f string, args ...any) { fmt.Printf("ERROR "+f+"\n", args...) }
func (printT) Cleanup(func())               {} // a real test runs it at its end

// A callback closes the service running it; every wait is bounded.
func Example() {
	var t printT
	stop := make(chan struct{})
	calls := 0
	probe := reentrytest.NewProbe(func() int { return calls }, func() error { close(stop); return nil })
	run := reentrytest.Start(t, func(ctx context.Context) error {
		calls++
		probe.Act() // the callback, on the service's goroutine
		<-stop
		return errors.New("closed")
	})
	fmt.Println("stats seen by the callback:", probe.Closed(t, "callback"))
	fmt.Println("run:", run.Result(t, "Run"))
	// Output:
	// stats seen by the callback: 1
	// run: closed
}
