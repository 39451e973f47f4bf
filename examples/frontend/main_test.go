package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun subscribes to its own demo coordinator until the first wave
// publication (engine 0 ends a wave a second after it starts; the engines
// are woken), bounded at 15 s: stats arrive before it.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-demo", "-waves", "1", "-for", "15s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* stats publications, [1-9][0-9]* wave publications, 0 malformed`).MatchString(out.String()) {
		t.Fatalf("unexpected summary: %q", out.String())
	}
}
