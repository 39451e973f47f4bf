package kvindextest_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/kvindextest"
)

// A backend's conformance test: here the in-memory backend. In a
// backend's own _test.go file, the function given to RunTests is the whole
// test (func TestConformance(t *testing.T) { kvindextest.Run(...) }).
func ExampleRun() {
	conformance := func(t *testing.T) {
		kvindextest.Run(t, func(t *testing.T, capacity int) kvindex.Backend {
			be, err := kvindex.NewMemory(capacity)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { be.Close() })
			return be
		}, kvindextest.Options{PropertySteps: 5})
	}
	// The test's own lines (go test -v) go nowhere: only the verdict is
	// this example's output.
	stdout := os.Stdout
	os.Stdout, _ = os.Open(os.DevNull)
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "TestConformance", F: conformance}})
	os.Stdout.Close()
	os.Stdout = stdout
	fmt.Println("conformant:", ok)
	// Output: conformant: true
}
