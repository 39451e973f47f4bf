package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// buildBin builds cmd/zmqguard into a temporary directory.
func buildBin(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "zmqguard")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/zmqguard").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Both attacks in a small size against the real binary: with heartbeats
// off every slow-body peer is cut off by the body timeout (10 s, well
// inside the 40 s hold) and counted as a policy violation; the resize is
// refused and the publications keep their size. It checks outcomes, never
// timings.
func TestAttacksQuick(t *testing.T) {
	bin := buildBin(t)
	var out bytes.Buffer
	if err := run([]string{"-bin", bin, "-conns", "5", "-drip", "1s", "-after", "0s", "-coord-flags", "--heartbeat-interval 0", "slowbody"}, &out); err != nil {
		t.Fatal(err)
	}
	var sb struct {
		Result struct {
			Cut  struct{ N int } `json:"cut_after_header"`
			Held int             `json:"held_to_end"`
		} `json:"result"`
		Exit struct {
			BackOutput struct {
				Refused map[string]uint64 `json:"refused"`
			} `json:"back_output"`
		} `json:"exit_line"`
	}
	if err := json.Unmarshal(out.Bytes(), &sb); err != nil {
		t.Fatalf("%v\n%s", err, out.Bytes())
	}
	if sb.Result.Cut.N != 5 || sb.Result.Held != 0 {
		t.Errorf("slowbody: %d of 5 peers cut, %d held: %s", sb.Result.Cut.N, sb.Result.Held, out.Bytes())
	}
	if sb.Exit.BackOutput.Refused["policy"] < 5 {
		t.Errorf("slowbody: back_output refused %v, want 5 policy", sb.Exit.BackOutput.Refused)
	}
	out.Reset()
	if err := run([]string{"-bin", bin, "-subs", "3", "-watch", "2s", "-after", "0s", "scale"}, &out); err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Result struct {
			Before int `json:"publication_bytes_before"`
			After  int `json:"publication_bytes_after_max"`
			N      int `json:"publications_after"`
		} `json:"result"`
		Exit struct {
			Engines int `json:"engines"`
			Resizes int `json:"resizes"`
			Front   struct {
				StateDrops map[string]uint64 `json:"state_drops"`
			} `json:"front"`
		} `json:"exit_line"`
	}
	if err := json.Unmarshal(out.Bytes(), &sc); err != nil {
		t.Fatalf("%v\n%s", err, out.Bytes())
	}
	if sc.Exit.Engines != 1 || sc.Exit.Resizes != 0 || sc.Exit.Front.StateDrops["validate"] != 1 ||
		sc.Result.N == 0 || sc.Result.After != sc.Result.Before {
		t.Errorf("scale: %+v", sc)
	}
}
