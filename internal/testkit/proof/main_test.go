package proof

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// raceEnabled is set by race_test.go when the tests are built with -race;
// the zmqguard command is then built with -race as well.
var raceEnabled bool

// zmqguardBin is the path of the zmqguard command TestMain built.
var zmqguardBin string

// moduleRoot is the directory holding go.mod.
var moduleRoot string

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "zmqguard-proof-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "proof:", err)
		os.Exit(1)
	}
	if err := build(tmp); err != nil {
		fmt.Fprintln(os.Stderr, "proof: building the zmqguard command:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(tmp)
		os.Exit(code)
	}))
}

// build finds the module root with `go env GOMOD` and builds ./cmd/zmqguard
// into dir.
func build(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return fmt.Errorf("not inside a module (GOMOD=%q)", gomod)
	}
	moduleRoot = filepath.Dir(gomod)
	zmqguardBin = filepath.Join(dir, "zmqguard")
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", zmqguardBin, "./cmd/zmqguard")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}
