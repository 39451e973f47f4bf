package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the router against its three engines on loopback and checks
// what it prints: the engines' stores published before it joined reached
// the index through replay (FromStart), engine-2's eviction of the first
// block leaves it no prefix, and engine-1's 5 blocks win.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-wait", "60s"}, &out, io.Discard); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	want := `prompt: 103 tokens, 6 full blocks of 16
engine-0: 32 cached tokens (2 blocks)
engine-1: 80 cached tokens (5 blocks)
engine-2: 0 cached tokens (0 blocks)
route to engine-1: 80 of 103 prompt tokens cached
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
