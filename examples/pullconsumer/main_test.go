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

// TestRun feeds the consumer its own demo traffic for a second: valid
// messages reach the handler, hostile ones are dropped as decode errors.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-bind", "tcp://127.0.0.1:0", "-demo", "-for", "1s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`valid [1-9][0-9]*, dropped [1-9][0-9]* decode=`).MatchString(out.String()) {
		t.Fatalf("unexpected summary: %q", out.String())
	}
}
