package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun serves until it has fetched its own metadata once (bounded at
// 60 s; it used to serve for one second, which a loaded machine could spend
// before the self-check was answered).
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-bind", "tcp://127.0.0.1:0", "-self-check", "-exit", "-for", "60s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "self-check: tp 1 of prefill-0: 64 regions, 4096 blocks of 16 tokens, layout HND") ||
		!strings.Contains(s, "served 1 (V1 0, V2 0, V3 1)") {
		t.Fatalf("unexpected output: %q", s)
	}
}
