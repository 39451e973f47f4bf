package proof

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
)

// Example shows how TestCountersAccount turns what the seed replay says it
// sent into the drops each process must have counted, by reason: here a bare
// DEALER and an unknown rank at the listener, and an int frame at the
// coordinator's back output.
func Example() {
	var s replaySummary
	summary := `{"passed": 8, "sent": {
		"listener": {"valid": 2, "junk": {"bare-dealer": 1, "unknown-rank": 1}},
		"back_output": {"valid": 3, "junk": {"int-frame": 1}}}}`
	if err := json.Unmarshal([]byte(summary), &s); err != nil {
		fmt.Println(err)
		return
	}
	want, err := expectedDrops(s.Sent)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, sock := range replaySockets {
		for _, reason := range slices.Sorted(maps.Keys(want[sock])) {
			fmt.Printf("%s %s %d\n", sock, reason, want[sock][reason])
		}
	}
	// Output:
	// listener envelope 1
	// listener unknown-rank 1
	// back_output decode 1
}
