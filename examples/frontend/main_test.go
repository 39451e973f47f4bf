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

// TestRun subscribes to its own demo coordinator for 1.5 s: stats arrive,
// and the engines are woken (a wave publication).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-demo", "-for", "1500ms"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* stats publications, [1-9][0-9]* wave publications, 0 malformed`).MatchString(out.String()) {
		t.Fatalf("unexpected summary: %q", out.String())
	}
}
