package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A small run of each attack against the real binary: the program starts
// the publisher, attacks it and prints one JSON object an honest party
// was served in.
func TestSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/zmqguard and runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "zmqguard")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../../cmd/zmqguard").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, mode := range []string{"silent-subs", "replay-flood"} {
		out, err := exec.CommandContext(ctx, "go", "run", ".", "-bin", bin, "-n", "2", "-for", "2s", mode).Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		var r result
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		if r.HonestBatches == 0 || r.RSSPeakMiB == 0 {
			t.Fatalf("%s: %+v", mode, r)
		}
	}
}
