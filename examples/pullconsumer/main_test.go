package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun feeds the consumer its own demo traffic until it has seen 8
// messages (bounded at 60 s): the demo alternates a valid stats message and
// a hostile frame on one connection, so at least 4 of each arrive; valid
// ones reach the handler, hostile ones are dropped as decode errors.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"-bind", "tcp://127.0.0.1:0", "-demo", "-messages", "8", "-for", "60s"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^received ([0-9]+), valid ([0-9]+), dropped ([0-9]+) decode=`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("unexpected summary: %q", out.String())
	}
	received, _ := strconv.Atoi(m[1])
	valid, _ := strconv.Atoi(m[2])
	dropped, _ := strconv.Atoi(m[3])
	if valid < 4 || dropped < 4 || valid+dropped != received {
		t.Fatalf("want at least 4 valid and 4 dropped of the messages received: %q", out.String())
	}
}
