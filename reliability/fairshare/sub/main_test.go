package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRowsQuick runs the in-process rows in a small size and checks their
// outcomes on the fixed subscriber (never timings): no loss in row 6, no
// live batch dropped after a hostile replay in row 12, the intruder never
// heard in row 7, every honest gap recovered in row 5.
func TestRowsQuick(t *testing.T) {
	out, err := row6(3, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.(map[string]any); m["lost"] != uint64(0) || m["trials_with_loss"] != 0 {
		t.Fatalf("row6: %v", m)
	}
	out, err = row6(3, true)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.(map[string]any); m["then_live_delivered_of_1000"] != 1000 || m["duplicates"] != uint64(0) {
		t.Fatalf("row12: %v", m)
	}
	out, err = row7(2 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.(map[string]any); m["intruder_delivered"] != 0 || m["resets"] != 0 {
		t.Fatalf("row7: %v", m)
	}
	out, err = row5(2, 3, 20*time.Second, false)
	if err != nil {
		t.Fatal(err)
	}
	if m := out.(map[string]any); m["recovered"] != 3 {
		t.Fatalf("row5: %v", m)
	}
}
