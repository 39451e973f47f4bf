package decodeguard_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/zmqguard/zmqguard/decodeguard"
)

// A validator classifies what it refuses; the layer above counts the drop
// under its reason and goes on, while any other error surfaces.
func ExampleReasonOf() {
	validate := func(wave int64) error {
		if wave < 0 {
			return decodeguard.NewError(decodeguard.ReasonValidate, "negative wave number")
		}
		return nil
	}
	var dropped decodeguard.Counts
	for _, err := range []error{validate(-1), validate(3), errors.New("disk full")} {
		if decodeguard.IsBadInput(err) {
			dropped[decodeguard.ReasonOf(err)]++
		} else if err != nil {
			fmt.Println("surfaces:", err)
		}
	}
	b, _ := json.Marshal(dropped)
	fmt.Println(string(b), dropped.Total())
	// Output:
	// surfaces: disk full
	// {"validate":1} 1
}
